#!/usr/bin/env python3
"""doctor: checks that this container (or host) can train PyTorch on several GPUs, and says how to fix it.

Each check prints one line: its status, its name and what it found; a check that warns or fails prints
its fix underneath. `--json` prints the same as one JSON object for scripts. Only the standard library is
needed: torch is imported when a check needs it, so a missing or broken torch is itself reported.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import errno
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any


class OneLineErrorParser(argparse.ArgumentParser):
    """A bad flag is one line that points at --help. (Kept here, not imported: doctor is one file that is
    copied onto bare hosts, so it needs nothing beside the standard library.)"""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
SEVERITY = [SKIP, PASS, WARN, FAIL]
EXIT_CODES = {PASS: 0, WARN: 1, FAIL: 2}
DEFAULT_RENDEZVOUS_PORT = 29500  # torchrun's --master-port default

# Minimum Linux driver for each CUDA major, from "CUDA Toolkit and Minimum Required Driver Version for CUDA
# Minor Version Compatibility" in NVIDIA's CUDA Toolkit release notes: any CUDA X.y runs on the driver
# listed for X. Older drivers work only through the forward-compatibility package (cuda-compat), which
# NGC images carry and enable on data-center GPUs.
MIN_DRIVER_FOR_CUDA_MAJOR = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

NO_GPU_FIX = ("start the container with `docker run --gpus all` (compose: deploy.resources.reservations.devices "
              "with capabilities: [gpu]) on a host with the NVIDIA driver and the NVIDIA Container Toolkit")
# The container's limits: the one place their thresholds and fixes are spelled. The container's
# supervisor runs these checks in its own interpreter and relays their brief_lines, and
# tests/unit/test_limits.py holds the compose files and the test containers to these values
# (docs/troubleshooting.md says which warns when).
MIN_SHM_GIB = 1.0  # DataLoader workers and NCCL's shared-memory transport outgrow Docker's 64 MiB at once
RECOMMENDED_SHM_SIZE = "16g"
SHM_FIX = (f"docker run --shm-size={RECOMMENDED_SHM_SIZE}, or --ipc=host "
           f"(compose: shm_size: {RECOMMENDED_SHM_SIZE}, or ipc: host)")
# The limits NVIDIA's PyTorch container documentation asks for.
RECOMMENDED_STACK_BYTES = 67108864
MEMLOCK_FIX = "docker run --ulimit memlock=-1 (compose: ulimits: memlock: -1)"
STACK_FIX = f"docker run --ulimit stack={RECOMMENDED_STACK_BYTES} (compose: ulimits: stack: {RECOMMENDED_STACK_BYTES})"

# What the link codes of `nvidia-smi topo -m` mean, fastest first.
LINK_KINDS = {"NV": "NVLink", "PIX": "PCIe, one switch", "PXB": "PCIe, several switches",
              "PHB": "PCIe through a CPU host bridge", "NODE": "PCIe between host bridges of a NUMA node",
              "SYS": "PCIe across CPU sockets"}

# The doctor's own all-reduce: big enough to show a link's bandwidth, small enough to stay quick.
ALLREDUCE_GPU_BYTES = "256M"
ALLREDUCE_CPU_BYTES = "4M"
ALLREDUCE_CPU_RANKS = 2
ALLREDUCE_TIMEOUT_S = 90
NVIDIA_SMI_TIMEOUT_S = 15
BENCH_SCRIPT = Path(__file__).resolve().with_name("bench_allreduce.py")
# What NCCL logs about its network at NCCL_DEBUG=INFO, and nothing else it says (the network check).
NCCL_NETWORK_LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"}
FABRIC_DEVICES = Path("/sys/class/infiniband")
FABRIC_FIX = ("give the container the fabric: compose.fabric.yaml (InfiniBand, RoCE) or compose.fabric-efa.yaml "
              "(EFA), i.e. the devices in /dev/infiniband, --cap-add=IPC_LOCK and --ulimit memlock=-1 "
              "(docs/scaling-out.md, \"The fabric: InfiniBand, RoCE and EFA\")")
LOUD_FAILURE_HINT = "set NCCL_NET (IB, or the plugin's name) to make NCCL fail instead of falling back"
# Kernels with pages larger than 4 KiB (arm64 servers, GH200's 64 KiB kernels) break libraries that fix
# their page size when they are built: a bundled jemalloc built for 4 KiB pages aborts at start with
# "<jemalloc>: Unsupported system page size". Wheels keep bundled libraries in <package>.libs/.
PAGE_SIZE_SENSITIVE_LIBRARIES = {"jemalloc": "jemalloc built for 4 KiB pages aborts ('Unsupported system page size')"}


@dataclasses.dataclass(frozen=True)
class Result:
    """One check's verdict: a one-line finding, and for warn or fail a one-line fix."""
    name: str
    status: str
    finding: str
    fix: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SmiGpu:
    driver: str
    name: str


@dataclasses.dataclass(frozen=True)
class SmiReport:
    """What nvidia-smi lists; ERROR says why it listed nothing."""
    gpus: list[SmiGpu]
    error: str = ""


def run_nvidia_smi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.0f} TiB"


class Machine:
    """What the checks look at, each fact gathered once and only when a check first asks for it."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.allreduce_output: str | None = None  # the GPU all-reduce's output, NCCL's log in it

    @cached_property
    def torch_import(self) -> tuple[ModuleType | None, str]:
        """(torch, "") or (None, why it does not import)."""
        try:
            import torch
            return torch, ""
        except Exception as error:  # a broken install raises more than ImportError, and doctor must report it
            return None, f"{type(error).__name__}: {error}"

    @property
    def torch(self) -> ModuleType | None:
        return self.torch_import[0]

    @cached_property
    def smi(self) -> SmiReport:
        if not shutil.which("nvidia-smi"):
            return SmiReport([], "nvidia-smi is not installed")
        try:
            listing = run_nvidia_smi("--query-gpu=driver_version,name", "--format=csv,noheader")
        except subprocess.TimeoutExpired:
            return SmiReport([], f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_S} s")
        if listing.returncode != 0:
            return SmiReport([], f"nvidia-smi failed: {first_line(listing.stdout + listing.stderr)}")
        # The name goes last because it is the one field that could hold a comma.
        rows = [[cell.strip() for cell in line.split(",", 1)] for line in listing.stdout.splitlines() if line.strip()]
        return SmiReport([SmiGpu(driver, name) for driver, name in rows],
                         "" if rows else "nvidia-smi lists no GPU")

    @cached_property
    def cuda_count(self) -> int:
        """GPUs torch can use (CUDA_VISIBLE_DEVICES applies); 0 without torch or CUDA."""
        torch = self.torch
        return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0

    @property
    def has_gpu(self) -> bool:
        return bool(self.smi.gpus) or self.cuda_count > 0

    def cuda_init_error(self) -> str:
        """Why torch cannot use CUDA, in CUDA's words (is_available() only says that it cannot)."""
        try:
            self.torch.cuda.init()
            return "CUDA initialises but reports no device"
        except Exception as error:
            return first_line(str(error))

    def driver_version(self) -> str:
        """The kernel driver's version, from nvidia-smi or the driver's /proc file when nvidia-smi is absent."""
        if self.smi.gpus:
            return self.smi.gpus[0].driver
        # "... Kernel Module  550.54.15 ..." or, for the open modules, "... Kernel Module for x86_64  550.54.15 ..."
        match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", read_text(Path("/proc/driver/nvidia/version")))
        return match.group(1) if match else ""


def gpu_skip_reason(machine: Machine, usable: bool = False) -> str:
    """Why a GPU check cannot run (no torch to ask, no GPU, or none torch can use when USABLE); "" if it can."""
    if machine.torch is None:
        return "needs torch (see the torch check)"
    if not machine.has_gpu:
        return "no GPU"
    if usable and not machine.cuda_count:
        return "torch cannot use the GPUs (see the gpus check)"
    return ""


def check_torch(machine: Machine) -> Result:
    torch, error = machine.torch_import
    python = f"Python {platform.python_version()}"
    if torch is None:
        return Result("torch", FAIL, f"torch does not import: {first_line(error)} ({python}, {sys.executable})",
                      "run doctor with the image's python (the one on PATH), or `pip install torch` into this one")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    return Result("torch", PASS, f"torch {torch.__version__} ({build}), {python}",
                  data={"version": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()})


def check_gpus(machine: Machine) -> Result:
    smi, torch, count = machine.smi, machine.torch, machine.cuda_count
    if not machine.has_gpu:
        torch_view = "torch sees no CUDA device" if torch is not None else "torch is missing"
        status = FAIL if machine.options.require_gpu else WARN
        return Result("gpus", status, f"no GPU visible: {smi.error} and {torch_view}", NO_GPU_FIX, {"count": 0})
    if count == 0:
        return unusable_gpus(machine)
    listing = count_names(torch.cuda.get_device_name(index) for index in range(count))
    return Result("gpus", PASS, f"{count} visible to torch: {listing}{hidden_gpus(len(smi.gpus), count)}",
                  data={"count": count})


def count_names(names: Iterable[str]) -> str:
    """'8 x NVIDIA H100 80GB HBM3' for eight alike GPUs, one entry per model."""
    return ", ".join(f"{number} x {name}" for name, number in collections.Counter(names).items())


def hidden_gpus(listed: int, usable: int) -> str:
    """A note when nvidia-smi lists more GPUs than torch uses, naming CUDA_VISIBLE_DEVICES when it is the reason."""
    if listed <= usable:
        return ""
    selection = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f" (of {listed} that nvidia-smi lists{f'; CUDA_VISIBLE_DEVICES={selection}' if selection else ''})"


def unusable_gpus(machine: Machine) -> Result:
    """The gpus verdict when nvidia-smi lists GPUs that torch cannot use, with the likeliest cause."""
    torch, listed = machine.torch, f"nvidia-smi lists {count_names(gpu.name for gpu in machine.smi.gpus)}"
    if torch is None:
        return Result("gpus", FAIL, f"{listed} but torch is missing", "see the torch check", {"count": 0})
    if not torch.version.cuda:
        return Result("gpus", FAIL, f"{listed} but torch {torch.__version__} is a CPU-only build",
                      "use the GPU image (or install a CUDA build of torch)", {"count": 0})
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        fix = f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides them: unset it or list valid indices"
    else:
        fix = "see the driver check: the driver may be too old for this torch's CUDA"
    return Result("gpus", FAIL, f"{listed} but torch cannot use them: {machine.cuda_init_error()}", fix, {"count": 0})


def check_driver(machine: Machine) -> Result:
    if reason := gpu_skip_reason(machine):
        return Result("driver", SKIP, reason)
    driver, cuda = machine.driver_version(), machine.torch.version.cuda
    data = {"driver": driver, "cuda": cuda}
    if not cuda:
        return Result("driver", SKIP, f"driver {driver or 'unknown'}; torch has no CUDA runtime to fit it to",
                      data=data)
    if not driver:
        return Result("driver", WARN, "driver version unknown (no nvidia-smi, no /proc/driver/nvidia/version); "
                      f"torch uses CUDA {cuda}",
                      "check `nvidia-smi` on the host: the container toolkit mounts it with --gpus", data)
    major = version_tuple(cuda)[0]
    minimum = MIN_DRIVER_FOR_CUDA_MAJOR.get(major)
    if minimum is None:
        return Result("driver", WARN, f"driver {driver}; no known minimum for torch's CUDA {cuda}",
                      "compare the driver with the CUDA release notes' minimum driver table", data)
    needed = ".".join(str(part) for part in minimum)
    if version_tuple(driver) >= minimum:
        return Result("driver", PASS, f"driver {driver} fits torch's CUDA {cuda} (needs >= {needed})", data=data)
    if machine.cuda_count:
        return Result("driver", PASS, f"driver {driver} is below CUDA {major}'s {needed}, but CUDA works through "
                      "the forward-compatibility package", data=data)
    return Result("driver", FAIL, f"driver {driver} is too old for torch's CUDA {cuda} (needs >= {needed})",
                  f"upgrade the host driver to >= {needed}; on data-center GPUs the cuda-compat forward-compatibility "
                  "package (in NGC images) also works", data)


def parse_arch(arch: str) -> tuple[str, int, int, str] | None:
    """('sm', 9, 0, 'a') from 'sm_90a', ('compute', 12, 0, '') from 'compute_120'; None if unrecognised."""
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", arch)
    return (match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)) if match else None


def kernel_support(capability: tuple[int, int], arch_list: list[str]) -> tuple[str, str]:
    """(status, how) for running torch's kernels on a GPU of CAPABILITY, given what torch was built for.

    A cubin (sm_XY) runs on its own major version at an equal or higher minor; PTX (compute_XY) is
    compiled by the driver for any equal or newer GPU. Arch-specific builds (sm_90a, sm_100f) are
    matched only exactly, which is all this check needs to promise.
    """
    parsed = [arch for arch in map(parse_arch, arch_list) if arch]
    major, minor = capability
    if any(kind == "sm" and (m, n) == capability for kind, m, n, _ in parsed):
        return PASS, "native kernels"
    compatible = [f"sm_{m}{n}" for kind, m, n, suffix in parsed
                  if kind == "sm" and m == major and n < minor and not suffix]
    if compatible:
        return PASS, f"runs {compatible[-1]} kernels"
    ptx = [f"compute_{m}{n}" for kind, m, n, suffix in parsed
           if kind == "compute" and (m, n) <= capability and not suffix]
    if ptx:
        return WARN, f"no native kernels: the driver JIT-compiles {ptx[-1]} PTX at first use (slow start)"
    return FAIL, "no kernel image: CUDA ops fail with 'no kernel image is available for execution on the device'"


def check_arch(machine: Machine) -> Result:
    if reason := gpu_skip_reason(machine, usable=True):
        return Result("arch", SKIP, reason)
    torch = machine.torch
    arch_list = torch.cuda.get_arch_list()
    capabilities = sorted({torch.cuda.get_device_capability(index) for index in range(machine.cuda_count)})
    verdicts = {f"sm_{major}{minor}": kernel_support((major, minor), arch_list) for major, minor in capabilities}
    status = worst(status for status, _ in verdicts.values())
    finding = "; ".join(f"GPU {arch}: {how}" for arch, (_, how) in verdicts.items())
    finding += f" (torch built for {' '.join(arch_list)})"
    needed = " ".join(arch for arch, (verdict, _) in verdicts.items() if verdict != PASS)
    fix = (f"use a torch build that includes {needed} (a newer NGC PyTorch image), or build torch with "
           f"TORCH_CUDA_ARCH_LIST set for it") if status != PASS else ""
    return Result("arch", status, finding, fix, {"capabilities": list(verdicts), "arch_list": arch_list})


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



# ---- Which network NCCL chose, read from the log of a run with NCCL_DEBUG=INFO. Every pattern below is
# one of NCCL's or aws-ofi-nccl's own format strings:
#   "Using network %s"                                   NCCL src/init.cc
#   "NET/IB : Using%s %s; OOB %s:%s" (" [0]mlx5_0:1/IB") NCCL src/transport/net_ib/init.cc
#   "... [send] via NET/%s/%d%s%s%s" ("/GDRDMA")         NCCL src/transport/net.cc
#   "NCCL_NET_PLUGIN set by environment to %s", "Successfully loaded external network plugin %s",
#   "Failed to initialize NET plugin %s"                 NCCL src/plugin/net.cc
#   "NET/Plugin: Could not find:%s%s%s", "NET/Plugin: %s: %s"   NCCL src/plugin/plugin_open.cc
#   "NET/OFI " + "Selected provider is %s, fabric is %s (found %d nics)" (older: "Selected Provider is
#   %s (found %d nics)")                                 aws-ofi-nccl include/nccl_ofi_log.h, src/nccl_ofi_net.cpp
NCCL_INFO_LINE = re.compile(r"NCCL INFO (.*?)\s*$")
NETWORK_IN_USE = re.compile(r"^Using network (.+)$")
IB_DEVICES = re.compile(r"^NET/IB : Using((?: \[\d+\]\S+)*)")
NET_CHANNEL = re.compile(r"\[(?:send|receive)\] via NET/(.+?)/\d+(?:\(\d+\))?(/GDRDMA)?")
PLUGIN_ASKED = re.compile(r"^NCCL_NET_PLUGIN set by environment to (.*)$")
PLUGIN_NOT_FOUND = re.compile(r"^NET/Plugin: Could not find:\s*(.+)$")
PLUGIN_LOAD_ERROR = re.compile(r"^NET/Plugin: (\S+): (.+)$")
PLUGIN_LOADED = re.compile(r"^Successfully loaded external network plugin (.+)$")
PLUGIN_INIT_FAILED = re.compile(r"^Failed to initialize NET plugin (.+)$")
OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is ([^,\s]+)")


@dataclasses.dataclass
class NcclNetworkLog:
    """What one NCCL log says about the network: the last communicator's choice wins."""
    info_lines: int = 0
    network: str = ""
    ib_devices: list[str] = dataclasses.field(default_factory=list)
    channels: int = 0        # channel connections that cross the network
    gdr_channels: int = 0    # ... of them with GPUDirect RDMA
    plugin_asked: str = ""
    plugin_problem: str = ""
    plugin_loaded: str = ""
    ofi_provider: str = ""


def parse_nccl_log(text: str) -> NcclNetworkLog:
    log = NcclNetworkLog()
    for line in text.splitlines():
        info = NCCL_INFO_LINE.search(line)
        if not info:
            continue
        log.info_lines += 1
        message = info.group(1)
        if match := NETWORK_IN_USE.match(message):
            log.network = match.group(1)
        elif match := IB_DEVICES.match(message):
            log.ib_devices = match.group(1).split()
        elif match := NET_CHANNEL.search(message):
            log.channels += 1
            log.gdr_channels += bool(match.group(2))
        elif match := PLUGIN_ASKED.match(message):
            log.plugin_asked = match.group(1).strip()
        elif match := PLUGIN_NOT_FOUND.match(message):
            log.plugin_problem = f"not found: {match.group(1)}"
        elif match := PLUGIN_LOADED.match(message):
            log.plugin_loaded = match.group(1)
        elif match := PLUGIN_INIT_FAILED.match(message):
            log.plugin_problem = f"{match.group(1)} failed to initialize"
        elif match := OFI_PROVIDER.match(message):
            log.ofi_provider = match.group(1)
        elif match := PLUGIN_LOAD_ERROR.match(message):
            log.plugin_problem = f"{match.group(1)}: {match.group(2)}"
    return log


def fabric_devices(root: Path = FABRIC_DEVICES) -> dict[str, str]:
    """{RDMA device: its kernel driver} on this host (mlx5_core for InfiniBand and RoCE, efa for EFA)."""
    if not root.is_dir():
        return {}
    return {device.name: Path(os.path.realpath(device / "device" / "driver")).name for device in sorted(root.iterdir())}


def describe_fabric(devices: dict[str, str]) -> str:
    kinds = "EFA" if all(driver == "efa" for driver in devices.values()) else "InfiniBand/RoCE"
    return f"{kinds} devices ({', '.join(devices)})"


def evaluate_nccl_network(log: NcclNetworkLog, host_devices: dict[str, str]) -> Result:
    """The network check's verdict on a parsed log; HOST_DEVICES are the RDMA devices of the host it ran on."""
    data = dataclasses.asdict(log)
    rerun = "rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS unset, or INIT,NET)"
    if not log.info_lines:
        return Result("network", WARN, "the log has no NCCL INFO line: the run did not set NCCL_DEBUG=INFO", rerun,
                      data)
    if not log.network:
        return Result("network", WARN, "the log does not say which network NCCL chose (no 'Using network' line)",
                      rerun, data)
    problems: list[tuple[str, str]] = []
    if log.plugin_asked and log.plugin_asked.lower() != "none" and not log.plugin_loaded:
        problems.append((f"NCCL_NET_PLUGIN={log.plugin_asked} was asked for but not loaded "
                         f"({log.plugin_problem or 'no plugin loaded'}), so NCCL fell back to {log.network}",
                         "put the plugin's folder on LD_LIBRARY_PATH, or name its file in NCCL_NET_PLUGIN (NCCL "
                         f"looks for libnccl-net-NAME.so); {LOUD_FAILURE_HINT}"))
    if log.ofi_provider and not log.ofi_provider.startswith("efa"):
        problems.append((f"the OFI plugin selected the '{log.ofi_provider}' provider, not EFA",
                         "give the container the EFA devices (compose.fabric-efa.yaml) and set FI_PROVIDER=efa; "
                         "`fi_info -p efa` in the container must list them"))
    fabric = describe_fabric(host_devices) if host_devices else (
        f"InfiniBand/RoCE devices ({' '.join(log.ib_devices)})" if log.ib_devices else "")
    if log.network == "Socket" and fabric:
        problems.append((f"TCP sockets in use although the host has {fabric}: NCCL fell back silently",
                         f"{FABRIC_FIX}; {LOUD_FAILURE_HINT}"))
    if log.network == "IB" and log.gdr_channels < log.channels:
        problems.append((f"InfiniBand without GPUDirect RDMA on {log.channels - log.gdr_channels} of {log.channels} "
                         "inter-node channels: their data goes through host memory",
                         "load nvidia-peermem on the host (modprobe nvidia-peermem), or use DMA-BUF (open GPU kernel "
                         "modules, Linux 5.12+); NCCL_NET_GDR_LEVEL=SYS accepts a GPU and NIC that are far apart"))
    if problems:
        return Result("network", WARN, "; ".join(finding for finding, _ in problems),
                      "; and ".join(fix for _, fix in problems), data)
    return Result("network", PASS, describe_network(log, fabric), data=data)


def describe_network(log: NcclNetworkLog, fabric: str) -> str:
    if log.network == "Socket":
        return "NCCL chose TCP sockets; neither the log nor this host shows InfiniBand or EFA devices"
    chosen = f"NCCL chose {log.network}"
    if log.ib_devices and log.network == "IB":
        chosen += f" ({' '.join(log.ib_devices)})"
    if log.ofi_provider:
        chosen += f" with the {log.ofi_provider} provider"
    if not log.channels:
        return f"{chosen}; no channel crossed the network (a run on one node)"
    return f"{chosen}; {log.channels} inter-node channels, {log.gdr_channels} with GPUDirect RDMA"


def check_network(machine: Machine) -> Result:
    if machine.options.nccl_log is not None:
        path = machine.options.nccl_log
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as error:
            return Result("network", FAIL, f"cannot read the NCCL log {path}: {error.strerror}",
                          "give the path of a readable log of a run with NCCL_DEBUG=INFO")
        return evaluate_nccl_network(parse_nccl_log(text), fabric_devices())
    if not machine.cuda_count:
        return Result("network", SKIP, "needs GPUs: NCCL chooses its network only in a run on GPUs; evaluate the "
                      "log of one with --nccl-log FILE")
    if machine.allreduce_output is None:
        return Result("network", SKIP, "the all-reduce did not run (see the allreduce check)")
    return evaluate_nccl_network(parse_nccl_log(machine.allreduce_output), fabric_devices())


def page_size_sensitive_libraries() -> dict[str, str]:
    """{library file: why it breaks} for libraries of the image that fix their page size at build time."""
    folders = {*site_packages_folders(), "/usr/lib", "/usr/local/lib"}
    found = {}
    for name, why in PAGE_SIZE_SENSITIVE_LIBRARIES.items():
        for folder in sorted(folders):
            for pattern in (f"*.libs/*{name}*.so*", f"*-linux-gnu/lib{name}*.so*", f"lib{name}*.so*"):
                found.update({str(path): why for path in Path(folder).glob(pattern)})
    return found


def site_packages_folders() -> list[str]:
    import site
    import sysconfig
    return [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]


# NVIDIA's superchips pair a Grace CPU (arm64) with their GPUs; nvidia-smi names the GPU after the pair.
GRACE_NODES = {"GH200": "Grace Hopper", "GB200": "Grace Blackwell", "GB300": "Grace Blackwell"}


def grace_node(arch: str, gpu_names: Iterable[str]) -> str:
    """'a Grace Hopper node (GH200)' where an arm64 host's GPUs say so, else ''."""
    if arch != "aarch64":
        return ""
    for model, family in GRACE_NODES.items():
        if any(model in name for name in gpu_names):
            return f"a {family} node ({model})"
    return ""


def platform_verdict(arch: str, page_size: int, sensitive: dict[str, str], node: str = "") -> Result:
    """The platform check: the CPU architecture and page size, the kind of node where nvidia-smi tells it,
    and what a page size over 4 KiB breaks."""
    data = {"arch": arch, "page_size": page_size, "page_size_sensitive": sensitive, "node": node}
    finding = f"{arch}, {human_bytes(page_size)} pages" + (f", {node}" if node else "")
    if page_size > 4096 and sensitive:
        listing = "; ".join(f"{path}: {why}" for path, why in sensitive.items())
        return Result("platform", WARN, f"{finding}: {listing}",
                      "use builds of these libraries for large pages (jemalloc: --with-lg-page=16), or boot a "
                      "kernel with 4 KiB pages (Ubuntu's linux-nvidia rather than linux-nvidia-64k)", data)
    return Result("platform", PASS, finding, data=data)


def check_platform(machine: Machine) -> Result:
    page_size, arch = os.sysconf("SC_PAGE_SIZE"), platform.machine()
    node = grace_node(arch, [gpu.name for gpu in machine.smi.gpus]) if arch == "aarch64" else ""
    return platform_verdict(arch, page_size, page_size_sensitive_libraries() if page_size > 4096 else {}, node)


def bench_error(output: str) -> str:
    """The benchmark's own one-line error from torchrun's output, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not NCCL_INFO_LINE.search(line)]
    mine = [line for line in lines if line.startswith("bench_allreduce.py: error:")]
    return mine[0] if mine else lines[-1] if lines else "no output"


def nvidia_smi_topology() -> str:
    """The `nvidia-smi topo -m` matrix, or "" when nvidia-smi cannot give it."""
    try:
        topo = run_nvidia_smi("topo", "-m")
    except subprocess.TimeoutExpired:
        return ""
    return topo.stdout if topo.returncode == 0 else ""


def parse_topology(matrix: str) -> dict[tuple[int, int], str]:
    """{(i, j): link code} for every GPU pair i < j in `nvidia-smi topo -m` output."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in matrix.splitlines()]
    header = next((line.split("\t") for line in lines if re.match(r"\s+GPU0\b", line)), [])
    columns = [cell.strip() for cell in header]
    links = {}
    for line in lines:
        cells = [cell.strip() for cell in line.split("\t")]
        row = re.fullmatch(r"GPU(\d+)", cells[0])
        if not row:
            continue
        for column, link in zip(columns[1:], cells[1:]):
            peer = re.fullmatch(r"GPU(\d+)", column)
            if peer and int(row.group(1)) < int(peer.group(1)):
                links[(int(row.group(1)), int(peer.group(1)))] = link
    return links


def link_meaning(code: str) -> str:
    return next((text for prefix, text in LINK_KINDS.items() if code.startswith(prefix)), "unknown link")


def describe_links(links: dict[tuple[int, int], str]) -> str:
    """'6 pairs NV18 (NVLink)' style summary, one entry per link code."""
    counts = collections.Counter(links.values())
    return ", ".join(f"{number} pair{'s' if number > 1 else ''} {code} ({link_meaning(code)})"
                     for code, number in counts.items())


def check_topology(machine: Machine) -> Result:
    if reason := gpu_skip_reason(machine, usable=True) or ("one GPU: no peers" if machine.cuda_count < 2 else ""):
        return Result("topology", SKIP, reason)
    links = parse_topology(nvidia_smi_topology()) if machine.smi.gpus else {}
    torch, count = machine.torch, machine.cuda_count
    blocked = [f"GPU{i}-GPU{j}" for i in range(count) for j in range(i + 1, count)
               if not torch.cuda.can_device_access_peer(i, j)]
    layout = describe_links(links) if links else "links unknown (no nvidia-smi topo -m)"
    data = {"links": {f"GPU{i}-GPU{j}": code for (i, j), code in links.items()}, "p2p_blocked": blocked}
    if blocked:
        return Result("topology", WARN,
                      f"{layout}; no P2P between {', '.join(blocked)}: NCCL copies through host memory",
                      "on bare metal disable PCIe ACS (or set the IOMMU to passthrough); in a VM enable GPU P2P; "
                      "make sure NCCL_P2P_DISABLE is unset", data)
    return Result("topology", PASS, f"{layout}; P2P between every pair", data=data)


def check_shm(machine: Machine) -> Result:
    path, minimum = machine.options.shm_path, machine.options.min_shm_gib * 2**30
    try:
        stats = os.statvfs(path)
    except OSError as error:
        return Result("shm", FAIL, f"{path} is unusable: {error.strerror}", SHM_FIX)
    size = stats.f_frsize * stats.f_blocks
    data = {"path": path, "bytes": size}
    if size < minimum:
        return Result("shm", WARN, f"{path} is {human_bytes(size)}, under {human_bytes(minimum)}: DataLoader workers "
                      "and NCCL's shared-memory transport run out of it ('Bus error')", SHM_FIX, data)
    return Result("shm", PASS, f"{path} is {human_bytes(size)}", data=data)


def soft_limit(kind: int) -> int:
    return resource.getrlimit(kind)[0]


def describe_limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else human_bytes(value)


def check_memlock(machine: Machine) -> Result:
    limit = soft_limit(resource.RLIMIT_MEMLOCK)
    data = {"bytes": None if limit == resource.RLIM_INFINITY else limit}
    if limit != resource.RLIM_INFINITY:
        return Result("memlock", WARN, f"locked memory is limited to {human_bytes(limit)}: InfiniBand/RDMA cannot "
                      "register NCCL's buffers", MEMLOCK_FIX, data)
    return Result("memlock", PASS, "locked memory is unlimited", data=data)


def check_stack(machine: Machine) -> Result:
    limit = soft_limit(resource.RLIMIT_STACK)
    data = {"bytes": None if limit == resource.RLIM_INFINITY else limit}
    if limit != resource.RLIM_INFINITY and limit < RECOMMENDED_STACK_BYTES:
        return Result("stack", WARN, f"stack is {human_bytes(limit)}, under the {human_bytes(RECOMMENDED_STACK_BYTES)} "
                      "NVIDIA's PyTorch containers are meant to run with", STACK_FIX, data)
    return Result("stack", PASS, f"stack is {describe_limit(limit)}", data=data)


def read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def check_infiniband(machine: Machine) -> Result:
    root = Path("/sys/class/infiniband")
    devices = sorted(root.iterdir()) if root.is_dir() else []
    if not devices:
        return Result("infiniband", PASS,
                      "no InfiniBand devices: NCCL uses TCP sockets between nodes (fine on one node)")
    ports = {f"{device.name}/{port.name}": (read_text(port / "state"), read_text(port / "link_layer"))
             for device in devices for port in sorted((device / "ports").glob("*"))}
    listing = ", ".join(f"{name} {state.split(':')[-1].strip()} {layer}" for name, (state, layer) in ports.items())
    data = {"ports": {name: {"state": state, "link_layer": layer} for name, (state, layer) in ports.items()}}
    if not Path("/dev/infiniband").is_dir():
        return Result("infiniband", WARN, f"{listing}; but /dev/infiniband is missing, so NCCL cannot use them",
                      "docker run --device=/dev/infiniband --cap-add=IPC_LOCK", data)
    if not any(state.endswith("ACTIVE") for state, _ in ports.values()):
        return Result("infiniband", WARN, f"{listing}; no port is ACTIVE",
                      "check the cable and the subnet manager with `ibstat` on the host", data)
    return Result("infiniband", PASS, listing, data=data)


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


CHECKS: dict[str, Callable[[Machine], Result]] = {
    "platform": check_platform, "torch": check_torch, "gpus": check_gpus, "driver": check_driver, "arch": check_arch,
    "nccl": check_nccl, "allreduce": check_allreduce, "network": check_network, "topology": check_topology,
    "shm": check_shm, "memlock": check_memlock,
    "stack": check_stack, "infiniband": check_infiniband, "nccl-env": check_nccl_env, "port": check_port,
}


def run_checks(options: argparse.Namespace) -> list[Result]:
    machine = Machine(options)
    return [Result(name, SKIP, "left out (--skip or --only)") if name in options.skip else check(machine)
            for name, check in CHECKS.items()]


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=SEVERITY.index, default=PASS)


def overall_status(results: list[Result]) -> str:
    """The worst status of all checks; skipped checks count as passed."""
    return max(worst(result.status for result in results), PASS, key=SEVERITY.index)


def print_human(results: list[Result], status: str) -> None:
    width = max(len(result.name) for result in results)
    for result in results:
        print(f"{result.status.upper():<4}  {result.name:<{width}}  {result.finding}")
        if result.fix:
            print(f"{'':<4}  {'':<{width}}  fix: {result.fix}")
    counts = collections.Counter(result.status for result in results)
    print(f"\noverall: {status.upper()} ({counts[FAIL]} failed, {counts[WARN]} warned, {counts[PASS]} passed, "
          f"{counts[SKIP]} skipped); exit code {EXIT_CODES[status]}")


def brief_lines(results: list[Result]) -> list[str]:
    """What warned or failed, one line each with its fix (the container's start-up relays these)."""
    return [f"{result.finding}; fix: {result.fix}" if result.fix else result.finding
            for result in results if result.status in (WARN, FAIL)]


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
    parser.add_argument("--shm-path", default="/dev/shm", help="shared memory mount to measure (default /dev/shm)")
    parser.add_argument("--min-shm-gib", type=float, default=MIN_SHM_GIB, metavar="GIB",
                        help=f"warn when shared memory is smaller (default {MIN_SHM_GIB:g}; Docker's own default is "
                             "64 MiB)")
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


if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()  # inside the try: a closed pipe shows up here, not in the interpreter's exit
        sys.exit(status)
    except BrokenPipeError:
        # `doctor | head` closed the pipe: the reader has what it wanted, so end quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_CODES[FAIL])
