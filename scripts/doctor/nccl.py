"""The NCCL checks: NCCL in torch, a real all-reduce across every GPU (or 2 CPU ranks), the NCCL_*
variables set, and the rendezvous port torchrun would bind."""
from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from doctor.machine import Machine, gpu_skip_reason
from doctor.network import NCCL_INFO_LINE
from doctor.report import FAIL, PASS, SKIP, WARN, Result, human_bytes

DEFAULT_RENDEZVOUS_PORT = 29500  # torchrun's --master-port default
# The doctor's own all-reduce: big enough to show a link's bandwidth, small enough to stay quick.
ALLREDUCE_GPU_BYTES = "256M"
ALLREDUCE_CPU_BYTES = "4M"
ALLREDUCE_CPU_RANKS = 2
ALLREDUCE_TIMEOUT_S = 90
BENCH_SCRIPT = Path(__file__).resolve().parent.parent / "bench_allreduce.py"  # scripts/, beside this folder
# What NCCL logs about its network at NCCL_DEBUG=INFO, and nothing else it says (the network check).
NCCL_NETWORK_LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"}


def check_nccl(machine: Machine) -> Result:
    if reason := gpu_skip_reason(machine):
        return Result("nccl", SKIP, reason)
    torch = machine.torch
    if not torch.distributed.is_nccl_available():
        return Result("nccl", FAIL, f"torch {torch.__version__} is built without NCCL",
                      "use the GPU image's torch, which ships with NCCL")
    version = torch.cuda.nccl.version()
    text = ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)
    return Result("nccl", PASS, f"NCCL {text}", data={"version": text})


def output_within(command: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str | None:
    """COMMAND's output (run with ENV added), or None if it ran out of time and was killed with its children."""
    # A session of its own lets the kill reach torchrun's workers as well as torchrun.
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True, env={**os.environ, **(env or {})}) as process:
        try:
            return process.communicate(timeout=timeout_s)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None


def check_allreduce(machine: Machine) -> Result:
    # Without any GPU it runs on CPU ranks, so only a missing torch or GPUs torch cannot use stop it.
    if machine.torch is None or (machine.has_gpu and not machine.cuda_count):
        return Result("allreduce", SKIP, gpu_skip_reason(machine, usable=True))
    on_gpus = machine.cuda_count > 0
    ranks = machine.cuda_count if on_gpus else ALLREDUCE_CPU_RANKS
    backend, size = ("nccl", ALLREDUCE_GPU_BYTES) if on_gpus else ("gloo", ALLREDUCE_CPU_BYTES)
    where = f"{ranks} GPU{'s' if ranks > 1 else ''}" if on_gpus else f"{ranks} CPU ranks"
    rerun = f"NCCL_DEBUG=INFO torchrun --nproc-per-node={ranks} {BENCH_SCRIPT} --backend {backend}"
    with tempfile.TemporaryDirectory(prefix="doctor-") as workdir:
        report_path = Path(workdir, "allreduce.json")
        # The benchmark runs in its own processes, so a transport that hangs or crashes cannot take doctor down.
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                   str(BENCH_SCRIPT), "--backend", backend, "--min-bytes", size, "--max-bytes", size,
                   "--warmup", "2", "--iters", "5", "--json-file", str(report_path)]
        # On GPUs NCCL logs which network it chose, for the network check.
        output = output_within(command, ALLREDUCE_TIMEOUT_S, NCCL_NETWORK_LOG_ENV if on_gpus else {})
        machine.allreduce_output = output if on_gpus else None
        report = json.loads(report_path.read_text()) if report_path.exists() else None
    if output is None:
        return Result("allreduce", FAIL, f"{backend} all-reduce on {where} hung for {ALLREDUCE_TIMEOUT_S} s",
                      f"see where it stalls: {rerun}")
    if report is None:
        return Result("allreduce", FAIL, f"{backend} all-reduce on {where} failed: {bench_error(output)}",
                      f"see the transport's error: {rerun}")
    row = report["rows"][0]
    data = {"backend": backend, "ranks": ranks, "size_bytes": row["size_bytes"], "time_us": row["time_us"],
            "algbw_gbps": row["algbw_gbps"], "busbw_gbps": row["busbw_gbps"], "correct": report["correct"]}
    if not report["correct"]:
        return Result("allreduce", FAIL, f"{backend} all-reduce on {where} returned wrong sums "
                      f"({row['wrong']} elements)", f"find the corrupting transport: {rerun}", data)
    bandwidth = (f"busbw {row['busbw_gbps']:.2f} GB/s" if ranks > 1 else
                 f"algbw {row['algbw_gbps']:.2f} GB/s (busbw needs 2 or more ranks)")
    message = human_bytes(row["size_bytes"])
    return Result("allreduce", PASS, f"{backend} on {where}, {message}: sums correct, {bandwidth}", data=data)


def bench_error(output: str) -> str:
    """The benchmark's own one-line error from torchrun's output, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not NCCL_INFO_LINE.search(line)]
    mine = [line for line in lines if line.startswith("bench_allreduce.py: error:")]
    return mine[0] if mine else lines[-1] if lines else "no output"


def check_nccl_env(machine: Machine) -> Result:
    settings = dict(sorted((name, value) for name, value in os.environ.items() if name.startswith("NCCL_")))
    if not settings:
        return Result("nccl-env", PASS, "no NCCL_* variables: NCCL picks its transports itself")
    listing = " ".join(f"{name}={value}" for name, value in settings.items())
    disabled = [name for name, value in settings.items() if name.endswith("_DISABLE") and value not in ("", "0")]
    if disabled:
        return Result("nccl-env", WARN,
                      f"{listing} ({', '.join(disabled)} switches a transport off: slower collectives)",
                      f"unset {' '.join(disabled)} unless it works around a known fault", settings)
    return Result("nccl-env", PASS, listing, data=settings)


def rendezvous_port(options: argparse.Namespace) -> tuple[int | None, str]:
    """(port, where it came from), or (None, why MASTER_PORT is unusable)."""
    if options.port is not None:
        return options.port, "--port"
    text = os.environ.get("MASTER_PORT")
    if text is None:
        return DEFAULT_RENDEZVOUS_PORT, "torchrun's default"
    if text.isdigit() and 0 < int(text) < 65536:
        return int(text), "MASTER_PORT"
    return None, f"MASTER_PORT={text!r} is not a port number"


def check_port(machine: Machine) -> Result:
    port, source = rendezvous_port(machine.options)
    if port is None:
        return Result("port", FAIL, source, "set MASTER_PORT to a free port between 1024 and 65535, e.g. 29500")
    data = {"port": port, "source": source}
    # SO_REUSEADDR as the rendezvous store binds: a port left in TIME_WAIT by an earlier run is still usable.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return Result("port", FAIL, f"rendezvous port {port} ({source}) cannot be bound: {error.strerror}",
                              "choose a port above 1023: torchrun --master-port=29501 (or MASTER_PORT)", data)
            return Result("port", WARN, f"rendezvous port {port} ({source}) is in use: torchrun here would fail with "
                          "'address already in use'", f"stop what listens on it (`ss -ltnp 'sport = :{port}'`) or pick "
                          "another with torchrun --master-port (MASTER_PORT); --standalone finds a free one", data)
    return Result("port", PASS, f"rendezvous port {port} ({source}) is free", data=data)
