#!/usr/bin/env python3
"""All-reduce bandwidth over a range of message sizes, measured and reported the way nccl-tests does.

Run it under torchrun, one process per GPU (NCCL) or per CPU rank (gloo):

    torchrun --nproc-per-node=8 bench_allreduce.py
    torchrun --nproc-per-node=2 bench_allreduce.py --backend gloo --max-bytes 16M

For each size, every rank sums a buffer of that many bytes in place; the time is the slowest rank's
mean over --iters all-reduces after --warmup untimed ones. As in nccl-tests (doc/PERFORMANCE.md):

    algbw = size / time
    busbw = algbw * 2(n-1)/n

A ring all-reduce sends and receives 2(n-1)/n of the buffer on every link, so busbw is what each link
carried: it does not depend on the rank count and compares directly with link speed (NVLink, PCIe,
InfiniBand). Before timing, each size is checked once with every rank contributing rank+1, so a
transport that corrupts or drops data shows up in the #wrong column and fails the run (exit code 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from trainer.cli import OneLineErrorParser

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
GB = 1e9  # nccl-tests reports decimal GB/s


@dataclasses.dataclass(frozen=True)
class Row:
    """One message size's result, as a row of the nccl-tests table."""
    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int


def parse_size(text: str) -> int:
    """Bytes from '8', '64K', '16M' or '1G' (binary units, as nccl-tests' -b/-e take them)."""
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use bytes with an optional K, M or G, e.g. 64M")
    return int(match.group(1)) * SIZE_UNITS[match.group(2)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog="bench_allreduce.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="All-reduce bandwidth over message sizes, as nccl-tests measures it; run it under torchrun.\n"
                    "algbw = size / time, busbw = algbw * 2(n-1)/n for n ranks.",
        epilog="example: torchrun --nproc-per-node=2 bench_allreduce.py --backend gloo --max-bytes 16M\n"
               "exit codes: 0 every sum was correct, 1 a sum was wrong or the run failed, 2 a bad flag")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                        help="nccl on GPUs, gloo on CPU ranks; auto picks nccl when CUDA is available")
    parser.add_argument("--min-bytes", type=parse_size, default=parse_size("1K"), metavar="SIZE",
                        help="smallest message (default 1K)")
    parser.add_argument("--max-bytes", type=parse_size, default=parse_size("256M"), metavar="SIZE",
                        help="largest message (default 256M; use 4G or more to reach NVLink's peak)")
    parser.add_argument("--factor", type=int, default=2, help="multiply the size by this each step (default 2)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed all-reduces per size (default 20)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="element type (default float32)")
    parser.add_argument("--json-file", metavar="PATH", help="also write the results as JSON (rank 0)")
    args = parser.parse_args(argv)
    element_size = DTYPES[args.dtype].itemsize
    if args.min_bytes < element_size:
        parser.error(f"--min-bytes must be at least one {args.dtype} element ({element_size} bytes)")
    if args.min_bytes > args.max_bytes:
        parser.error(f"--min-bytes ({args.min_bytes} bytes) is larger than --max-bytes ({args.max_bytes} bytes)")
    if args.factor < 2:
        parser.error(f"--factor must be 2 or more, not {args.factor}")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be 1 or more and --warmup 0 or more")
    return args


def message_sizes(min_bytes: int, max_bytes: int, factor: int, element_size: int) -> list[int]:
    """Sizes from MIN to MAX growing by FACTOR, each rounded down to whole elements."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size - size % element_size)
        size *= factor
    return sizes


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: what each link of a ring carries, 2(n-1)/n of the data."""
    return algbw * 2 * (world_size - 1) / world_size


def torchrun_env() -> tuple[int, int, int]:
    """(rank, local rank, world size) that torchrun sets, or exits with one line saying how to launch."""
    try:
        return int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError:
        sys.exit("bench_allreduce.py: error: not started by torchrun; run it as "
                 "`torchrun --nproc-per-node=N bench_allreduce.py [flags]`")


def pick_device(backend: str, local_rank: int) -> tuple[str, torch.device]:
    """The backend to use and this rank's device, or exits with one line when the pair cannot work."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        backend = "nccl" if gpus else "gloo"
    if backend == "gloo":
        return backend, torch.device("cpu")
    if not gpus:
        sys.exit("bench_allreduce.py: error: --backend nccl needs CUDA GPUs, but torch sees none; "
                 "use --backend gloo for CPU ranks")
    if local_rank >= gpus:
        sys.exit(f"bench_allreduce.py: error: local rank {local_rank} has no GPU ({gpus} visible); "
                 f"use --nproc-per-node={gpus} or fewer")
    return backend, torch.device("cuda", local_rank)


def count_wrong(tensor: torch.Tensor, rank: int, world_size: int) -> int:
    """Elements of one all-reduce of rank+1 from every rank that differ from the true sum n(n+1)/2."""
    tensor.fill_(rank + 1)
    dist.all_reduce(tensor)
    expected = world_size * (world_size + 1) / 2
    eps = torch.finfo(tensor.dtype).eps
    # Every partial sum is a whole number no larger than the total, so the result is exact while the total
    # is (up to 2/eps: 256 for bfloat16); beyond that, allow the rounding n additions can make.
    tolerance = 0.0 if expected <= 2 / eps else expected * world_size * eps
    wrong = ((tensor - expected).abs() > tolerance).sum()
    dist.all_reduce(wrong)
    return int(wrong.item())


def seconds_per_allreduce(tensor: torch.Tensor, warmup: int, iters: int, synchronize: Callable[[], None]) -> float:
    """The slowest rank's mean time for one in-place all-reduce of TENSOR."""
    # Zeros sum to zeros, so no dtype overflows to inf or goes denormal (slow on CPUs) however often it runs.
    tensor.zero_()
    for _ in range(warmup):
        dist.all_reduce(tensor)
    synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    synchronize()
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=tensor.device)
    # The collective is done only when its last rank is, so the slowest rank's time is the honest one.
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def measure(args: argparse.Namespace, rank: int, world_size: int, device: torch.device) -> list[Row]:
    """One row per message size; smaller messages are views of one buffer, as in nccl-tests."""
    dtype = DTYPES[args.dtype]
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.factor, dtype.itemsize)
    buffer = torch.empty(sizes[-1] // dtype.itemsize, dtype=dtype, device=device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for size in sizes:
        tensor = buffer[:size // dtype.itemsize]
        wrong = count_wrong(tensor, rank, world_size)
        seconds = seconds_per_allreduce(tensor, args.warmup, args.iters, synchronize)
        algbw = size / seconds / GB
        rows.append(Row(size, tensor.numel(), args.dtype, seconds * 1e6, algbw, bus_bandwidth(algbw, world_size),
                        wrong))
    return rows


def average_busbw(rows: list[Row]) -> float:
    """nccl-tests' summary figure: the mean bus bandwidth over all sizes."""
    return sum(row.busbw_gbps for row in rows) / len(rows)


def print_table(rows: list[Row], backend: str, world_size: int, device: torch.device) -> None:
    print(f"# bench_allreduce: {backend}, {world_size} ranks on {device.type}, torch {torch.__version__}")
    print(f"# {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}")
    print(f"# {'(B)':>12} {'(elements)':>12} {'':>9} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}")
    for row in rows:
        print(f"  {row.size_bytes:>12} {row.count:>12} {row.dtype:>9} {'sum':>6} {row.time_us:>10.1f} "
              f"{row.algbw_gbps:>8.3f} {row.busbw_gbps:>8.3f} {row.wrong:>7}")
    print(f"# Out of bounds values : {sum(row.wrong for row in rows)} {'OK' if results_correct(rows) else 'WRONG'}")
    print(f"# Avg bus bandwidth    : {average_busbw(rows):.3f} GB/s")


def results_correct(rows: list[Row]) -> bool:
    return all(row.wrong == 0 for row in rows)


def write_json(path: str, rows: list[Row], backend: str, world_size: int, device: torch.device) -> None:
    report = {"backend": backend, "world_size": world_size, "device": device.type, "torch": torch.__version__,
              "correct": results_correct(rows), "avg_busbw_gbps": average_busbw(rows),
              "rows": [dataclasses.asdict(row) for row in rows]}
    with open(path, "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, local_rank, world_size = torchrun_env()
    backend, device = pick_device(args.backend, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Naming the GPU binds the process group to it, so barriers and collectives never guess the device.
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    try:
        rows = measure(args, rank, world_size, device)
    except dist.DistError as error:
        # The backend's own message names the failing transport; the traceback adds nothing for a user.
        sys.exit(f"bench_allreduce.py: error: rank {rank}: all-reduce failed: {str(error).splitlines()[0]}")
    dist.destroy_process_group()
    if rank == 0:
        print_table(rows, backend, world_size, device)
        if args.json_file:
            write_json(args.json_file, rows, backend, world_size, device)
        if not results_correct(rows):
            print("bench_allreduce.py: error: the all-reduce returned wrong sums: the transport corrupts data; "
                  "rerun with NCCL_DEBUG=INFO to see which one", file=sys.stderr)
    return 0 if results_correct(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
