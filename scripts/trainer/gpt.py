"""A GPT-2 style decoder-only Transformer: pre-norm blocks, causal SDPA attention, GELU MLP, tied embeddings.

The sizes are GPT-2's own (Radford et al. 2019), plus `gpt-tiny` for CPU tests and `gpt2-small-narrow`,
gpt2-small's 12 blocks at gpt-tiny's width: as many parameters, hooks and per-parameter steps as
gpt2-small per step on the host, at a compute CPU ranks can do (the CPU proxy of FSDP's cost against DDP's,
BENCHMARKS.md). Each block is a separate module in `Transformer.blocks`, which is what FSDP shards,
activation checkpointing recomputes and `--compile` compiles, one block at a time. The model computes its
own loss (`Transformer.loss`), which `--compile` compiles with the output head.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclasses.dataclass(frozen=True)
class GPTShape:
    layers: int
    heads: int
    width: int
    max_seq_len: int = 1024  # GPT-2's context; position embeddings exist for this many tokens


# GPT-2's vocabulary has 50257 tokens; 50304 is the next multiple of 64, which keeps the embedding and
# output matmuls on fast GPU tile sizes (nanoGPT does the same). gpt-tiny uses bytes (256).
GPT_SIZES: dict[str, GPTShape] = {
    "gpt-tiny": GPTShape(layers=2, heads=4, width=128, max_seq_len=256),
    "gpt2-small-narrow": GPTShape(layers=12, heads=4, width=128, max_seq_len=256),
    "gpt2-small": GPTShape(layers=12, heads=12, width=768),    # 124M parameters
    "gpt2-medium": GPTShape(layers=24, heads=16, width=1024),  # 350M
    "gpt2-large": GPTShape(layers=36, heads=20, width=1280),   # 774M
}
DEFAULT_VOCAB_SIZE = {"gpt-tiny": 256, "gpt2-small-narrow": 256, "gpt2-small": 50304, "gpt2-medium": 50304, "gpt2-large": 50304}


class CausalSelfAttention(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.proj = nn.Linear(shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, width = x.shape
        q, k, v = (t.view(batch, seq_len, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=2))
        # SDPA picks the flash or memory-efficient kernel on GPUs; is_causal needs no mask tensor.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq_len, width))


class Block(nn.Module):
    """x + attention(norm(x)), then x + MLP(norm(x)): pre-norm, as in GPT-2."""

    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(shape.width)
        self.attention = CausalSelfAttention(shape)
        self.mlp_norm = nn.LayerNorm(shape.width)
        self.mlp = nn.Sequential(nn.Linear(shape.width, 4 * shape.width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * shape.width, shape.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """Token ids (batch, seq) -> next-token logits (batch, seq, vocab); with targets, the mean loss.

    PADDED_VOCAB_SIZE (a pretrained GPT-2's 50257 tokens rounded up to 50304) gives the embedding more
    rows than the vocabulary has tokens; the logits leave the extra rows out, so no loss sees them.
    """

    def __init__(self, shape: GPTShape, vocab_size: int, padded_vocab_size: int | None = None) -> None:
        super().__init__()
        self.shape, self.vocab_size = shape, vocab_size
        self.token_embedding = nn.Embedding(padded_vocab_size or vocab_size, shape.width)
        self.position_embedding = nn.Embedding(shape.max_seq_len, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.final_norm = nn.LayerNorm(shape.width)
        self.lm_head = nn.Linear(shape.width, padded_vocab_size or vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: one matrix reads and writes tokens
        self.activation_checkpointing = False  # set by trainer.parallel; recompute blocks in backward
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                # GPT-2: scale the residual projections by 1/sqrt(2 layers) so the residual stream
                # keeps its variance however deep the model is.
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * shape.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                # Keep only the block's input; its activations are recomputed in backward.
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x) if targets is None else self.loss(x, targets)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's output -> the vocabulary's logits."""
        logits = self.lm_head(self.final_norm(x))
        if logits.shape[-1] == self.vocab_size:
            return logits
        # Without the padding rows. A copy, not a view: FSDP2 warns that an in-place op on a view its
        # module returns would skip its backward hook.
        return logits[..., :self.vocab_size].contiguous()

    def loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-token cross-entropy of the last block's output X against TARGETS, in fp32.

        Eager, the fp32 logits of the whole batch exist at once (3.3 GB for gpt2-small at batch 16);
        compiled (`--compile`, trainer.parallel), the cast, log-softmax and loss are fused into the
        output head's kernels and never do."""
        return F.cross_entropy(self.head(x).flatten(0, -2).float(), targets.flatten())


def flops_per_token(model: Transformer, seq_len: int) -> int:
    """Training FLOPs per token, as in the PaLM paper's appendix B: 6N + 12 L H Q T.

    6N: forward (2N) and backward (4N) through every weight, N counting the tied embedding once as the
    output projection (position embeddings are lookups, no FLOPs). 12 L H Q T: the attention scores and
    their weighted sum (L layers, H heads of size Q, T tokens of context), forward and backward.
    """
    shape = model.shape
    weights = sum(p.numel() for p in model.parameters()) - model.position_embedding.weight.numel()
    return 6 * weights + 12 * shape.layers * shape.width * seq_len
