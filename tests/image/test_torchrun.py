"""torchrun inside the image: two ranks all-reduce over gloo (and NCCL on GPUs), every rank checks.

    make test PYTEST_ARGS="tests/image/test_torchrun.py"
"""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.tier("full")

ALL_REDUCE_SCRIPT = r'''
import os, torch, torch.distributed as dist
backend = os.environ.get("BACKEND", "gloo")
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
value = torch.full((1024,), float(rank + 1), device=device)
dist.all_reduce(value)
expected = world * (world + 1) / 2
assert torch.all(value == expected), (rank, value[0].item(), expected)
print(f"rank {rank}/{world} {backend} sum={value[0].item():g} ok", flush=True)
dist.destroy_process_group()
'''


def write_all_reduce_script(container) -> str:
    path = "/tmp/all_reduce.py"
    result = container.run(f"cat > {path} <<'PY'\n{ALL_REDUCE_SCRIPT}\nPY")
    assert result.rc == 0, result.stderr
    return path


def test_torchrun_two_ranks_all_reduce_over_gloo(training_container):
    script = write_all_reduce_script(training_container)
    result = training_container.run(f"OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 {script}")
    assert result.rc == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"rank (\d)/2 gloo sum=3 ok", result.stdout)) == ["0", "1"], result.stdout
