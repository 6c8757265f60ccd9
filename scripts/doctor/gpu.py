"""The GPU checks: torch and its build, the GPUs it can use, the driver against torch's CUDA, the kernels
built for each GPU, and the links between them."""
from __future__ import annotations

import collections
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable

from doctor.machine import Machine, gpu_skip_reason, run_nvidia_smi
from doctor.report import FAIL, PASS, SKIP, WARN, Result, first_line, version_tuple, worst


# Minimum Linux driver for each CUDA major, from "CUDA Toolkit and Minimum Required Driver Version for CUDA
# Minor Version Compatibility" in NVIDIA's CUDA Toolkit release notes: any CUDA X.y runs on the driver
# listed for X. Older drivers work only through the forward-compatibility package (cuda-compat), which
# NGC images carry and enable on data-center GPUs.
MIN_DRIVER_FOR_CUDA_MAJOR = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

NO_GPU_FIX = ("start the container with `docker run --gpus all` (compose: deploy.resources.reservations.devices "
              "with capabilities: [gpu]) on a host with the NVIDIA driver and the NVIDIA Container Toolkit")

# What the link codes of `nvidia-smi topo -m` mean, fastest first.
LINK_KINDS = {"NV": "NVLink", "PIX": "PCIe, one switch", "PXB": "PCIe, several switches",
              "PHB": "PCIe through a CPU host bridge", "NODE": "PCIe between host bridges of a NUMA node",
              "SYS": "PCIe across CPU sockets"}


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
