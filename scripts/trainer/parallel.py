"""How the model is spread over the ranks: DDP (a full copy per rank) or FSDP2 (each rank holds a shard).

These are the lines where DDP and FSDP differ; everything else in the trainer is the same for both.
  * wrapping: `DistributedDataParallel(model)` against `fully_shard` on every Transformer block and then
    on the root, so each block's parameters are gathered just before it runs and freed right after (not
    the last block's, which backward needs at once, nor any on one rank, where freeing saves nothing);
  * mixed precision: DDP runs under autocast; FSDP keeps bf16 parameter copies for compute and reduces
    gradients in fp32 (MixedPrecisionPolicy), so autocast is not needed;
  * gradient accumulation: DDP's `no_sync()` against FSDP's `set_requires_gradient_sync(False)`;
  * gradient clipping: FSDP adds up the squared norms of the ranks' shards in one all-reduce;
  * the host's work per step, which under FSDP grows with the number of parameters and blocks (hooks,
    DTensor dispatch): clipping and the optimizer work on all tensors at once (foreach), not one by one.
  * checkpoints: the full state on rank 0 in one file against every rank's shard (trainer.checkpoint_folder).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from trainer.gpt import Transformer


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks (the units to shard and compile): a Transformer's blocks, else the whole."""
    return list(model.blocks) if isinstance(model, Transformer) else [model]


def parallelize(model: nn.Module, *, parallel: str, precision: torch.dtype, device: torch.device,
                activation_checkpointing: bool, compile_blocks: bool) -> nn.Module:
    """MODEL made ready for distributed training: checkpointed, compiled per block, then DDP or FSDP.

    The settings are keyword-only, as in torchtitan's parallelize_llama: a call reads as what it sets.
    Compiling in place (`Module.compile`, and the loss as a method) keeps parameter names, so checkpoints
    do not depend on --compile, and DDP's or FSDP's hooks stay outside the compiled code.
    """
    if activation_checkpointing:
        model.activation_checkpointing = True
    if compile_blocks:
        for block in repeated_blocks(model):
            block.compile()
        if isinstance(model, Transformer):
            # The output head with the loss: the fp32 logits are never materialized as a whole, which on a
            # GPU is most of the gap between a per-block compile and a whole-model one (BENCHMARKS.md).
            model.loss = torch.compile(model.loss)
    if parallel == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    policy = (MixedPrecisionPolicy(param_dtype=precision, reduce_dtype=torch.float32)
              if precision != torch.float32 else MixedPrecisionPolicy())
    blocks = repeated_blocks(model)
    one_rank = dist.get_world_size() == 1
    for index, block in enumerate(blocks):
        # Resharding after forward frees a block's gathered parameters until backward gathers them again:
        # memory for a second all-gather. The last block's backward starts at once, and one rank has
        # nothing to free (torchtitan's parallelize_llama keeps the last block the same way).
        fully_shard(block, mp_policy=policy, reshard_after_forward=not (one_rank or index == len(blocks) - 1))
    fully_shard(model, mp_policy=policy)  # the root: embeddings, final norm and the tied output head
    return model


def autocast_dtype(parallel: str, precision: torch.dtype) -> torch.dtype | None:
    """The dtype to autocast the forward pass to, or None: FSDP casts its parameters itself."""
    if precision == torch.float32 or parallel == "fsdp":
        return None
    return precision


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Within it, backward reduces gradients across ranks only if ENABLED (the last micro-batch of a step)."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)
        yield
    elif enabled:
        yield
    else:
        with model.no_sync():
            yield


def clip_gradients(model: nn.Module, max_norm: float) -> None:
    """Scales all gradients down so that their global L2 norm is at most MAX_NORM (clip_grad_norm_).

    Under FSDP each rank holds disjoint shards of every gradient, so the squared norms of the local
    shards add up to the full norm's square: one all-reduce of one number. The local shards are plain
    tensors, normed and scaled all at once (foreach): clip_grad_norm_ on the DTensor gradients gives the
    same result through DTensor's per-parameter dispatch, which cost a quarter of the step time of
    gpt-tiny on CPU, and a loop over the shards cost 13 ms of an 89 ms gpt2-small step on an H200.
    """
    if not isinstance(model, FSDPModule):
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return
    local_grads = [parameter.grad.to_local() for parameter in model.parameters() if parameter.grad is not None]
    squared_norm = torch.stack(torch._foreach_norm(local_grads)).float().pow(2).sum()
    dist.all_reduce(squared_norm)
    scale = (max_norm / (squared_norm.sqrt() + 1e-6)).clamp(max=1.0)  # as clip_grad_norm_: never scale up
    torch._foreach_mul_(local_grads, scale.to(local_grads[0].dtype))
