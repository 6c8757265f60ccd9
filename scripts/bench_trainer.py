#!/usr/bin/env python3
"""Benchmark: our trainer with every feature on against a bare loop, CPU ranks under torchrun.

    python scripts/bench_trainer.py                  # the CNN under DDP against a bare DDP loop
    python scripts/bench_trainer.py --bench gpt      # gpt-tiny under FSDP against a bare FSDP2 loop,
                                                     # memory per rank, checkpoint save and load times
    python scripts/bench_trainer.py --bench stall    # how long a sharded save blocks training,
                                                     # synchronous against --async-checkpoint
    python scripts/bench_trainer.py --bench parallel # the trainer's FSDP against its DDP, ms per step,
                                                     # gpt2-small-narrow on 1 and 2 ranks

The bare DDP loop is what the pytorch/examples DDP tutorials do: DistributedSampler, DataLoader,
forward, backward, AdamW step, nothing else; the bare FSDP2 loop is the same with `fully_shard` on every
block and the root instead of DDP. Trainer and bare loop use the same model, synthetic data, DataLoader
settings and global batch. Runs alternate (trainer, bare, trainer without periodic checkpoints, ...) so
a noisy machine affects all alike; the median, the spread (min..max) and the best of --repeats runs are
reported. Throughput excludes the first --warmup steps and includes everything after them by wall
clock, checkpoint writes too.
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
    parser.add_argument("--bench", choices=["cnn", "gpt", "stall", "parallel"], default="cnn",
                        help="cnn: the CNN under DDP; gpt: gpt-tiny under FSDP, memory and checkpoint times; "
                             "stall: the training time one sharded save of --checkpoint-model blocks, sync vs async; "
                             "parallel: the trainer's time per step under FSDP against DDP")
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the throughput")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant; the median is reported")
    parser.add_argument("--model", default="small", help="trainer --model")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--num-workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--save-every", type=int, default=20, help="checkpoint interval of the full run")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample (--bench gpt)")
    parser.add_argument("--checkpoint-model", default="gpt2-small",
                        help="model whose checkpoint save and load are timed (--bench gpt)")
    parser.add_argument("--bare-loop-worker", action="store_true", help=argparse.SUPPRESS)  # torchrun worker mode
    parser.add_argument("--bare-fsdp-worker", action="store_true", help=argparse.SUPPRESS)
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
    dataset = SyntheticImages(16384, image_size=32, num_classes=10, seed=0)
    model = DistributedDataParallel(build_model(args.model, num_classes=10, vocab_size=None))
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


def run_bare_fsdp_loop(args: argparse.Namespace) -> None:
    """A torchrun worker: fully_shard per block and on the root, AdamW, nothing else; rank 0 prints samples/s."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import DataLoader, DistributedSampler

    sys.path.insert(0, str(SCRIPTS_DIR))
    from trainer.data import SyntheticTokens
    from trainer.model import build_model

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = build_model("gpt-tiny", num_classes=0, vocab_size=None)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    dataset = SyntheticTokens(16384, seq_len=args.seq_len, vocab_size=256, seed=0)
    sampler = DistributedSampler(dataset, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        num_workers=args.num_workers, persistent_workers=args.num_workers > 0)
    step, started = 0, time.perf_counter()
    for inputs, targets in loader:  # 16384 samples: more than any run here needs
        optimizer.zero_grad()
        F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).backward()
        optimizer.step()
        step += 1
        if step == args.warmup:
            started = time.perf_counter()
        if step == args.steps:
            break
    samples = (args.steps - args.warmup) * args.batch_size * dist.get_world_size()
    if dist.get_rank() == 0:
        print(json.dumps({"samples_per_sec": samples / (time.perf_counter() - started)}), flush=True)
    dist.destroy_process_group()


def torchrun(script_and_args: list[str], nproc: int = NPROC) -> str:
    """Runs one job of NPROC ranks; returns its output, or exits with it when the job failed."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               *script_and_args]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"benchmark run failed: {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def gpt_flags(args: argparse.Namespace) -> list[str]:
    return ["--model", "gpt-tiny", "--parallel", "fsdp", "--seq-len", str(args.seq_len)]


def run_trainer(args: argparse.Namespace, save_every: int, model_flags: list[str] | None = None) -> dict[str, float]:
    """Our trainer with every feature on; samples/s after warm-up and the mean checkpoint write time."""
    with tempfile.TemporaryDirectory() as workdir:
        metrics = pathlib.Path(workdir, "metrics.jsonl")
        output = torchrun([
            str(SCRIPTS_DIR / "train_ddp.py"), *(model_flags or ["--model", args.model]),
            "--batch-size", str(args.batch_size),
            "--max-steps", str(args.steps), "--seed", "0", "--num-workers", str(args.num_workers),
            "--log-every", "10", "--metrics-file", str(metrics), "--save-every", str(save_every), "--keep", "3",
            "--ckpt-dir", str(pathlib.Path(workdir, "ckpt")), "--grad-clip", "1.0", "--warmup-steps", "10"])
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    measured = [record for record in records if record["step"] > args.warmup]
    seconds = sum(record["step_time_ms"] / 1000 * 10 for record in measured)
    samples = len(measured) * 10 * args.batch_size * NPROC
    saves = [float(value) for value in re.findall(r"saved checkpoint \S+ in ([\d.]+) s", output)]
    return {"samples_per_sec": samples / seconds, "save_seconds": statistics.mean(saves)}


def run_bare(args: argparse.Namespace, worker: str = "--bare-loop-worker") -> float:
    output = torchrun([str(pathlib.Path(__file__).resolve()), worker, "--model", args.model,
                       "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--seq-len", str(args.seq_len),
                       "--warmup", str(args.warmup), "--num-workers", str(args.num_workers)])
    return json.loads(output.strip().splitlines()[-1])["samples_per_sec"]


def spread(values: list[float]) -> str:
    return f"{min(values):.1f}..{max(values):.1f}"


def bench_gpt(args: argparse.Namespace) -> None:
    """gpt-tiny: trainer under FSDP against the bare FSDP2 loop; memory per rank; checkpoint save and load."""
    full, bare, quiet = [], [], []
    for repeat in range(args.repeats):
        full.append(run_trainer(args, args.save_every, gpt_flags(args))["samples_per_sec"])
        bare.append(run_bare(args, "--bare-fsdp-worker"))
        quiet.append(run_trainer(args, 0, gpt_flags(args))["samples_per_sec"])
        print(f"repeat {repeat + 1}/{args.repeats}: trainer {full[-1]:.1f}, bare {bare[-1]:.1f}, trainer without "
              f"periodic checkpoints {quiet[-1]:.1f} samples/s", flush=True)
    print(f"\ngpt-tiny, FSDP, {NPROC} CPU ranks x batch {args.batch_size} x {args.seq_len} tokens, {args.steps} steps "
          f"({args.warmup} warm-up), {args.num_workers} DataLoader worker(s)/rank, {args.repeats} runs each")
    print("| variant | tokens/s median | spread (min..max) | ratio to bare (median) |\n| --- | ---: | ---: | ---: |")
    bare_median = statistics.median(bare)
    for label, rates in [("bare FSDP2 loop (fully_shard, AdamW)", bare),
                         (f"train_ddp.py --parallel fsdp, every feature on, checkpoint every {args.save_every} steps",
                          full),
                         ("train_ddp.py --parallel fsdp, every feature on, checkpoint only at the end", quiet)]:
        tokens = [rate * args.seq_len for rate in rates]
        print(f"| {label} | {statistics.median(tokens):.0f} | {spread(tokens)} "
              f"| {statistics.median(rates) / bare_median:.3f} |")
    print_memory_per_rank(args)
    print_checkpoint_times(args)


def print_memory_per_rank(args: argparse.Namespace) -> None:
    """The training state each rank holds (parameters, gradients, AdamW state), DDP against FSDP."""
    print("\n| gpt-tiny, CPU | ranks | state per rank (MiB) | share of DDP's |\n| --- | ---: | ---: | ---: |")
    for nproc in (2, 4):
        per_rank = {}
        for parallel in ("ddp", "fsdp"):
            with tempfile.TemporaryDirectory() as workdir:
                metrics = pathlib.Path(workdir, "metrics.jsonl")
                torchrun([str(SCRIPTS_DIR / "train_ddp.py"), "--model", "gpt-tiny", "--parallel", parallel,
                          "--seq-len", "32", "--batch-size", "2", "--max-steps", "2", "--log-every", "2",
                          "--num-workers", "0", "--metrics-file", str(metrics), "--ckpt-dir", f"{workdir}/ckpt"],
                         nproc)
                per_rank[parallel] = max(json.loads(metrics.read_text().splitlines()[-1])["memory_gib_per_rank"])
        for parallel in ("ddp", "fsdp"):
            share = per_rank[parallel] / per_rank["ddp"]
            print(f"| {parallel} | {nproc} | {per_rank[parallel] * 1024:.2f} | {share:.3f} |")


def print_checkpoint_times(args: argparse.Namespace) -> None:
    """Save and load times of one checkpoint of --checkpoint-model: one full file (DDP) against shards (FSDP)."""
    print(f"\n| {args.checkpoint_model}, {NPROC} CPU ranks | checkpoint size (MB) | save (s) | load (s) |\n"
          "| --- | ---: | ---: | ---: |")
    for parallel in ("ddp", "fsdp"):
        with tempfile.TemporaryDirectory() as workdir:
            common = [str(SCRIPTS_DIR / "train_ddp.py"), "--model", args.checkpoint_model, "--parallel", parallel,
                      "--seq-len", "32", "--batch-size", "1", "--num-workers", "0", "--ckpt-dir", f"{workdir}/ckpt"]
            saved = torchrun([*common, "--max-steps", "1"])
            size = sum(path.stat().st_size for path in pathlib.Path(workdir, "ckpt").rglob("*") if path.is_file())
            resumed = torchrun([*common, "--max-steps", "1"])  # nothing left to train: load only
            save_s = float(re.findall(r"saved checkpoint \S+ in ([\d.]+) s", saved)[-1])
            load_s = float(re.findall(r"loaded in ([\d.]+) s", resumed)[-1])
        label = "full state dict, one file from rank 0 (DDP)" if parallel == "ddp" else "sharded, every rank (FSDP)"
        print(f"| {label} | {size / 1e6:.0f} | {save_s:.2f} | {load_s:.2f} |", flush=True)


def bench_stall(args: argparse.Namespace) -> None:
    """--checkpoint-model with AdamW under FSDP, saved at steps 5 and 10: how long the loop waited per save
    (synchronous: the whole save; async: the copy), and the time until each checkpoint was complete."""
    stalls: dict[str, list[float]] = {"sync": [], "async": []}
    totals: dict[str, list[float]] = {"sync": [], "async": []}
    for repeat in range(args.repeats):
        for mode in ("sync", "async"):  # alternating, so background load hits both alike
            with tempfile.TemporaryDirectory() as workdir:
                output = torchrun([str(SCRIPTS_DIR / "train_ddp.py"), "--model", args.checkpoint_model,
                                   "--parallel", "fsdp", "--seq-len", "32", "--batch-size", "1", "--num-workers", "0",
                                   "--max-steps", "10", "--save-every", "5", "--log-every", "5",
                                   f"--{'' if mode == 'async' else 'no-'}async-checkpoint", "--ckpt-dir", workdir])
            saved = [float(seconds) for seconds in re.findall(r"saved checkpoint \S+ in ([\d.]+) s", output)]
            waited = [float(seconds) for seconds in re.findall(r"training waited ([\d.]+) s", output)]
            stalls[mode] += waited if mode == "async" else saved
            totals[mode] += saved
            print(f"repeat {repeat + 1}/{args.repeats} {mode}: blocked {stalls[mode][-2:]} s, "
                  f"complete after {saved} s", flush=True)
    print(f"\n{args.checkpoint_model} + AdamW, FSDP, {NPROC} CPU ranks, 2 saves per run, {args.repeats} runs each")
    print("| save | training blocked per save (s), median | spread | until complete (s), median | spread |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for mode in ("sync", "async"):
        print(f"| {mode} | {statistics.median(stalls[mode]):.2f} | {min(stalls[mode]):.2f}..{max(stalls[mode]):.2f} "
              f"| {statistics.median(totals[mode]):.2f} | {min(totals[mode]):.2f}..{max(totals[mode]):.2f} |")
    print(f"\nasync stall / sync stall: {statistics.median(stalls['async']) / statistics.median(stalls['sync']):.3f}")


def trainer_ms_per_step(args: argparse.Namespace, parallel: str, nproc: int) -> float:
    """The trainer's median time per step over the reports after --warmup: gpt2-small-narrow, PARALLEL,
    NPROC ranks, a checkpoint only at the end."""
    with tempfile.TemporaryDirectory() as workdir:
        metrics = pathlib.Path(workdir, "metrics.jsonl")
        torchrun([str(SCRIPTS_DIR / "train_ddp.py"), "--model", "gpt2-small-narrow", "--parallel", parallel,
                  "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--max-steps", str(args.steps),
                  "--warmup-steps", "10", "--log-every", "10", "--grad-clip", "1.0", "--seed", "0",
                  "--num-workers", str(args.num_workers), "--save-every", "0", "--metrics-file", str(metrics),
                  "--ckpt-dir", f"{workdir}/ckpt"], nproc)
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return statistics.median(record["step_time_ms"] for record in records if record["step"] > args.warmup)


def bench_parallel(args: argparse.Namespace) -> None:
    """gpt2-small's 12 blocks at a narrow width: the host work FSDP adds per step (hooks, DTensor dispatch,
    per-parameter work), at a compute small enough for CPU ranks to show it. FSDP against DDP, alternating."""
    print(f"gpt2-small-narrow (12 blocks, width 128), batch {args.batch_size} x {args.seq_len} tokens per rank, "
          f"{args.steps} steps ({args.warmup} warm-up), {args.num_workers} DataLoader worker(s)/rank, "
          f"{args.repeats} runs each; load average {os.getloadavg()[0]:.2f} at the start")
    print("| CPU ranks | DDP ms/step, median (spread) | FSDP ms/step, median (spread) | FSDP / DDP |\n"
          "| ---: | ---: | ---: | ---: |")
    for nproc in (1, 2):
        runs: dict[str, list[float]] = {"ddp": [], "fsdp": []}
        for _ in range(args.repeats):
            for parallel in ("ddp", "fsdp"):
                runs[parallel].append(trainer_ms_per_step(args, parallel, nproc))
        ddp, fsdp = statistics.median(runs["ddp"]), statistics.median(runs["fsdp"])
        print(f"| {nproc} | {ddp:.1f} ({spread(runs['ddp'])}) | {fsdp:.1f} ({spread(runs['fsdp'])}) "
              f"| {fsdp / ddp:.2f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def main() -> None:
    args = parse_args()
    if args.bare_loop_worker:
        run_bare_loop(args)
        return
    if args.bare_fsdp_worker:
        run_bare_fsdp_loop(args)
        return
    if args.bench == "gpt":
        bench_gpt(args)
        return
    if args.bench == "stall":
        bench_stall(args)
        return
    if args.bench == "parallel":
        bench_parallel(args)
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
