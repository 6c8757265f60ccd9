"""`--compile` compiles every block and the loss with the output head without a graph break, under DDP and
under FSDP: a break splits a compiled region in two and runs Python between them on every step.

torch._dynamo's own counters, on one CPU rank. Dynamo alone decides where graphs break; the backend only
turns each graph into kernels, so the test compiles with aot_eager and spares the C++ compiler.

    make test-unit PYTEST_ARGS=tests/unit/test_compile_graph_breaks.py
"""
from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.utils import counters

from train_ddp import batch_loss
from trainer.gpt import GPTShape, Transformer
from trainer.parallel import clip_gradients, parallelize

SHAPE = GPTShape(layers=2, heads=2, width=32, max_seq_len=16)
VOCAB, PADDED_VOCAB = 60, 64  # padded, as a pretrained GPT-2's: the loss slices the padding rows off


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_compiled_blocks_and_loss_train_without_a_graph_break(one_rank, monkeypatch, parallel):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = parallelize(Transformer(SHAPE, VOCAB, PADDED_VOCAB), parallel=parallel, precision=torch.float32,
                        device=torch.device("cpu"), activation_checkpointing=False, compile_blocks=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    for _ in range(2):  # the second step runs the compiled code again: a recompile would show here
        tokens = torch.randint(VOCAB, (2, 9))
        batch_loss(model, tokens[:, :-1], tokens[:, 1:], language_model=True).backward()
        clip_gradients(model, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert counters["stats"]["unique_graphs"] > 0, "nothing was compiled"
    assert not counters["graph_break"], dict(counters["graph_break"])
