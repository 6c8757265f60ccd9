#!/usr/bin/env python3
"""Benchmark: our trainer with every feature on against a bare DDP loop, 2 CPU ranks under torchrun.

    python scripts/bench_trainer.py                  # prints a table and the BENCHMARKS.md rows

The bare loop is what the pytorch/examples DDP tutorials do: DistributedSampler, DataLoader, forward,
backward, AdamW step, nothing else. Both use the same model, synthetic data, DataLoader settings and
global batch. Runs alternate (trainer, bare, trainer without periodic checkpoints, ...) so a noisy
machine affects all alike; the median and the best of --repeats runs are reported. Throughput excludes the first
--warmup steps and includes everything after them by wall clock, checkpoint writes too.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPTS_DIR = pathlib.Path(__file__).resolve().parent
NPROC = 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the throughput")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant; the median is reported")
    parser.add_argument("--model", default="small", help="trainer --model")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--num-workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--save-every", type=int, default=20, help="checkpoint interval of the full run")
    parser.add_argument("--bare-loop-worker", action="store_true", help=argparse.SUPPRESS)  # torchrun worker mode
    return parser.parse_args()


def run_bare_loop(args: argparse.Namespace) -> None:
    """A torchrun worker: the minimal pytorch/examples-style DDP loop; rank 0 prints its samples/s."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    sys.path.insert(0, str(SCRIPTS_DIR))
    from trainer.data import SyntheticImages
    from trainer.model import build_model

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    dataset = SyntheticImages(16384, 32, 10, seed=0)
    model = DistributedDataParallel(build_model(args.model, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    sampler = DistributedSampler(dataset, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        num_workers=args.num_workers, persistent_workers=args.num_workers > 0)
    step, epoch, started = 0, 0, time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
            step += 1
            if step == args.warmup:
                started = time.perf_counter()
            if step == args.steps:
                break
        epoch += 1
    samples = (args.steps - args.warmup) * args.batch_size * dist.get_world_size()
    if dist.get_rank() == 0:
        print(json.dumps({"samples_per_sec": samples / (time.perf_counter() - started)}), flush=True)
    dist.destroy_process_group()


def torchrun(script_and_args: list[str]) -> str:
    """Runs one 2-rank job; returns its output, or exits with it when the job failed."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={NPROC}",
               *script_and_args]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"benchmark run failed: {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def run_trainer(args: argparse.Namespace, save_every: int) -> dict[str, float]:
    """Our trainer with every feature on; samples/s after warm-up and the mean checkpoint write time."""
    with tempfile.TemporaryDirectory() as workdir:
        metrics = pathlib.Path(workdir, "metrics.jsonl")
        output = torchrun([
            str(SCRIPTS_DIR / "train_ddp.py"), "--model", args.model, "--batch-size", str(args.batch_size),
            "--max-steps", str(args.steps), "--seed", "0", "--num-workers", str(args.num_workers),
            "--log-every", "10", "--metrics-file", str(metrics), "--save-every", str(save_every), "--keep", "3",
            "--ckpt-dir", str(pathlib.Path(workdir, "ckpt")), "--grad-clip", "1.0", "--warmup-steps", "10"])
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    measured = [record for record in records if record["step"] > args.warmup]
    seconds = sum(record["step_time_ms"] / 1000 * 10 for record in measured)
    samples = len(measured) * 10 * args.batch_size * NPROC
    saves = [float(value) for value in re.findall(r"saved checkpoint \S+ in ([\d.]+) s", output)]
    return {"samples_per_sec": samples / seconds, "save_seconds": statistics.mean(saves)}


def run_bare(args: argparse.Namespace) -> float:
    output = torchrun([str(pathlib.Path(__file__).resolve()), "--bare-loop-worker", "--model", args.model,
                       "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                       "--warmup", str(args.warmup), "--num-workers", str(args.num_workers)])
    return json.loads(output.strip().splitlines()[-1])["samples_per_sec"]


def main() -> None:
    args = parse_args()
    if args.bare_loop_worker:
        run_bare_loop(args)
        return
    full, bare, no_periodic_ckpt = [], [], []
    for repeat in range(args.repeats):
        full.append(run_trainer(args, args.save_every))
        bare.append(run_bare(args))
        no_periodic_ckpt.append(run_trainer(args, 0))
        print(f"repeat {repeat + 1}/{args.repeats}: trainer {full[-1]['samples_per_sec']:.1f}, "
              f"bare {bare[-1]:.1f}, trainer without periodic checkpoints "
              f"{no_periodic_ckpt[-1]['samples_per_sec']:.1f} samples/s", flush=True)
    rates = {"bare": bare, "full": [run["samples_per_sec"] for run in full],
             "quiet": [run["samples_per_sec"] for run in no_periodic_ckpt]}
    median = {name: statistics.median(values) for name, values in rates.items()}
    best = {name: max(values) for name, values in rates.items()}  # the least disturbed run on a busy machine
    save_seconds = statistics.median(run["save_seconds"] for run in full)
    print(f"\n{args.model} model, {NPROC} CPU ranks x batch {args.batch_size}, {args.steps} steps "
          f"({args.warmup} warm-up), {args.num_workers} DataLoader worker(s)/rank, {args.repeats} runs each")
    print("| variant | samples/s median | ratio to bare | samples/s best | ratio to bare |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for name, label in [("bare", "bare DDP loop (pytorch/examples style)"),
                        ("full", f"train_ddp.py, every feature on, checkpoint every {args.save_every} steps"),
                        ("quiet", "train_ddp.py, every feature on, checkpoint only at the end")]:
        print(f"| {label} | {median[name]:.1f} | {median[name] / median['bare']:.3f} "
              f"| {best[name]:.1f} | {best[name] / best['bare']:.3f} |")
    print(f"\ncheckpoint write (rank 0, atomic, fsync): {save_seconds * 1000:.0f} ms each (median); periodic "
          f"checkpoints cost {100 * (1 - median['full'] / median['quiet']):.1f}% of median throughput "
          f"at one every {args.save_every} steps")

if __name__ == "__main__":
    main()
