#!/usr/bin/env python3
"""The GPU benchmark a short loan completes: the trainer against a bare loop, under DDP and FSDP, at batch
16 and 32, gpt2-small (bf16, --compile, 1024-token context) on every visible GPU.

    python3 scripts/gpu_bench.py                        # 8 runs, about 5 minutes on one H100 or H200
    python3 scripts/gpu_bench.py --json-file bench.json --steps 300 --warmup 50 --window 50

Each run trains --warmup steps first (compilation, the allocator, the clocks settling), then --steps steps
measured in windows of --window steps. Its tokens/s is the median window, with the spread of the windows
(min..max): a run that slows down as the GPU heats shows a low minimum, where the last window alone would
flatter or hide it. MFU is that median against the GPU's bf16 peak (trainer/metrics.py). While a run's
measured steps go, NVML (nvidia-ml-py, where installed) samples every GPU once a second: utilization,
power and SM clock, reported as medians (the SM clock's minimum too: a clock that fell is a GPU that
throttled). The trainer's rows carry its data-wait share, the part of wall time it waited for batches.

The bare loop is what the trainer's own loop costs against: the same model and trainer.parallel's
parallelize() (per-block compile, the loss compiled with the head, DDP or FSDP2), fused AdamW and one
fixed batch already on the GPU; no DataLoader, no clipping, no metrics, no checkpointer.

Prints one Markdown table (BENCHMARKS.md's) and writes one JSON file (--json-file). Exit status 0; 2 with
one line on a host where torch sees no GPU, or for a bad argument.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

SCRIPTS_DIR = pathlib.Path(__file__).resolve().parent
MODEL, SEQ_LEN = "gpt2-small", 1024
PARALLELS, BATCH_SIZES, LOOPS = ("ddp", "fsdp"), (16, 32), ("trainer", "bare")
NVML_EVERY_S = 1.0
RUN_TIMEOUT_S = 900


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="measured steps per run (at least 2 windows)")
    parser.add_argument("--warmup", type=int, default=50, help="steps before the measured ones (whole windows)")
    parser.add_argument("--window", type=int, default=50, help="steps per measured window")
    parser.add_argument("--json-file", default="gpu_bench.json", help="where the JSON report goes")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with torch, for torchrun")
    parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)  # a torchrun worker
    parser.add_argument("--parallel", choices=PARALLELS, default="ddp", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--windows-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # The trainer reports at multiples of --log-every: whole windows keep the warm-up out of every one.
    if args.window < 1 or args.warmup < args.window or args.steps < 2 * args.window or \
            args.steps % args.window or args.warmup % args.window:
        parser.exit(2, "gpu_bench.py: error: --warmup and --steps must be whole numbers of --window steps, at "
                       "least one and two windows of them\n")
    return args


# ---- what a run measured (pure functions: tests/unit/test_gpu_bench.py) ---------------------------

def measured_windows(records: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """The windows after the warm-up: trainer metrics records, or the bare loop's, both keyed by step."""
    return [record for record in records if record["step"] > warmup]


def summarize_run(loop: str, parallel: str, batch_size: int, windows: list[dict[str, Any]],
                  samples: list[dict[str, float]], *, flops_per_token: int, peak_flops: float | None,
                  gpus: int) -> dict[str, Any]:
    """One row: tokens/s of the median window and its spread, MFU, the NVML medians and the data wait."""
    rates = [window["tokens_per_sec"] for window in windows]
    tokens = statistics.median(rates)
    row: dict[str, Any] = {
        "loop": loop, "parallel": parallel, "batch_size": batch_size, "windows": len(rates),
        "tokens_per_sec": tokens, "tokens_per_sec_min": min(rates), "tokens_per_sec_max": max(rates),
        "mfu": tokens * flops_per_token / (peak_flops * gpus) if peak_flops else None,
    }
    waits = [window["data_wait_share"] for window in windows if "data_wait_share" in window]
    row["data_wait_share"] = statistics.median(waits) if waits else None
    for name in ("utilization_pct", "power_w", "sm_clock_mhz"):
        values = [sample[name] for sample in samples]
        row[name] = statistics.median(values) if values else None
    row["sm_clock_mhz_min"] = min((sample["sm_clock_mhz"] for sample in samples), default=None)
    return row


def cell(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def markdown_table(rows: list[dict[str, Any]], machine: str) -> str:
    lines = [machine, "",
             "| loop | parallel | batch/GPU | tokens/s (median window) | spread | MFU | trainer / bare | "
             "data wait | GPU util | power (W) | SM clock (MHz), median (min) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    bare = {(row["parallel"], row["batch_size"]): row["tokens_per_sec"] for row in rows if row["loop"] == "bare"}
    for row in rows:
        against = bare.get((row["parallel"], row["batch_size"]))
        ratio = row["tokens_per_sec"] / against if row["loop"] == "trainer" and against else None
        mfu = None if row["mfu"] is None else 100 * row["mfu"]
        wait = None if row["data_wait_share"] is None else 100 * row["data_wait_share"]
        clock = (f"{cell(row['sm_clock_mhz'], '.0f')} ({cell(row['sm_clock_mhz_min'], '.0f')})"
                 if row["sm_clock_mhz"] is not None else "n/a")
        lines.append(f"| {row['loop']} | {row['parallel']} | {row['batch_size']} | {row['tokens_per_sec']:,.0f} | "
                     f"{row['tokens_per_sec_min']:,.0f}..{row['tokens_per_sec_max']:,.0f} | {cell(mfu, '.1f')}% | "
                     f"{cell(ratio, '.3f')} | {cell(wait, '.1f')}% | {cell(row['utilization_pct'], '.0f')}% | "
                     f"{cell(row['power_w'], '.0f')} | {clock} |")
    fsdp_against_ddp = [f"batch {batch}: {fsdp / ddp:.3f}" for batch in BATCH_SIZES
                        if (ddp := trainer_rate(rows, "ddp", batch)) and (fsdp := trainer_rate(rows, "fsdp", batch))]
    if fsdp_against_ddp:
        lines += ["", f"trainer FSDP / trainer DDP, tokens/s: {', '.join(fsdp_against_ddp)}"]
    return "\n".join(lines)


def trainer_rate(rows: list[dict[str, Any]], parallel: str, batch_size: int) -> float | None:
    return next((row["tokens_per_sec"] for row in rows
                 if (row["loop"], row["parallel"], row["batch_size"]) == ("trainer", parallel, batch_size)), None)


def report(rows: list[dict[str, Any]], machine: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {"benchmark": "gpu_bench.py", "model": MODEL, "seq_len": SEQ_LEN, "precision": "bf16", "compile": True,
            "warmup_steps": args.warmup, "measured_steps": args.steps, "window_steps": args.window,
            "machine": machine, "runs": rows}


# ---- NVML, beside a run ---------------------------------------------------------------------------

class GpuSampler:
    """Samples every GPU once a second while MEASURING() says the run's measured steps go; without
    nvidia-ml-py it samples nothing, and the table says n/a."""

    def __init__(self, measuring: Callable[[], bool]) -> None:
        self.measuring, self.samples = measuring, []
        self.done = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no nvidia-ml-py, or no driver it can load: the run is measured without it
            self.nvml = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self) -> GpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def run(self) -> None:
        while self.nvml and not self.done.wait(NVML_EVERY_S):
            if self.measuring():
                self.samples += [self.sample(handle) for handle in self.handles]

    def sample(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        return {"utilization_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))}


# ---- the runs -------------------------------------------------------------------------------------

def read_lines(path: pathlib.Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []  # not written yet, or a line half written


def torchrun(args: argparse.Namespace, gpus: int, script_and_args: list[str]) -> None:
    command = [args.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
               *script_and_args]
    result = subprocess.run(command, stdout=sys.stderr, timeout=RUN_TIMEOUT_S, check=False)
    if result.returncode != 0:
        sys.exit(f"gpu_bench.py: error: a run failed (exit {result.returncode}): {' '.join(command)}")


def run_one(args: argparse.Namespace, loop: str, parallel: str, batch_size: int, gpus: int,
            workdir: pathlib.Path) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    """Trains one run; returns its measured windows and the NVML samples taken while they went."""
    path = workdir / f"{loop}-{parallel}-{batch_size}.jsonl"
    print(f"[gpu_bench] {loop}, {parallel}, batch {batch_size}/GPU, {gpus} GPU(s)", file=sys.stderr, flush=True)
    if loop == "trainer":
        command = [str(SCRIPTS_DIR / "train_ddp.py"), "--model", MODEL, "--parallel", parallel,
                   "--precision", "bf16", "--compile", "--seq-len", str(SEQ_LEN), "--batch-size", str(batch_size),
                   "--max-steps", str(args.warmup + args.steps), "--warmup-steps", "10", "--log-every", str(args.window),
                   "--save-every", "0", "--num-workers", "2", "--metrics-file", str(path),
                   "--ckpt-dir", str(workdir / f"checkpoints-{parallel}-{batch_size}")]
    else:
        command = [str(pathlib.Path(__file__).resolve()), "--bare-worker", "--parallel", parallel,
                   "--batch-size", str(batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--window", str(args.window), "--windows-file", str(path)]
    with GpuSampler(lambda: bool(measured_windows(read_lines(path), args.warmup))) as sampler:
        torchrun(args, gpus, command)
    # The windows that finished before the first measured line appeared were not sampled: nothing is lost
    # but the first second of the first measured window.
    return measured_windows(read_lines(path), args.warmup), sampler.samples


def bare_worker(args: argparse.Namespace) -> None:
    """A torchrun worker: the bare loop; rank 0 writes one line per window, as the trainer's metrics do."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(SCRIPTS_DIR))
    from trainer.model import build_model
    from trainer.parallel import autocast_dtype, parallelize

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    model = parallelize(build_model(MODEL, num_classes=0, vocab_size=None).to(device), parallel=args.parallel,
                        precision=torch.bfloat16, device=device, activation_checkpointing=False,
                        compile_blocks=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(50257, (args.batch_size, SEQ_LEN + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    autocast = autocast_dtype(args.parallel, torch.bfloat16)
    window_started = time.perf_counter()
    for step in range(1, args.warmup + args.steps + 1):
        with torch.autocast("cuda", dtype=autocast or torch.float32, enabled=autocast is not None):
            model(inputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup and (step - args.warmup) % args.window == 0:
            torch.cuda.synchronize()
            now = time.perf_counter()
            if step > args.warmup and dist.get_rank() == 0:
                rate = args.window * args.batch_size * SEQ_LEN * dist.get_world_size() / (now - window_started)
                with open(args.windows_file, "a") as file:
                    file.write(json.dumps({"step": step, "tokens_per_sec": rate}) + "\n")
            window_started = now
    dist.destroy_process_group()


def machine_description(gpus: int) -> dict[str, Any]:
    import torch
    return {"gpus": gpus, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "load_average": [round(value, 2) for value in os.getloadavg()]}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.bare_worker:
        bare_worker(args)
        return 0
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        print("gpu_bench.py: error: torch sees no CUDA GPU on this host; run it on a GPU machine", file=sys.stderr)
        return 2
    sys.path.insert(0, str(SCRIPTS_DIR))
    from trainer.gpt import flops_per_token
    from trainer.metrics import peak_flops
    from trainer.model import build_model
    flops = flops_per_token(build_model(MODEL, num_classes=0, vocab_size=None), SEQ_LEN)
    peak = peak_flops(torch.device("cuda", 0), None)
    machine = machine_description(gpus)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for parallel in PARALLELS:
            for batch_size in BATCH_SIZES:
                for loop in LOOPS:
                    windows, samples = run_one(args, loop, parallel, batch_size, gpus, pathlib.Path(workdir))
                    rows.append(summarize_run(loop, parallel, batch_size, windows, samples,
                                              flops_per_token=flops, peak_flops=peak, gpus=gpus))
    machine["load_average_after"] = [round(value, 2) for value in os.getloadavg()]
    pathlib.Path(args.json_file).write_text(json.dumps(report(rows, machine, args), indent=2) + "\n")
    title = (f"{gpus} x {machine['gpu']}, torch {machine['torch']}, CUDA {machine['cuda']}, NCCL {machine['nccl']}; "
             f"{MODEL}, bf16, compile, seq {SEQ_LEN}; {args.steps} steps in windows of {args.window} after "
             f"{args.warmup} warm-up; load average {machine['load_average'][0]} before")
    print(markdown_table(rows, title))
    print(f"\n[gpu_bench] JSON report: {args.json_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
