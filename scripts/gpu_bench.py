#!/usr/bin/env python3
"""The GPU benchmark a short loan completes: the trainer against a bare loop, under DDP and FSDP, at batch
16 and 32, gpt2-small (bf16, --compile, 1024-token context) on every visible GPU.

    python3 scripts/gpu_bench.py --out "$OUT"            # 8 runs, an estimated 4 to 6 minutes; at most 8
    python3 scripts/gpu_bench.py --out results --steps 300 --warmup 50 --window 50 --budget-s 1500

Each run trains --warmup steps first (compilation, the allocator, the clocks settling), then --steps steps
measured in windows of --window steps. Its tokens/s is the median window, with the spread of the windows
(min..max): a run that slows down as the GPU heats shows a low minimum, where the last window alone would
flatter or hide it. MFU is that median against the GPU's dense bf16 peak (trainer/metrics.py, or
--peak-tflops). NVML (nvidia-ml-py, where installed) samples the GPUs this process sees, by UUID, once a
second, and only the samples taken while the measured steps went count: utilization, power and SM clock,
as medians (the SM clock's minimum too: a clock that fell is a GPU that throttled). The trainer's rows
carry its data-wait share, the part of wall time it waited for batches.

The bare loop is what the trainer's own loop costs against: the same model and trainer.parallel's
parallelize() (per-block compile, the loss compiled with the head, DDP or FSDP2), the trainer's autocast
scope, fused AdamW and one fixed batch already on the GPU; no DataLoader, no clipping, no metrics, no
checkpointer. The two loops of each pair take turns going first, so neither always meets the hotter GPU.

A loan is short, so every run stands alone. One that fails, outlives its time limit or measures no window
becomes an error row with its last lines, and the next run starts. The JSON (gpu_bench.json) and the
Markdown table (gpu_bench.md) in --out are rewritten after every run: a loan that ends early still
returns what was measured. A run's limit follows from its steps (RUN_START_S, then SLOWEST_STEP_S a
step); on expiry torchrun gets SIGTERM, which it passes on to its workers, and GRACE_S later whatever is
left of its process tree gets SIGKILL, so the GPU is free for the next run. A run that would not fit in
what is left of --budget-s is skipped, as a row that says so.

Exit status 0 once the runs were tried, whatever their outcome (the rows say it); 2 with one line on a
host where torch sees no GPU, or for a bad argument.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, NamedTuple

SCRIPTS_DIR = pathlib.Path(__file__).resolve().parent
MODEL, SEQ_LEN = "gpt2-small", 1024
PARALLELS, BATCH_SIZES, LOOPS = ("ddp", "fsdp"), (16, 32), ("trainer", "bare")
NVML_EVERY_S = 1.0
WATCH_EVERY_S = 0.2  # how often the run's lines are looked at: the measured span's edges are this sharp
# A run's time limit: torch's import, the rendezvous, a cold compile of gpt2-small (about 30 s on one
# H200) and the trainer's last checkpoint, then the slowest step expected (FSDP at batch 32 on an H100,
# about 0.25 s) with room to spare.
RUN_START_S, SLOWEST_STEP_S = 150.0, 0.5
MIN_RUN_S = 60.0  # less left than this of the budget: the run is skipped, not started to be cut short
GRACE_S = 15.0  # from torchrun's SIGTERM to the SIGKILL of what is left
LAST_LINES = 20


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=90, help="measured steps per run (at least 2 windows)")
    parser.add_argument("--warmup", type=int, default=30, help="steps before the measured ones (whole windows)")
    parser.add_argument("--window", type=int, default=30, help="steps per measured window")
    parser.add_argument("--out", default=".", help="folder for gpu_bench.json and gpu_bench.md ($OUT on a lent machine)")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="seconds for all runs; a run that would not fit is skipped (default 480: 8 minutes)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense bf16 peak for MFU, when its name is not in trainer/metrics.py's table")
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


class Run(NamedTuple):
    loop: str
    parallel: str
    batch_size: int


def plan() -> list[Run]:
    """Batch 16 first (the figures wanted most, should the budget run out), DDP then FSDP; the two loops of
    each pair take turns going first."""
    pairs = [(batch_size, parallel) for batch_size in BATCH_SIZES for parallel in PARALLELS]
    return [Run(loop, parallel, batch_size) for index, (batch_size, parallel) in enumerate(pairs)
            for loop in (LOOPS if index % 2 == 0 else LOOPS[::-1])]


def run_limit_s(args: argparse.Namespace) -> float:
    return RUN_START_S + (args.warmup + args.steps) * SLOWEST_STEP_S


# ---- what a run measured (tests/host/test_gpu_bench.py) ---------------------------

def measured_windows(records: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """The windows after the warm-up: trainer metrics records, or the bare loop's, both keyed by step. A
    record without a step or a rate (the trainer's {"note": ...}) is not a window."""
    return [record for record in records
            if isinstance(record.get("step"), int) and "tokens_per_sec" in record and record["step"] > warmup]


def measured_span(first_seen: dict[int, float], warmup: int) -> tuple[float, float] | None:
    """When the measured steps went, by when each window's line first appeared: from the warm-up's last
    line to the last measured line; None before a measured window ended."""
    measured = [step for step in first_seen if step > warmup]
    if warmup not in first_seen or not measured:
        return None
    return first_seen[warmup], first_seen[max(measured)]


def samples_within(samples: list[dict[str, float]], span: tuple[float, float] | None) -> list[dict[str, float]]:
    """The samples taken during SPAN (each stamped "t", monotonic seconds)."""
    if span is None:
        return []
    return [sample for sample in samples if span[0] <= sample["t"] <= span[1]]


def summarize_run(run: Run, windows: list[dict[str, Any]], samples: list[dict[str, float]], *,
                  flops_per_token: int, peak_flops: float | None, gpus: int) -> dict[str, Any]:
    """One row: tokens/s of the median window and its spread, MFU, the NVML medians and the data wait;
    an error row when no window was measured."""
    rates = [window["tokens_per_sec"] for window in windows]
    row: dict[str, Any] = {**run._asdict(), "windows": len(rates)}
    if not rates:
        return {**row, "error": "no measured window"}
    tokens = statistics.median(rates)
    row.update(tokens_per_sec=tokens, tokens_per_sec_min=min(rates), tokens_per_sec_max=max(rates),
               mfu=tokens * flops_per_token / (peak_flops * gpus) if peak_flops else None)
    waits = [window["data_wait_share"] for window in windows if "data_wait_share" in window]
    row["data_wait_share"] = statistics.median(waits) if waits else None
    row["nvml_samples"] = len(samples)
    for name in ("utilization_pct", "power_w", "sm_clock_mhz"):
        values = [sample[name] for sample in samples]
        row[name] = statistics.median(values) if values else None
    row["sm_clock_mhz_min"] = min((sample["sm_clock_mhz"] for sample in samples), default=None)
    return row


def cell(value: float | None, form: str, unit: str = "") -> str:
    """VALUE formatted, or nothing: an empty cell is a figure not measured, not a zero."""
    return "" if value is None else format(value, form) + unit


def markdown_table(rows: list[dict[str, Any]], title: str) -> str:
    lines = [title, "",
             "| loop | parallel | batch/GPU | tokens/s (median window) | spread | MFU | trainer / bare | "
             "data wait | GPU util | power (W) | SM clock (MHz), median (min) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        head = f"| {row['loop']} | {row['parallel']} | {row['batch_size']} |"
        if "error" in row:
            lines.append(f"{head} {row['error']} |" + " |" * 7)
            continue
        against = rate(rows, "bare", row["parallel"], row["batch_size"])
        ratio = row["tokens_per_sec"] / against if row["loop"] == "trainer" and against else None
        mfu = None if row["mfu"] is None else 100 * row["mfu"]
        wait = None if row["data_wait_share"] is None else 100 * row["data_wait_share"]
        clock = (f"{cell(row['sm_clock_mhz'], '.0f')} ({cell(row['sm_clock_mhz_min'], '.0f')})"
                 if row["sm_clock_mhz"] is not None else "")
        lines.append(f"{head} {row['tokens_per_sec']:,.0f} | {row['tokens_per_sec_min']:,.0f}.."
                     f"{row['tokens_per_sec_max']:,.0f} | {cell(mfu, '.1f', '%')} | {cell(ratio, '.3f')} | "
                     f"{cell(wait, '.1f', '%')} | {cell(row['utilization_pct'], '.0f', '%')} | "
                     f"{cell(row['power_w'], '.0f')} | {clock} |")
    fsdp_against_ddp = [f"batch {batch}: {fsdp / ddp:.3f}" for batch in BATCH_SIZES
                        if (ddp := rate(rows, "trainer", "ddp", batch)) and (fsdp := rate(rows, "trainer", "fsdp", batch))]
    if fsdp_against_ddp:
        lines += ["", f"trainer FSDP / trainer DDP, tokens/s: {', '.join(fsdp_against_ddp)}"]
    return "\n".join(lines)


def rate(rows: list[dict[str, Any]], loop: str, parallel: str, batch_size: int) -> float | None:
    """The run's tokens/s; None where it failed, even if it measured windows before it did."""
    return next((row.get("tokens_per_sec") for row in rows if "error" not in row and
                 Run(row["loop"], row["parallel"], row["batch_size"]) == Run(loop, parallel, batch_size)), None)


def report(rows: list[dict[str, Any]], machine: dict[str, Any], args: argparse.Namespace, *,
           flops_per_token: int, peak: tuple[str, float] | None) -> dict[str, Any]:
    return {"benchmark": "gpu_bench.py", "model": MODEL, "seq_len": SEQ_LEN, "precision": "bf16", "compile": True,
            "warmup_steps": args.warmup, "measured_steps": args.steps, "window_steps": args.window,
            "run_limit_s": run_limit_s(args), "budget_s": args.budget_s, "flops_per_token": flops_per_token,
            "peak_tflops": peak[1] / 1e12 if peak else None, "peak_from": peak[0] if peak else None,
            "machine": machine, "runs": rows}


def write_results(out: pathlib.Path, result: dict[str, Any], table: str) -> None:
    """Both files whole or not at all: a loan cut off mid-write leaves the previous ones."""
    for name, text in (("gpu_bench.json", json.dumps(result, indent=2) + "\n"), ("gpu_bench.md", table + "\n")):
        partial = out / f".{name}.partial"
        partial.write_text(text)
        os.replace(partial, out / name)


# ---- NVML and the run's lines, watched beside a run -----------------------------------------------

class GpuSampler:
    """Beside a run: takes an NVML sample of each GPU in UUIDS every EVERY_S, stamped with its time, and
    notes when each step's line first appears in the run's lines file. Without nvidia-ml-py (or a driver
    it loads) it samples nothing and the GPU cells stay empty; a sample NVML refuses is counted in
    `errors`, and the next one is tried."""

    def __init__(self, uuids: list[str], lines_file: pathlib.Path, *, every_s: float = NVML_EVERY_S,
                 watch_every_s: float = WATCH_EVERY_S) -> None:
        self.lines_file, self.every_s, self.watch_every_s = lines_file, every_s, watch_every_s
        self.samples: list[dict[str, float]] = []
        self.first_seen: dict[int, float] = {}
        self.errors = 0
        self.done = threading.Event()
        self.nvml, self.handles = None, []
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception:  # no nvidia-ml-py, or no driver it can load: the run is measured without it
            return
        for uuid in uuids:
            try:
                self.handles.append(pynvml.nvmlDeviceGetHandleByUUID(uuid))
            except Exception:
                self.errors += 1
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self) -> GpuSampler:
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        self.watcher.start()
        if self.nvml:
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.watcher.join()
        if self.nvml:
            self.thread.join()

    def watch(self) -> None:
        while True:
            for record in read_lines(self.lines_file):
                if isinstance(record.get("step"), int):
                    self.first_seen.setdefault(record["step"], time.monotonic())
            if self.done.wait(self.watch_every_s):
                return

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            for handle in self.handles:
                try:
                    self.samples.append(self.sample(handle))
                except Exception:  # a query this card does not answer, or a driver hiccup: counted, not fatal
                    self.errors += 1

    def sample(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        return {"t": time.monotonic(), "utilization_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))}


# ---- the runs -------------------------------------------------------------------------------------

def read_lines(path: pathlib.Path) -> list[dict[str, Any]]:
    """The JSON objects of PATH, one a line; a line half written, or not an object, is skipped."""
    try:
        text = path.read_text()
    except OSError:
        return []  # not written yet
    records = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def process_tree(root: int) -> list[int]:
    """ROOT's descendants, read from /proc: torchrun starts each worker in a session of its own, so no
    process group holds them all."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended while we looked
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_process_tree(process: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to PROCESS (torchrun passes it on to its workers), then SIGKILL to what is left of its tree."""
    tree = process_tree(process.pid)  # now: once torchrun is gone, its orphans are no longer its descendants
    process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace_s)
    for pid in [process.pid, *tree, *process_tree(process.pid)]:
        with contextlib.suppress(OSError):  # gone already (or its number taken by another user's process)
            os.kill(pid, signal.SIGKILL)
    process.wait()


def last_lines(path: pathlib.Path, count: int = LAST_LINES) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-count:]
    except OSError:
        return []


def launch(command: list[str], log: pathlib.Path, limit_s: float) -> str | None:
    """Runs COMMAND with its output in LOG for at most LIMIT_S; None when it exited 0, else what went wrong."""
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            status = process.wait(limit_s)
        except subprocess.TimeoutExpired:
            end_process_tree(process)
            return f"timed out after {limit_s:.0f} s"
        except Stopped:  # the benchmark itself was stopped: the GPU is freed for what comes next
            end_process_tree(process)
            raise
    return None if status == 0 else f"exit status {status}"


def run_command(args: argparse.Namespace, run: Run, gpus: int, lines_file: pathlib.Path,
                workdir: pathlib.Path) -> list[str]:
    if run.loop == "trainer":
        script = [str(SCRIPTS_DIR / "train_ddp.py"), "--model", MODEL, "--parallel", run.parallel,
                  "--precision", "bf16", "--compile", "--seq-len", str(SEQ_LEN), "--batch-size", str(run.batch_size),
                  "--max-steps", str(args.warmup + args.steps), "--warmup-steps", "10", "--log-every", str(args.window),
                  "--save-every", "0", "--num-workers", "2", "--metrics-file", str(lines_file),
                  "--ckpt-dir", str(workdir / f"checkpoints-{run.parallel}-{run.batch_size}")]
        if args.peak_tflops:
            script += ["--peak-tflops", str(args.peak_tflops)]
    else:
        script = [str(pathlib.Path(__file__).resolve()), "--bare-worker", "--parallel", run.parallel,
                  "--batch-size", str(run.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
                  "--window", str(args.window), "--windows-file", str(lines_file)]
    return [args.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}", *script]


def run_one(args: argparse.Namespace, run: Run, *, gpus: int, uuids: list[str], limit_s: float,
            workdir: pathlib.Path, flops_per_token: int, peak_flops: float | None) -> dict[str, Any]:
    """Trains one run; returns its row, an error row when it failed, hung or measured nothing."""
    name = f"{run.loop}-{run.parallel}-{run.batch_size}"
    lines_file, log = workdir / f"{name}.jsonl", workdir / f"{name}.log"
    print(f"[gpu_bench] {run.loop}, {run.parallel}, batch {run.batch_size}/GPU, {gpus} GPU(s), "
          f"at most {limit_s:.0f} s", file=sys.stderr, flush=True)
    started = time.monotonic()
    with GpuSampler(uuids, lines_file) as sampler:
        failure = launch(run_command(args, run, gpus, lines_file, workdir), log, limit_s)
    windows = measured_windows(read_lines(lines_file), args.warmup)
    samples = samples_within(sampler.samples, measured_span(sampler.first_seen, args.warmup))
    row = summarize_run(run, windows, samples, flops_per_token=flops_per_token, peak_flops=peak_flops, gpus=gpus)
    row.update(seconds=round(time.monotonic() - started, 1), nvml_errors=sampler.errors)
    if failure:
        row["error"] = failure
    if "error" in row:
        row["last_lines"] = last_lines(log)
        print(f"[gpu_bench] {name}: {row['error']}; its last lines:", *row["last_lines"], sep="\n  ",
              file=sys.stderr, flush=True)
    else:
        print(f"[gpu_bench] {name}: {row['tokens_per_sec']:,.0f} tokens/s in {row['seconds']} s",
              file=sys.stderr, flush=True)
    return row


def run_benchmark(args: argparse.Namespace, *, gpus: int, uuids: list[str], machine: dict[str, Any],
                  flops_per_token: int, peak: tuple[str, float] | None, started: float | None = None,
                  clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Every run of plan() within --budget-s from STARTED (the process's start, by CLOCK); the results in
    --out after each. A SIGTERM or SIGINT ends the run in flight and keeps what was measured. Returns the
    last result."""
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started, rows = clock() if started is None else started, []
    title = (f"{gpus} x {machine.get('gpu')}, torch {machine.get('torch')}, CUDA {machine.get('cuda')}, "
             f"NCCL {machine.get('nccl')}; {MODEL}, bf16, compile, seq {SEQ_LEN}; {args.steps} steps in windows "
             f"of {args.window} after {args.warmup} warm-up; load average {machine.get('load_average', ['?'])[0]} before")
    result = report(rows, machine, args, flops_per_token=flops_per_token, peak=peak)
    with tempfile.TemporaryDirectory(prefix="gpu_bench-") as workdir, stopped_by_signals():
        for run in plan():
            # The limit leaves the grace period a time-out takes to end the run's processes.
            left = args.budget_s - (clock() - started) - GRACE_S
            try:
                if left < MIN_RUN_S:
                    rows.append({**run._asdict(), "error": f"skipped: {max(left, 0):.0f} s of --budget-s left"})
                else:
                    rows.append(run_one(args, run, gpus=gpus, uuids=uuids, limit_s=min(run_limit_s(args), left),
                                        workdir=pathlib.Path(workdir), flops_per_token=flops_per_token,
                                        peak_flops=peak[1] if peak else None))
            except Stopped as stop:
                rows.append({**run._asdict(), "error": f"stopped by {stop}"})
            machine.update(wall_s=round(clock() - started, 1),
                           load_average_after=[round(value, 2) for value in os.getloadavg()])
            write_results(out, result, markdown_table(rows, title))
            if rows[-1].get("error", "").startswith("stopped by"):
                break
    return result


class Stopped(Exception):
    """A SIGTERM or SIGINT to the benchmark: the run in flight ends, the results so far are kept."""


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)
    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


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
        # The trainer's scope: the forward and the loss under autocast, the backward outside it.
        with torch.autocast("cuda", dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.window == 0:
            torch.cuda.synchronize()
            now = time.perf_counter()
            if dist.get_rank() == 0:  # the warm-up's windows too: the last one marks where measuring starts
                rate = args.window * args.batch_size * SEQ_LEN * dist.get_world_size() / (now - window_started)
                with open(args.windows_file, "a") as file:
                    file.write(json.dumps({"step": step, "tokens_per_sec": rate}) + "\n")
            window_started = now
    dist.destroy_process_group()


def machine_description(gpus: int) -> tuple[dict[str, Any], list[str]]:
    """What the JSON says of the machine, and the NVML UUIDs of the GPUs this process sees."""
    import torch
    uuids = []
    for index in range(gpus):
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))
        uuids.append(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    machine = {"gpus": gpus, "gpu": torch.cuda.get_device_name(0), "gpu_uuids": uuids, "torch": torch.__version__,
               "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
               "load_average": [round(value, 2) for value in os.getloadavg()]}
    return machine, uuids


def main(argv: list[str]) -> int:
    started = time.monotonic()  # --budget-s counts torch's import and the model's FLOPs too
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
    from trainer.metrics import known_peak
    from trainer.model import build_model
    flops = flops_per_token(build_model(MODEL, num_classes=0, vocab_size=None), SEQ_LEN)
    machine, uuids = machine_description(gpus)
    peak = ("--peak-tflops", args.peak_tflops * 1e12) if args.peak_tflops else known_peak(machine["gpu"])
    run_benchmark(args, gpus=gpus, uuids=uuids, machine=machine, flops_per_token=flops, peak=peak, started=started)
    print((pathlib.Path(args.out) / "gpu_bench.md").read_text(), end="")
    print(f"\n[gpu_bench] {args.out}/gpu_bench.json and gpu_bench.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
