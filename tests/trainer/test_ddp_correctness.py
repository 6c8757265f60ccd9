"""DDP computes what one process computes, keeps the ranks in lockstep, and learns the synthetic task.

Run: TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_ddp_correctness.py -q
(or `make test`, which runs it inside the image).
"""
from __future__ import annotations

import pytest

from tests.support.training import (TINY_MODEL, make_workdir, python_json, read_metrics, tensors_equal,
                                    trainer_command, write_per_rank_dump)

pytestmark = pytest.mark.tier("landing")

STEPS = 30
SHARED = f"{TINY_MODEL} --warmup-steps 5 --lr 3e-3 --seed 3 --num-workers 0"


@pytest.fixture(scope="module")
def runs(torch_host, scripts_dir):
    """The same training two ways, global batch 16 each: 2 ranks x batch 4 x grad-accum 2, and 1 process x 16."""
    workdir = make_workdir(torch_host)
    dump = write_per_rank_dump(torch_host, workdir)
    torch_host.check_output(
        f"{trainer_command(script=dump)} {scripts_dir} {SHARED} --max-steps {STEPS} --batch-size 4 --grad-accum 2 "
        f"--save-every 0 --log-every 1 --ckpt-dir {workdir}/ddp --metrics-file {workdir}/ddp.jsonl")
    torch_host.check_output(
        f"{trainer_command(nproc=None, script=dump)} {scripts_dir} {SHARED} --max-steps {STEPS} --batch-size 16 "
        f"--save-every 0 --ckpt-dir {workdir}/single")
    yield workdir
    torch_host.run(f"rm -rf {workdir}")


def test_ranks_end_with_identical_parameters(torch_host, runs):
    assert tensors_equal(torch_host, f"{runs}/ddp/rank0_params.pt", f"{runs}/ddp/rank1_params.pt", None, None)


def test_two_ranks_match_one_process_on_the_same_global_batch(torch_host, runs):
    comparison = python_json(torch_host, f"""
import json, torch
ddp = torch.load("{runs}/ddp/rank0_params.pt", weights_only=True)
single = torch.load("{runs}/single/rank0_params.pt", weights_only=True)
print(json.dumps({{"max_abs_difference": max((ddp[k] - single[k]).abs().max().item() for k in ddp),
                  "close": all(torch.allclose(ddp[k], single[k], rtol=1e-4, atol=1e-5) for k in ddp)}}))
""")
    assert comparison["close"], comparison


def test_checkpoint_holds_rank_zero_parameters(torch_host, runs):
    """The file rank 0 wrote is the model every rank trained, loadable with weights_only."""
    assert tensors_equal(torch_host, f"{runs}/ddp/step_{STEPS:06d}.pt", f"{runs}/ddp/rank0_params.pt",
                         second_key=None)


def test_loss_goes_down_on_the_synthetic_task(torch_host, runs):
    losses = [record["loss"] for record in read_metrics(torch_host, f"{runs}/ddp.jsonl")]
    assert len(losses) == STEPS
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.8 * first, losses
