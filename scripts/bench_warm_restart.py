#!/usr/bin/env python3
"""Benchmark: the round trip of a preempted run with --compile, stopped by SIGTERM, saved, started again.

    python scripts/bench_warm_restart.py                       # gpt2-small-narrow on this host's CPU
    python scripts/bench_warm_restart.py --repeats 5 --model gpt-tiny

One run trains from an empty compile cache until its --stop-after step, gets SIGTERM (what `docker
stop`, Slurm and Kubernetes send) and saves; stop-to-saved is from the signal to the process's exit.
Then each restart resumes from a copy of that checkpoint folder, three ways:
  same cache     the compile cache the first run filled: the same container, or a new one with the same
                 `user-cache` volume (both keep ~/.cache, where the image puts torch.compile's caches)
  artifacts      an empty compile cache, with the compiled code the first run saved beside its
                 checkpoints: a new pod, a Slurm requeue on another node, a new machine
  cold           an empty compile cache and no compiled code: what every restart cost before
Each restart's first-step figures come from its first metrics record (trainer/first_step.py): time to
the first step, and its parts. Restarts alternate (same cache, artifacts, cold, ...), --repeats each;
the table gives each one's median and spread (min..max), with the load average before and after.

--compile on a CPU needs g++, which the CPU image lacks: run this on a host with torch and g++ (the test
venv of `make test-unit` has the image's torch), or on a GPU machine (then the model runs on its GPU).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from gpu_bench import read_lines  # the metrics file's JSON lines, a half-written one skipped

SCRIPTS_DIR = pathlib.Path(__file__).resolve().parent
WAYS = ("same cache", "artifacts", "cold")
RUN_LIMIT_S = 900  # a run that takes longer is stuck: its log ends the benchmark
PARTS = ("time_to_first_step_s", "startup_s", "checkpoint_load_s", "compile_s", "first_step_s")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_warm_restart.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2-small-narrow", help="trainer --model")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sample")
    parser.add_argument("--batch-size", type=int, default=2, help="samples per step")
    parser.add_argument("--stop-after", type=int, default=3, help="the step after which the first run gets SIGTERM")
    parser.add_argument("--repeats", type=int, default=3, help="restarts of each way; the median is reported")
    return parser.parse_args(argv)


def trainer_command(args: argparse.Namespace, ckpt_dir: pathlib.Path, max_steps: int) -> list[str]:
    return [sys.executable, str(SCRIPTS_DIR / "train_ddp.py"), "--model", args.model, "--compile",
            "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--num-workers", "0",
            "--max-steps", str(max_steps), "--save-every", "0", "--log-every", "1", "--ckpt-dir", str(ckpt_dir),
            "--metrics-file", str(ckpt_dir.with_suffix(".jsonl"))]


def records(ckpt_dir: pathlib.Path) -> list[dict]:
    """The trainer's metrics records so far; a line still being written is not one yet."""
    return [record for record in read_lines(ckpt_dir.with_suffix(".jsonl")) if "step" in record]


def first_run(args: argparse.Namespace, ckpt_dir: pathlib.Path, cache: pathlib.Path) -> tuple[dict, float]:
    """Trains from an empty cache, stops it with SIGTERM after --stop-after steps; returns its first
    record and the seconds from the signal to its exit (the save included)."""
    log = ckpt_dir.with_suffix(".log")
    with open(log, "w") as output:  # a file, not a pipe: a chatty compile cannot fill it and stall the run
        process = subprocess.Popen(trainer_command(args, ckpt_dir, 100_000), env=environment(cache),
                                   stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + RUN_LIMIT_S
    while not any(record["step"] >= args.stop_after for record in records(ckpt_dir)):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit(f"bench_warm_restart.py: error: the first run did not reach step {args.stop_after} within "
                     f"{RUN_LIMIT_S} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    signalled = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=RUN_LIMIT_S)
    stop_to_saved = time.perf_counter() - signalled
    if process.returncode != 0 or not list(ckpt_dir.glob("step_*.pt")):
        sys.exit(f"bench_warm_restart.py: error: the first run did not save on SIGTERM (exit {process.returncode})")
    return records(ckpt_dir)[0], stop_to_saved


def restart(args: argparse.Namespace, saved: pathlib.Path, workdir: pathlib.Path, way: str, index: int,
            warm_cache: pathlib.Path) -> dict:
    """Resumes a copy of SAVED for two steps, WAY's cache and compiled code; returns its first record."""
    ckpt_dir = workdir / f"{way.replace(' ', '-')}-{index}"
    shutil.copytree(saved, ckpt_dir, ignore=shutil.ignore_patterns("*.lock"))
    if way == "cold":
        for compiled_code in ckpt_dir.glob("compiled_code.*.bin"):
            compiled_code.unlink()
    cache = warm_cache if way == "same cache" else workdir / f"empty-cache-{way.replace(' ', '-')}-{index}"
    resumed_at = max(int(path.stem.split("_")[1]) for path in saved.glob("step_*.pt"))
    result = subprocess.run(trainer_command(args, ckpt_dir, resumed_at + 2), env=environment(cache),
                            capture_output=True, text=True, timeout=RUN_LIMIT_S, check=False)
    if result.returncode != 0:
        sys.exit(f"bench_warm_restart.py: error: the {way} restart failed:\n{result.stdout}{result.stderr}")
    return records(ckpt_dir)[0]


def environment(cache: pathlib.Path) -> dict[str, str]:
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}..{max(values):.1f})"


def table(first: dict, stop_to_saved: float, results: dict[str, list[dict]], args: argparse.Namespace,
          load_before: float, load_after: float) -> str:
    lines = [f"{args.model}, --compile, 1 CPU process, seq {args.seq_len}, batch {args.batch_size}; torch "
             f"{torch_version()}; {args.repeats} restarts each; load average {load_before:.2f} before, "
             f"{load_after:.2f} after", "",
             f"first run (empty cache): first step {first['time_to_first_step_s']:.1f} s after the start "
             f"(compile {first['compile_s']:.1f} s); SIGTERM to saved and exited: {stop_to_saved:.1f} s", "",
             "| restart | to first step (s) | against cold | start-up | checkpoint load | compile | "
             "the step itself | cache hits / misses |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    cold = statistics.median(record["time_to_first_step_s"] for record in results["cold"])
    for way in WAYS:
        rows = results[way]
        total = [record["time_to_first_step_s"] for record in rows]
        hits = statistics.median(record.get("compile_cache_hits", 0) for record in rows)
        misses = statistics.median(record.get("compile_cache_misses", 0) for record in rows)
        lines.append(f"| {way} | {cell(total)} | {statistics.median(total) / cold:.2f}x | "
                     + " | ".join(cell([record[part] for record in rows]) for part in PARTS[1:])
                     + f" | {hits:.0f} / {misses:.0f} |")
    return "\n".join(lines)


def torch_version() -> str:
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, check=False).stdout.strip()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_warm_restart-") as folder:
        workdir = pathlib.Path(folder)
        saved, warm_cache = workdir / "first", workdir / "cache"
        first, stop_to_saved = first_run(args, saved, warm_cache)
        results: dict[str, list[dict]] = {way: [] for way in WAYS}
        for index in range(args.repeats):
            for way in WAYS:
                results[way].append(restart(args, saved, workdir, way, index, warm_cache))
                print(f"[bench_warm_restart] {way} #{index + 1}: first step after "
                      f"{results[way][-1]['time_to_first_step_s']:.1f} s", file=sys.stderr, flush=True)
    print(table(first, stop_to_saved, results, args, load_before, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
