"""The container's limits, the one place their thresholds and fixes are spelled: shared memory, locked
memory and the stack. Only the standard library: the container's supervisor imports this module (and
report) in its own interpreter at every start and relays what warns."""
from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterable

from doctor.report import FAIL, PASS, WARN, Result, human_bytes

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
SHM_PATH = "/dev/shm"


def check_shm(path: str = SHM_PATH, min_gib: float = MIN_SHM_GIB) -> Result:
    minimum = min_gib * 2**30
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


def check_memlock() -> Result:
    limit = soft_limit(resource.RLIMIT_MEMLOCK)
    data = {"bytes": None if limit == resource.RLIM_INFINITY else limit}
    if limit != resource.RLIM_INFINITY:
        return Result("memlock", WARN, f"locked memory is limited to {human_bytes(limit)}: InfiniBand/RDMA cannot "
                      "register NCCL's buffers", MEMLOCK_FIX, data)
    return Result("memlock", PASS, "locked memory is unlimited", data=data)


def check_stack() -> Result:
    limit = soft_limit(resource.RLIMIT_STACK)
    data = {"bytes": None if limit == resource.RLIM_INFINITY else limit}
    if limit != resource.RLIM_INFINITY and limit < RECOMMENDED_STACK_BYTES:
        return Result("stack", WARN, f"stack is {human_bytes(limit)}, under the {human_bytes(RECOMMENDED_STACK_BYTES)} "
                      "NVIDIA's PyTorch containers are meant to run with", STACK_FIX, data)
    return Result("stack", PASS, f"stack is {describe_limit(limit)}", data=data)


LIMIT_CHECKS: dict[str, Callable[[], Result]] = {"shm": check_shm, "memlock": check_memlock, "stack": check_stack}


def check(names: Iterable[str]) -> list[Result]:
    """The limit checks NAMES (shm, memlock, stack) with their defaults, as the container's start-up runs them."""
    return [LIMIT_CHECKS[name]() for name in names]
