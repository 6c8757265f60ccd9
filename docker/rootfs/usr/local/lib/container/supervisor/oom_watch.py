"""Names the kernel's out-of-memory kills in the container's log. A notebook kernel, a trainer or a service
the kernel killed for memory dies of SIGKILL without a word of its own: JupyterLab says only that the
kernel died, and `docker inspect` that the container saw an OOM kill.

The container's memory cgroup counts those kills (cgroup v2: memory.events, v1: memory.oom_control, both
"oom_kill N"). The supervisor reads the count every CHECK_S while it waits, and as a stop begins and ends:
one small file. The kernel's log, which names the process killed, cannot be read inside a container; so
each look also lists the PIDs in /proc (a command line read once for each new one), and a kill is told
with the processes that ended since the last look, among which is the one killed. Only a container with
a PID namespace of its own looks, since elsewhere (Apptainer, --pid=host) the cgroup may be the host
session's, whose kills are not this container's.
"""
from __future__ import annotations

import os
import time

import process_table
from run_folder import warn

CHECK_S = 2.0
NAMED_AT_MOST = 8  # processes named with the kills; a look rarely sees more end
UNLIMITED = 1 << 60  # cgroup v1's "no limit" is a page-rounded 2^63


def read_number(path: str, key: str | None = None) -> int | None:
    """The number in PATH (a cgroup file), or the one after KEY in it; None where there is none."""
    try:
        with open(path, encoding="ascii") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError):
        return None
    if key is None:
        value = text.strip()
        return UNLIMITED if value == "max" else int(value) if value.isdigit() else None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def cgroup_files() -> tuple[str, str] | None:
    """(the OOM kill count, the memory limit) of this process's memory cgroup, where they can be read: the
    cgroup's own path under /sys/fs/cgroup, or the mount's root where the container sees its cgroup there
    (a cgroup namespace, or Docker's mount on cgroup v1)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        path = path.rstrip("/")
        if not controllers:
            candidates += [(f"/sys/fs/cgroup{path}/memory.events", f"/sys/fs/cgroup{path}/memory.max"),
                           ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory.max")]
        elif "memory" in controllers.split(","):
            candidates += [(f"/sys/fs/cgroup/memory{path}/memory.oom_control",
                            f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
                           ("/sys/fs/cgroup/memory/memory.oom_control",
                            "/sys/fs/cgroup/memory/memory.limit_in_bytes")]
    return next((files for files in candidates if read_number(files[0], "oom_kill") is not None), None)


def describe_limit(limit: int | None) -> str:
    if limit is None or limit >= UNLIMITED:
        return "the container has no memory limit, so the host ran out"
    return f"the container's memory limit is {limit / (1 << 20):.0f} MiB"


def shown(pid: int) -> str:
    return f"{pid}({(process_table.read_command(pid) or process_table.read_name(pid))[:60]})"


def running(known: dict[int, str]) -> dict[int, str]:
    """Every process now, PID: PID(command), the command read once, for those not KNOWN already."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return known
    return {pid: known.get(pid) or shown(pid) for pid in pids}


class OomWatch:
    """Says, in one line, when the count of OOM kills in the container's cgroup grew since the last look;
    killed and named keep the kills since the container started, for the stop's verdict."""

    def __init__(self, enabled: bool) -> None:
        self.files = cgroup_files() if enabled else None
        self.count = read_number(self.files[0], "oom_kill") if self.files else None
        self.due = time.monotonic() + CHECK_S
        self.killed = 0
        self.ended_near_kills: list[str] = []
        self.processes = running({}) if self.count is not None else {}
        # Kills counted but not yet told: the killed process may still be exiting when the count grows.
        self.untold = 0
        self.before_the_kill: dict[int, str] = {}
        self.looks_since_the_kill = 0

    @property
    def named(self) -> str:
        """The processes that ended in the looks that saw a kill: the ones killed are among them."""
        if not self.ended_near_kills:
            return "which, it could not tell"
        return f"among {' '.join(self.ended_near_kills)}"

    def seconds_left(self) -> float:
        return max(0.0, self.due - time.monotonic()) if self.files else float("inf")

    def look(self, final: bool = False) -> None:
        """Reads the count; a kill is told once a process seen before it has ended (the killed one is still
        exiting when the count grows), or at the next look, or now where FINAL (the stop's last look)."""
        self.due = time.monotonic() + CHECK_S
        if not self.files or self.count is None:
            return
        count = read_number(self.files[0], "oom_kill")
        now = running(self.processes)
        if count is not None and count > self.count:
            if not self.untold:
                self.before_the_kill, self.looks_since_the_kill = self.processes, 0
            self.untold, self.count = self.untold + count - self.count, count
        self.processes = now
        if not self.untold:
            return
        ended = [name for pid, name in self.before_the_kill.items() if pid not in now]
        self.looks_since_the_kill += 1
        if not ended and self.before_the_kill and self.looks_since_the_kill < 2 and not final:
            return
        self.tell(self.untold, ended)
        self.untold, self.before_the_kill = 0, {}

    def tell(self, killed: int, ended: list[str]) -> None:
        self.killed += killed
        self.ended_near_kills = (self.ended_near_kills + ended)[-NAMED_AT_MOST:]
        among = f" (among those that ended just now: {' '.join(ended[:NAMED_AT_MOST])})" if ended else ""
        warn(f"the kernel's out-of-memory killer ended {killed} process{'es' if killed > 1 else ''} of this "
             f"container{among} ({describe_limit(read_number(self.files[1]))}): a notebook kernel, trainer "
             "or service that died just now ran out of memory; use a smaller batch or fewer DataLoader "
             "workers, or give the container more memory (docker run --memory, compose mem_limit)")
