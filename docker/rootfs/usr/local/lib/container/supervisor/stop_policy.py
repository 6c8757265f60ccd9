"""Every decision of the container's stop's three steps, as pure functions over a snapshot of the process
table (process_table.py reads it; the executor, stop.py, only snapshots, asks, signals, waits and logs).
docs/how-it-runs.md, "The stop's rules", lists each rule with the function here that decides it, and
tests/unit/test_stop_policy.py and test_stop_progress.py hold them on tables written by hand:
  1. SIGTERM to the top of each piece of the user's work (look), never to what holds a session (is_holder);
  2. wait up to STOP_TIMEOUT, looking again as work exits (look, with the Progress so far);
  3. SIGTERM to what still runs below what ignored it, tops first (past_the_timeout), then to everything
     left (everything_left), shells hung up (shells), and SIGKILL after SERVICES_STOP_S.
What each process is (a holder, a kernel, torchrun, multiprocessing's plumbing) is told in process_kinds.py.
Beside it: close_policy.py (JupyterLab's closes), stop_verdict.py (the last line, the exit status),
signal_policy.py (what a signal to the supervisor means).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from process_kinds import (SHELLS, Container, Table, in_a_kernel, is_entering, is_holder, is_kernel,
                           is_plumbing, is_torchrun, part_of_its_parent)
from process_tree import children_of as _children_by_parent
from process_tree import descendants, descends

# The image's HEALTHCHECK, which the engine runs from outside every few seconds: its shell and what that
# runs (curl, ss) are the container's own probe, never the user's work, whenever a stop finds them.
HEALTHCHECK_COMMAND = re.compile(r"(^| )/usr/local/bin/healthcheck( |$)")
READER_DRAIN_S = 5.0
# Step 3 waits this long for what it signalled last (the services, the shells), then SIGKILLs what is left.
SERVICES_STOP_S = 10


# ---- what is work ------------------------------------------------------------------------------------

def descends_from(table: Table, pid: int, ancestor: int) -> bool:
    return descends(lambda up: table[up].parent if up in table else None, pid, ancestor)


def children_of(table: Table) -> dict[int, list[int]]:
    return _children_by_parent({pid: process.parent for pid, process in table.items()})


def in_container(table: Table, container: Container) -> list[int]:
    """Every process the stop may signal: not PID 1, not the supervisor, no kernel thread, not the engine
    entering the container, and where only some process's descendants count (Container.counted_below),
    only those: the host's never."""
    candidates = [pid for pid, process in table.items() if pid not in (1, container.supervisor)
                  and not process.kernel_thread and not is_entering(process)]
    root = container.counted_below
    if root is None:
        return candidates
    below = set(descendants(children_of(table), root))
    return [pid for pid in candidates if pid in below]


def user_work(table: Table, container: Container) -> set[int]:
    """The container's processes that hold no session and are not the healthcheck's. Steps 1 and 2 stop
    and wait for these and for the notebook kernels (notebook_kernels), which are left out here: an idle
    kernel is no work a hub should keep a server running for."""
    candidates = in_container(table, container)
    probes = health_probes(table, candidates)
    return {pid for pid in candidates
            if not is_holder(table[pid], container) and pid not in probes and not in_a_kernel(table, pid)}


def health_probes(table: Table, candidates: list[int]) -> set[int]:
    """The image's healthcheck shells among CANDIDATES, and everything below them."""
    probes = [pid for pid in candidates if HEALTHCHECK_COMMAND.search(table[pid].command)]
    if not probes:
        return set()
    children = children_of(table)
    return {pid for probe in probes for pid in [probe, *descendants(children, probe)]}


def notebook_kernels(table: Table, container: Container) -> set[int]:
    """The notebook kernels, not their forks: those run the kernel's command line too."""
    kernels = {pid for pid in in_container(table, container) if is_kernel(table[pid])}
    return {pid for pid in kernels if not (table[pid].parent in kernels and part_of_its_parent(table, pid))}


def free_kernels(table: Table, kernels: set[int], children: dict[int, list[int]]) -> set[int]:
    """The kernels below which only their own processes run (part_of_its_parent, all the way up). A kernel
    signalled while a program its cell started still runs (`!torchrun`, whose output comes through the
    kernel's pipe) would end under it."""
    return {kernel for kernel in kernels
            if all(part_of_its_parent(table, below) for below in descendants(children, kernel))}


def tops(table: Table, work: set[int]) -> list[int]:
    """The work whose parent is not work: a holder, PID 1, the supervisor, outside, or gone."""
    return sorted(pid for pid in work if table[pid].parent not in work)


def holding_terminals(table: Table, work: set[int], children: dict[int, list[int]]) -> set[int]:
    """The work that holds a terminal with other work still running in it, and the work above it. None
    of it is signalled yet: a holder that ends makes its terminal hang up on the jobs in it, whatever its
    name (script, an editor's terminal server). Once that work has ended, the holder is work like any
    other, signalled in its turn."""
    held: set[int] = set()
    for pid in work:
        if table[pid].holds_terminal and any(below in work and not table[below].holds_terminal
                                             for below in descendants(children, pid)):
            up = pid
            while up in work and up not in held:
                held.add(up)
                up = table[up].parent
    return held


def pipe_writers(table: Table, reader: int, work: set[int]) -> frozenset[int]:
    """The work, other than READER, that writes the pipe on READER's stdin. A pipe that only holders
    write (`while ...; done | python train.py`) makes no reader: its holder stops last."""
    pipe = table[reader].stdin
    if pipe is None or not pipe.startswith("pipe:"):
        return frozenset()
    return frozenset(pid for pid in work if pid != reader and pipe in table[pid].outputs)


def first_signal_of(table: Table, top: int, movable: set[int], children: dict[int, list[int]]) -> list[int]:
    """Who gets a top's SIGTERM: torchrun's workers where the top is or wraps torchrun (torch's agent turns
    a SIGTERM of its own into exit status 1 even when every worker saved), else the top itself. A torchrun
    still in its rendezvous has no workers yet: it (or its wrapper) gets the signal. multiprocessing's
    plumbing (is_plumbing), a top once the program that started it has ended, never gets it: its forks do
    (the DataLoader workers of a trainer that was killed), where there are any."""
    if is_plumbing(table, top):
        return [child for child in children.get(top, ()) if child in movable]
    agents = [pid for pid in [top, *descendants(children, top, within=movable)] if is_torchrun(table[pid])]
    workers = [child for agent in agents for child in children.get(agent, ()) if child in movable]
    return workers or [top]


# ---- steps 1 to 3: one plan per look -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a stop has come: the value each look takes and returns. Its mappings are never changed in
    place. tops: the tops planned (a known top is never signalled itself again: torchrun between two
    restarts waits for its workers). signalled: what got SIGTERM. readers: the readers left to drain, each
    with the writers of its input, and writers_gone_at, when each one's writers were first seen gone.
    below: the work told in steps 1 and 2 that ignored it past STOP_TIMEOUT: step 3 plans below it, as
    below a holder, so its own tops are told before their DataLoader workers."""
    tops: frozenset[int] = frozenset()
    signalled: frozenset[int] = frozenset()
    readers: Mapping[int, frozenset[int]] = dataclasses.field(default_factory=dict)
    writers_gone_at: Mapping[int, float] = dataclasses.field(default_factory=dict)
    below: frozenset[int] = frozenset()

    @property
    def told(self) -> frozenset[int]:
        """The work the stop has reached: what got SIGTERM, and the tops it planned but a reader left to
        drain."""
        return self.signalled | (self.tops - self.readers.keys())

    def past_the_timeout(self) -> Progress:
        """Step 3's start: what was told and still runs is planned below from now on, and a reader left to
        drain is a top like any other again (signalled now, once its writers are gone)."""
        return dataclasses.replace(self, below=self.told, tops=self.tops - self.readers.keys(), readers={})

    def with_signalled(self, pids: list[int] | tuple[int, ...]) -> Progress:
        return dataclasses.replace(self, signalled=self.signalled | frozenset(pids))


@dataclasses.dataclass(frozen=True)
class Plan:
    """One look's decision: what gets SIGTERM now; the readers and the tops it saw first; all of the
    user's work and the kernels (what step 2 waits for); and the progress after it."""
    signal: tuple[int, ...]
    readers: dict[int, frozenset[int]]
    tops: frozenset[int]
    work: frozenset[int]
    progress: Progress


def look(table: Table, container: Container, progress: Progress = Progress()) -> Plan:
    """What the stop signals at one look at the table, given its PROGRESS. Every top of the work not held
    by a terminal (holding_terminals), and every free kernel, gets first_signal_of, less what was signalled
    already; a top seen before gets only its new workers (torchrun --max-restarts starts new workers under
    the same agent, which an earlier look reached through its old ones); a reader is left to drain while
    its writers run (a torchrun reading a pipe gets its workers signalled once they are gone)."""
    work = user_work(table, container)
    kernels = notebook_kernels(table, container)
    children = children_of(table)
    movable = work - holding_terminals(table, work, children) - progress.below
    seen = tops(table, movable) + sorted(free_kernels(table, kernels, children) - progress.below)
    now: list[int] = []
    readers: dict[int, frozenset[int]] = {}
    for top in seen:
        writers = pipe_writers(table, top, work)
        if writers:
            if top not in progress.tops:
                readers[top] = writers
            continue
        targets = first_signal_of(table, top, movable, children)
        if top in progress.tops:
            targets = [pid for pid in targets if pid != top]
        now += [pid for pid in targets if pid not in progress.signalled]
    now = list(dict.fromkeys(now))  # each once, in order: two tops never share a worker, but a table may lie
    new_tops = frozenset(seen) - progress.tops
    after = dataclasses.replace(progress, tops=progress.tops | new_tops,
                                readers={**progress.readers, **readers},
                                signalled=progress.signalled | frozenset(now))
    return Plan(tuple(now), readers, new_tops, frozenset(work | kernels), after)


def readers_due(readers: Mapping[int, frozenset[int]], alive: set[int], writers_gone_at: Mapping[int, float],
                now: float) -> tuple[list[int], dict[int, float]]:
    """The readers still alive READER_DRAIN_S after the last of their writers went, and when each reader's
    writers were first seen gone (WRITERS_GONE_AT, with the readers whose writers are seen gone at NOW)."""
    gone_at = dict(writers_gone_at)
    due = []
    for reader, writers in sorted(readers.items()):
        if reader not in alive or writers & alive:
            continue
        if now - gone_at.setdefault(reader, now) >= READER_DRAIN_S:
            due.append(reader)
    return due, gone_at


def drain(progress: Progress, alive: set[int], now: float) -> tuple[list[int], Progress]:
    """The readers due their SIGTERM at NOW, with ALIVE the work still running, and the progress after."""
    due, gone_at = readers_due(progress.readers, alive, progress.writers_gone_at, now)
    due = [pid for pid in due if pid not in progress.signalled]
    return due, dataclasses.replace(progress, writers_gone_at=gone_at,
                                    signalled=progress.signalled | frozenset(due))


def everything_left(table: Table, container: Container) -> list[int]:
    """Step 3, after the work still running was signalled tops first (past_the_timeout): every process of
    the container, services and holders included."""
    return sorted(in_container(table, container))


def shells(table: Table, pids: list[int]) -> list[int]:
    """The shells among PIDS: an interactive one ignores SIGTERM, and ends on SIGHUP."""
    return [pid for pid in pids if (table[pid].program or table[pid].name) in SHELLS]
