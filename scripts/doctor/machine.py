"""The machine the checks look at: torch, nvidia-smi's GPUs and the driver, each asked once and only when a
check first needs it; and why a GPU check cannot run here."""
from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
from functools import cached_property
from pathlib import Path
from types import ModuleType

from doctor.report import first_line, read_text

NVIDIA_SMI_TIMEOUT_S = 15


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
