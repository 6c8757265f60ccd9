"""The trainer on GPUs: gpt-tiny with bf16 and NCCL under DDP and FSDP, on every visible GPU.

Marked `gpu`: skipped, with the reason, where torch sees no GPU. scripts/gpu_check.sh runs it, and:
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none python -m pytest -m gpu tests/trainer/test_gpu_trainer.py
"""
from __future__ import annotations

import pytest

from tests.support.training import make_workdir, read_metrics, trainer_command

pytestmark = [pytest.mark.tier("landing"), pytest.mark.gpu]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_gpt_trains_in_bf16_on_every_gpu(torch_host, scripts_dir, cuda_devices, parallel):
    workdir = make_workdir(torch_host)
    result = torch_host.run(
        f"{trainer_command(scripts_dir=scripts_dir, nproc=cuda_devices)} --model gpt-tiny --parallel {parallel} "
        f"--precision bf16 --seq-len 128 --batch-size 8 --max-steps 30 --warmup-steps 3 --lr 3e-3 --log-every 5 "
        f"--num-workers 0 --peak-tflops 100 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/metrics.jsonl")
    assert result.rc == 0, result.stdout + result.stderr
    assert f"on {cuda_devices} rank(s) with {parallel}, cuda, nccl, bfloat16" in result.stdout
    records = read_metrics(torch_host, f"{workdir}/metrics.jsonl")
    assert records[-1]["loss"] < 0.8 * records[0]["loss"], records
    for record in records:  # GPU max allocated, every rank; MFU from --peak-tflops
        assert len(record["memory_gib_per_rank"]) == cuda_devices and record["max_memory_gib"] > 0
        assert 0 < record["mfu"] < 1 and record["tokens_per_sec"] > 0
    torch_host.run(f"rm -rf {workdir}")
