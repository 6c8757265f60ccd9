"""Where a run's first minute went: the time from the process's start to its first finished step, in parts.

    start-up         from the process's start to the resume: torch's import, the rendezvous, the model
                     spread over the ranks, the optimizer and the data
    checkpoint load  the resume: the newest checkpoint, and the compiled code beside it (--compile)
    compile          torch.compile's own time within the first step (torch._dynamo counts it), with the
                     FX graph cache's hits and misses: warm when every graph came from the cache
    the step itself  the rest of the first step: its batches, the backward, the optimizer

Rank 0 prints it in one line when the first step is done; the first metrics record carries the same
figures (`time_to_first_step_s` and its parts), and so does Prometheus (trainer.prometheus).
"""
from __future__ import annotations

import dataclasses
import os
import time
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist


def process_age_s() -> float:
    """Seconds since this process started (Linux's /proc), or 0 where that cannot be read."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as uptime:
            return max(float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclasses.dataclass(frozen=True)
class CompileCounts:
    """torch's cumulative compile time in this process, its FX graph cache's hits and misses, and the C++
    kernels in Inductor's cache folder (its .so files): a graph from the cache still has its kernels built
    where the folder lacks them (a warm resume into an empty cache on a CPU: seconds of g++ each)."""

    seconds: float = 0.0
    hits: int = 0
    misses: int = 0
    kernels: int = 0

    @classmethod
    def now(cls) -> CompileCounts:
        from torch._dynamo.utils import calculate_time_spent, counters
        inductor = counters["inductor"]
        return cls(calculate_time_spent().get("total_wall_time", 0.0), inductor["fxgraph_cache_hit"],
                   inductor["fxgraph_cache_miss"], kernels_in_the_cache())

    def warmth(self) -> str:
        graphs = self.hits + self.misses
        if not graphs:
            return "no graph went through the cache"
        if not self.misses:
            built = f", yet {self.kernels} C++ kernels compiled again" if self.kernels else ""
            return f"warm: all {graphs} graphs from the cache{built}"
        return f"cold: {self.misses} of {graphs} graphs compiled, {self.hits} from the cache"

    def since(self, before: CompileCounts) -> CompileCounts:
        return CompileCounts(self.seconds - before.seconds, self.hits - before.hits, self.misses - before.misses,
                             self.kernels - before.kernels)


def kernels_in_the_cache() -> int:
    """The compiled kernels (.so files) in Inductor's cache folder: read twice a run, at the first step."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return sum(name.endswith(".so") for _, _, names in os.walk(cache_dir()) for name in names)


@dataclasses.dataclass(frozen=True)
class FirstStep:
    startup_s: float
    checkpoint_load_s: float
    step_s: float  # the whole first step, its compile included
    compile: CompileCounts | None  # None without --compile
    cache_dir: str | None = None  # Inductor's cache folder, where torch's default (lost with the container)
    cache_why: str = "is not writable"  # what kept it out of ~/.cache

    @property
    def total_s(self) -> float:
        return self.startup_s + self.checkpoint_load_s + self.step_s

    def line(self) -> str:
        parts = [f"start-up {self.startup_s:.1f} s", f"checkpoint load {self.checkpoint_load_s:.1f} s"]
        if self.compile is not None:
            parts.append(f"compile {self.compile_s:.1f} s ({self.compile.warmth()})")
        parts.append(f"the step itself {self.step_s - self.compile_s:.1f} s")
        line = f"first step {self.total_s:.1f} s after the process started: {', '.join(parts)}"
        if self.cache_dir:
            line += (f"; the compile cache {self.cache_dir} is lost with the container (~/.cache {self.cache_why}: "
                     f"set TORCHINDUCTOR_CACHE_DIR to a kept folder)")
        return line

    @property
    def compile_s(self) -> float:
        return min(self.compile.seconds, self.step_s) if self.compile else 0.0

    def record(self) -> dict[str, Any]:
        """The figures for the first metrics record."""
        record = {"time_to_first_step_s": self.total_s, "startup_s": self.startup_s,
                  "checkpoint_load_s": self.checkpoint_load_s, "compile_s": self.compile_s,
                  "first_step_s": self.step_s - self.compile_s}
        if self.compile is not None:
            record.update(compile_cache_hits=self.compile.hits, compile_cache_misses=self.compile.misses,
                          compiled_kernels=self.compile.kernels)
        return record


class FirstStepClock:
    """Started before the resume; `resumed()` after it; `first_step_done()` once, after the first step."""

    def __init__(self, *, compiling: bool) -> None:
        self.compiling = compiling
        self.startup_s = process_age_s()
        self.resume_started = time.perf_counter()

    def resumed(self) -> None:
        self.step_started = time.perf_counter()
        self.compile_before = CompileCounts.now() if self.compiling else None

    def first_step_done(self, group: Any) -> FirstStep:
        """This rank's times; the cache's hits and misses of every rank in GROUP (a collective): torch's
        cache keys name the GPU, so each rank's compile is warm or cold on its own."""
        step_s = time.perf_counter() - self.step_started
        compiled = None
        if self.compile_before is not None:
            mine = CompileCounts.now().since(self.compile_before)
            counts = torch.tensor([mine.hits, mine.misses], dtype=torch.int64)
            dist.all_reduce(counts, group=group)
            # Ranks on a node share the cache folder, so each sees the others' kernels: the most any saw.
            kernels = torch.tensor([mine.kernels], dtype=torch.int64)
            dist.all_reduce(kernels, op=dist.ReduceOp.MAX, group=group)
            compiled = CompileCounts(mine.seconds, int(counts[0]), int(counts[1]), int(kernels[0]))
        lost = inductor_cache_lost() if self.compiling else None
        return FirstStep(self.startup_s, self.step_started - self.resume_started, step_s, compiled, lost,
                         why_the_cache_is_lost())


def image_cache_rule() -> ModuleType | None:
    """The image's rule for torch.compile's cache folders (container_compile_cache.py, which a .pth file runs
    at every start of the image's Python), or None outside the image."""
    try:
        import container_compile_cache
    except ImportError:
        return None
    return container_compile_cache


def why_the_cache_is_lost() -> str:
    """What kept the image's rule from ~/.cache ("is not writable", or that it is nearly full)."""
    return getattr(image_cache_rule(), "why", "") or "is not writable"


def inductor_cache_lost() -> str | None:
    """Inductor's cache folder when the image's Python had to leave it at torch's default in /tmp, as no
    ~/.cache could be written (container_compile_cache.py); else None, outside the image too. (torch sets
    TORCHINDUCTOR_CACHE_DIR itself once it has compiled, so the variable cannot tell.)"""
    image_rule = image_cache_rule()
    if image_rule is None or not image_rule.fell_back:
        return None
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return cache_dir()
