"""The platform check: the CPU architecture and page size, the kind of node where nvidia-smi names it,
and the libraries a page size over 4 KiB breaks."""
from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path

from doctor.machine import Machine
from doctor.report import PASS, WARN, Result, human_bytes

# Kernels with pages larger than 4 KiB (arm64 servers, GH200's 64 KiB kernels) break libraries that fix
# their page size when they are built: a bundled jemalloc built for 4 KiB pages aborts at start with
# "<jemalloc>: Unsupported system page size". Wheels keep bundled libraries in <package>.libs/.
PAGE_SIZE_SENSITIVE_LIBRARIES = {"jemalloc": "jemalloc built for 4 KiB pages aborts ('Unsupported system page size')"}


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
