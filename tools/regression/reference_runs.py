"""The fixed, seeded, short trainings that the regression gate runs, per device kind.

Each run is the sample trainer (scripts/train_ddp.py) as the image ships it: only the flags below are
given, so a changed default (learning rate, schedule, initialisation) changes the losses and fails the
gate, as it would change a team's run. Synthetic data from --seed, so nothing is downloaded. On CPU the
ranks use gloo with one thread each, which makes the losses bit-identical run after run on one machine.
"""
from __future__ import annotations

from typing import NamedTuple

# Shared by every CPU run: 2 ranks, one thread each, no DataLoader workers (fewer moving parts, and the
# data order depends only on the seed), a report every 5 steps, a checkpoint only at the end.
CPU_COMMON = ("--device cpu --backend gloo --num-workers 0 --max-steps 20 --warmup-steps 5 --log-every 5 "
              "--save-every 0 --seed 1337")
# The GPU run: bf16 and torch.compile on every GPU of the host, 1024-token context; reports every 30
# steps, the first of which includes compilation and is left out of the throughput. It must learn within
# its budget, or the gate cannot tell a trainer that learns from one that does not: with GPT-2's 50,304
# tokens, 60 steps went from 11.00 to 10.84, where guessing scores ln 50,304 = 10.83. With 256 tokens the
# synthetic walk's rule (the next token is 1 to 4 above the last; floor ln 4 = 1.39) is learned: on CPU,
# gpt2-small-narrow at 256 tokens of context fell from 4.72 at step 30 to 1.75 at step 90 and 1.49 at 300.
# 300 steps of 8 x 1024 tokens are about 10 s on one H100 after compilation (not measured on a GPU yet).
GPU_COMMON = ("--device cuda --num-workers 2 --max-steps 300 --warmup-steps 30 --log-every 30 --save-every 0 "
              "--seed 1337")


class ReferenceRun(NamedTuple):
    name: str
    nproc: str  # torchrun's --nproc-per-node: a number, or "gpu" for one rank per GPU
    flags: str


RUNS = {
    "cpu": [
        ReferenceRun("cnn-ddp", "2", f"--model tiny --image-size 16 --synthetic-samples 512 --batch-size 8 "
                                     f"--parallel ddp {CPU_COMMON}"),
        ReferenceRun("gpt-tiny-fsdp", "2", f"--model gpt-tiny --seq-len 32 --synthetic-samples 256 --batch-size 4 "
                                           f"--parallel fsdp {CPU_COMMON}"),
    ],
    "gpu": [
        ReferenceRun("gpt2-small-256-tokens-bf16-compile", "gpu",
                     f"--model gpt2-small --vocab-size 256 --seq-len 1024 --batch-size 8 --precision bf16 --compile "
                     f"--parallel ddp {GPU_COMMON}"),
    ],
}

ENVIRONMENT_MARKER = "@@regression-environment"
METRICS_MARKER = "@@regression-metrics "

# Printed by the run script before the metrics: what the numbers were measured with.
ENVIRONMENT_PROBE = r"""
import json, os, platform, torch
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.machine())
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cpu": cpu, "cpus": os.cpu_count(),
                  "gpus": gpus, "load_average": [round(value, 2) for value in os.getloadavg()]}))
"""


def run_script(device: str, *, python: str, scripts_dir: str, workdir: str) -> str:
    """The bash script that trains every reference run of DEVICE one after the other, logs to stderr,
    and prints to stdout only the environment and each run's metrics, each after its marker line."""
    lines = ["set -euo pipefail", f"mkdir -p {workdir}",
             f"echo {ENVIRONMENT_MARKER}", f"{python} -c '{ENVIRONMENT_PROBE}'"]
    for run in RUNS[device]:
        metrics = f"{workdir}/{run.name}.jsonl"
        lines += [
            f"echo '== reference run {run.name}' >&2",
            f"OMP_NUM_THREADS=1 {python} -m torch.distributed.run --standalone --nproc-per-node={run.nproc} "
            f"{scripts_dir}/train_ddp.py {run.flags} --metrics-file {metrics} "
            f"--ckpt-dir {workdir}/ckpt-{run.name} >&2",
            f"echo '{METRICS_MARKER}{run.name}'", f"cat {metrics}",
        ]
    return "\n".join(lines) + "\n"
