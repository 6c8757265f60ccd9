"""doctor's command line: the flags, the checks in the order they run, and the three ways to print them
(a line per check, --brief, --json)."""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import warnings
from collections.abc import Callable

from doctor import architecture, gpu, limits, nccl, network
from doctor.machine import Machine
from doctor.report import EXIT_CODES, FAIL, PASS, SKIP, WARN, Result, brief_lines, overall_status


class OneLineErrorParser(argparse.ArgumentParser):
    """A bad flag is one line that points at --help. (Kept here, not imported: doctor is copied onto bare
    hosts, so it needs nothing beside the standard library.)"""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# Every check, in the order doctor runs and prints them. The limit checks take their values, not the machine.
CHECKS: dict[str, Callable[[Machine], Result]] = {
    "platform": architecture.check_platform, "torch": gpu.check_torch, "gpus": gpu.check_gpus,
    "driver": gpu.check_driver, "arch": gpu.check_arch, "nccl": nccl.check_nccl, "allreduce": nccl.check_allreduce,
    "network": network.check_network, "topology": gpu.check_topology,
    "shm": lambda machine: limits.check_shm(machine.options.shm_path, machine.options.min_shm_gib),
    "memlock": lambda _: limits.check_memlock(), "stack": lambda _: limits.check_stack(),
    "infiniband": network.check_infiniband, "nccl-env": nccl.check_nccl_env, "port": nccl.check_port,
}


def run_checks(options: argparse.Namespace) -> list[Result]:
    machine = Machine(options)
    return [Result(name, SKIP, "left out (--skip or --only)") if name in options.skip else check(machine)
            for name, check in CHECKS.items()]


def print_human(results: list[Result], status: str) -> None:
    width = max(len(result.name) for result in results)
    for result in results:
        print(f"{result.status.upper():<4}  {result.name:<{width}}  {result.finding}")
        if result.fix:
            print(f"{'':<4}  {'':<{width}}  fix: {result.fix}")
    counts = collections.Counter(result.status for result in results)
    print(f"\noverall: {status.upper()} ({counts[FAIL]} failed, {counts[WARN]} warned, {counts[PASS]} passed, "
          f"{counts[SKIP]} skipped); exit code {EXIT_CODES[status]}")


def print_brief(results: list[Result], _status: str) -> None:
    for line in brief_lines(results):
        print(line)


def print_json(results: list[Result], status: str) -> None:
    print(json.dumps({"status": status, "exit_code": EXIT_CODES[status],
                      "checks": [dataclasses.asdict(result) for result in results]}, indent=2))


def port_number(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: use a number from 1 to 65535")
    return int(text)


def check_names(text: str) -> set[str]:
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - CHECKS.keys()
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown check {', '.join(sorted(unknown))}: choose from {', '.join(CHECKS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog="doctor", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Checks that this container (or host) can train PyTorch on several GPUs, and explains\n"
                    "how to fix what it cannot.\n\nchecks, in order: " + ", ".join(CHECKS),
        epilog="exit codes: 0 every check passed (or was skipped), 1 a check warned, 2 a check failed, a flag\n"
               "was wrong or the --nccl-log file cannot be read. Without a GPU the gpus check warns (a CPU-only\n"
               "host can be intended) and the GPU checks are skipped; --require-gpu makes it fail. The allreduce\n"
               "check runs bench_allreduce.py: NCCL across every visible GPU, or gloo across 2 CPU ranks without\n"
               "one; on GPUs the network check reads NCCL's log of it.")
    parser.add_argument("--json", action="store_true", help="print one JSON object (status, exit_code, checks) instead")
    parser.add_argument("--require-gpu", action="store_true", help="fail, not warn, when no GPU is visible")
    parser.add_argument("--port", type=port_number, help="rendezvous port to test (default: MASTER_PORT, else 29500)")
    parser.add_argument("--shm-path", default=limits.SHM_PATH,
                        help=f"shared memory mount to measure (default {limits.SHM_PATH})")
    parser.add_argument("--min-shm-gib", type=float, default=limits.MIN_SHM_GIB, metavar="GIB",
                        help=f"warn when shared memory is smaller (default {limits.MIN_SHM_GIB:g}; Docker's own "
                             "default is 64 MiB)")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--skip", type=check_names, default=set(), metavar="CHECK[,CHECK]",
                        help="checks to leave out, e.g. --skip allreduce for a quick run")
    chosen.add_argument("--only", type=check_names, metavar="CHECK[,CHECK]",
                        help="run only these checks, e.g. --only shm,memlock,stack")
    parser.add_argument("--nccl-log", metavar="FILE",
                        help="only say which network NCCL chose in the run that wrote FILE (run it with "
                             "NCCL_DEBUG=INFO), and warn about a fallback to TCP, InfiniBand without GPUDirect "
                             "RDMA, an OFI plugin without EFA, or a plugin asked for and not found")
    parser.add_argument("--brief", action="store_true",
                        help="print only what warned or failed, one line each with its fix (start-up relays these)")
    options = parser.parse_args(argv)
    if options.nccl_log is not None:
        options.only = {"network"}
    if options.only:
        options.skip = set(CHECKS) - options.only
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    # Torch warns about some of what doctor checks (an unsupported GPU, say); doctor reports it as one line.
    warnings.simplefilter("ignore")
    results = run_checks(options)
    if options.nccl_log is not None:  # a log's verdict alone: nothing about this host is asked
        results = [result for result in results if result.name == "network"]
    status = overall_status(results)
    (print_json if options.json else print_brief if options.brief else print_human)(results, status)
    return EXIT_CODES[status]
