"""What the container's stop signals, decided over a snapshot of the process table (pure functions).

`docker stop` reaches the supervisor alone: the services and the user's work run in sessions of their
own. The supervisor (supervisor.py) stops the container in three steps, and this module decides them:
  1. SIGTERM to the top of each piece of the user's work: a process whose parent holds a session (sshd,
     a shell, tmux, screen, JupyterLab, a notebook kernel, the supervisor), is outside the container (the
     parent of `docker exec`), or is gone. Not to the holders: a holder that ends makes its terminal send
     SIGHUP to the jobs in it, which would kill a trainer in the middle of its checkpoint. Not to what
     runs below a top: a trainer stops its own DataLoader workers. Two exceptions:
     - torchrun's workers get the signal instead of torchrun (also below a wrapper such as our
       manifests' torchrun_node.py): torch's agent turns a SIGTERM of its own into exit status 1 even
       when every worker saved (docs/torch-workarounds.md, "torchrun exits 1 on SIGTERM").
     - a reader at the end of a pipeline (`torchrun ... | grep -v x | tee log`, whatever the program) is
       left to end at the end of its input: the pipeline's exit status is its last stage's, and a reader
       signalled with its writers ends it with 143. A reader is a top whose stdin is a pipe that other
       work writes; one still running READER_DRAIN_S after its writers are gone does not end at the end
       of its input (a trainer fed by `yes |`), and is signalled then.
     A process of any name that holds a terminal with work in it (script(1), an editor's terminal
     server) is not signalled, nor the work above it, until that work has ended (holding_terminals).
     A notebook kernel holds a session for what its cells start (`!torchrun`, `subprocess.Popen`), and
     is work itself: a cell may run the training loop in the kernel. So it gets its SIGTERM once only its
     own forks (a DataLoader's workers) run below it (free_kernels); in a cell that handles SIGTERM the loop saves, and the kernel then
     ends when its cell does (kernel_stop.py), where JupyterLab would have shut it down in 2 s.
  2. Wait for the user's work, up to STOP_TIMEOUT. Work whose top exits first (a launcher that does not
     pass SIGTERM on: `flock`, a sweep script's subprocess.run) has a new top, signalled in its turn.
  3. The work still running below what ignored its SIGTERM is signalled as in step 1, tops first (TOLD);
     then SIGTERM to everything left, the services included, and wait for all of it.
signal_meaning and sent_from_inside decide what a signal sent to the supervisor means, and whether it
came from the runtime at all.
Holders are told by their executable, which no process can rename: `setproctitle` and `exec -a` change
only the name and the command line. Where the executable cannot be read (sshd's session process drops
its privileges without an exec), the name decides. The Jupyter servers and notebook kernels are Python
programs: the supervisor's own service is known by its PID, the others by their command line.
Without a PID namespace of its own (Apptainer, `docker run --pid=host`) only the supervisor's
descendants count: the host's processes and kernel threads are never signalled.
"""
from __future__ import annotations

import dataclasses
import re
import signal

# Programs that hold sessions open (basenames of /proc/PID/exe). The Jupyter servers and notebook
# kernels are Python programs, told by their command line (JUPYTER_COMMAND).
# code-server is the -vscode variant's node, installed under that name (docker/build/install-code-server.sh):
# its server, terminal host and extension host hold the editor's sessions as JupyterLab holds its own.
HOLDER_PROGRAMS = frozenset({"tini", "sshd", "bash", "sh", "dash", "zsh", "fish", "tmux", "screen",
                             "setpriv", "sleep", "code-server"})
# The same by name (/proc/PID/comm, at most 15 bytes), for a process whose executable cannot be read.
HOLDER_NAMES = frozenset({"tini", "sshd", "bash", "sh", "dash", "zsh", "fish", "tmux: server", "tmux: client",
                          "screen", "SCREEN", "jupyter-lab", "jupyterhub-sing", "jupyter-server",
                          "jupyter-noteboo", "setpriv", "sleep"})
# Names a holder's program gives its main thread whatever its executable (Node 24 calls it MainThread, so
# code-server's processes carry that name): for these the executable is read, and decides alone.
RENAMED_HOLDER_NAMES = frozenset({"MainThread"})
KERNEL_COMMAND = re.compile(r"ipykernel_launcher|-m ipykernel")
JUPYTER_COMMAND = re.compile(r"(^|/)(jupyter-lab|jupyterhub-singleuser|jupyter-server|jupyter-notebook)( |$)"
                             r"|" + KERNEL_COMMAND.pattern)
TORCHRUN_COMMAND = re.compile(r"(/torchrun|torch\.distributed\.run|torch/distributed/run\.py) ")
# Names of programs that may be a Python program: only theirs is the command line worth reading.
PYTHON_NAMES = ("python", "pt_elastic", "torchrun", "jupyter", "ipykernel")
READER_DRAIN_S = 5.0
# A chain of parents longer than this is a loop in a table read while processes came and went.
MAX_DEPTH = 64


@dataclasses.dataclass(frozen=True)
class Process:
    """One row of /proc. program: the basename of its executable, None where it could not be read.
    command: its command line, read for Python programs only. stdin, outputs: the pipes on fd 0 and on
    fds 1 and 2 ("pipe:[1234]"). holds_terminal: it holds the master of a terminal in which another
    session runs (script(1), an editor's terminal server, a web terminal)."""
    pid: int
    parent: int
    name: str
    program: str | None = None
    command: str = ""
    kernel_thread: bool = False
    stdin: str | None = None
    outputs: frozenset[str] = frozenset()
    holds_terminal: bool = False


@dataclasses.dataclass(frozen=True)
class Container:
    """What the supervisor knows of itself: its PID, the services it started, its PID namespace."""
    supervisor: int
    services: frozenset[int] = frozenset()
    own_pid_namespace: bool = True


Table = dict[int, Process]


def may_be_python(name: str) -> bool:
    return name.startswith(PYTHON_NAMES)


def is_python(process: Process) -> bool:
    return may_be_python(process.program if process.program is not None else process.name)


def is_holder_by_name(name: str) -> bool:
    """Whether a process of this name holds sessions, where its executable cannot be read."""
    return name in HOLDER_NAMES


def may_be_holder(name: str) -> bool:
    """Whether a process of this name may hold sessions: only for these is the executable read."""
    return name in HOLDER_NAMES or name in RENAMED_HOLDER_NAMES


def is_holder(process: Process, container: Container) -> bool:
    # A service is the supervisor's child; a PID of one that ended may come back as anything.
    if process.pid in container.services and process.parent == container.supervisor:
        return True
    if process.program is not None:
        if process.program in HOLDER_PROGRAMS:
            return True
    elif process.name in HOLDER_NAMES:
        return True
    # A command line is read only for a Python program and for what a kernel forked (process_table.py).
    return bool(JUPYTER_COMMAND.search(process.command))


def is_kernel(process: Process) -> bool:
    """A notebook kernel, or a fork of one (a DataLoader worker names itself pt_data_worker)."""
    return bool(KERNEL_COMMAND.search(process.command))


def is_torchrun(process: Process) -> bool:
    return is_python(process) and bool(TORCHRUN_COMMAND.search(process.command + " "))


def in_container(table: Table, container: Container) -> list[int]:
    """Every process the stop may signal: not PID 1, not the supervisor, no kernel thread, and without a
    PID namespace of our own only the supervisor's descendants."""
    candidates = [pid for pid, process in table.items()
                  if pid not in (1, container.supervisor) and not process.kernel_thread]
    if container.own_pid_namespace:
        return candidates
    return [pid for pid in candidates if descends_from(table, pid, container.supervisor)]


def descends_from(table: Table, pid: int, ancestor: int) -> bool:
    up = table[pid].parent
    for _ in range(MAX_DEPTH):
        if up == ancestor:
            return True
        if up not in table:
            return False
        up = table[up].parent
    return False


def user_work(table: Table, container: Container) -> set[int]:
    """The container's processes that hold no session. Steps 1 and 2 stop and wait for these and for the
    notebook kernels (notebook_kernels), which are left out here: an idle kernel is no work a hub should
    keep a server running for."""
    return {pid for pid in in_container(table, container) if not is_holder(table[pid], container)}


def is_fork_of(table: Table, pid: int, parent: int) -> bool:
    """Whether PID is PARENT's own fork (a DataLoader worker of a loop in a kernel): it runs its command."""
    return parent in table and table[parent].command == table[pid].command


def notebook_kernels(table: Table, container: Container) -> set[int]:
    """The notebook kernels, not their forks: those run the kernel's command line too."""
    kernels = {pid for pid in in_container(table, container) if is_kernel(table[pid])}
    return {pid for pid in kernels if not (table[pid].parent in kernels and is_fork_of(table, pid, table[pid].parent))}


def free_kernels(table: Table, kernels: set[int], children: dict[int, list[int]]) -> set[int]:
    """The kernels below which only their own forks run. A kernel signalled while a program its cell
    started still runs (`!torchrun`, whose output comes through the kernel's pipe) would end under it."""
    return {kernel for kernel in kernels
            if all(is_fork_of(table, below, kernel) for below in descendants(children, kernel))}


def tops(table: Table, work: set[int]) -> list[int]:
    """The work whose parent is not work: a holder, PID 1, the supervisor, outside, or gone."""
    return sorted(pid for pid in work if table[pid].parent not in work)


def children_of(table: Table) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for pid, process in table.items():
        found.setdefault(process.parent, []).append(pid)
    return found


def work_below(children: dict[int, list[int]], top: int, work: set[int]) -> list[int]:
    """TOP and the work below it, down to the first holder on each branch: a shell below is another
    piece of work's holder (`subprocess.run("torchrun ...", shell=True)`), whose tops have plans of
    their own."""
    found, frontier = [top], [top]
    for _ in range(MAX_DEPTH):
        frontier = [child for pid in frontier for child in children.get(pid, ()) if child in work]
        if not frontier:
            break
        found += frontier
    return found


def descendants(children: dict[int, list[int]], pid: int) -> list[int]:
    found, frontier = [], [pid]
    for _ in range(MAX_DEPTH):
        frontier = [child for parent in frontier for child in children.get(parent, ())]
        if not frontier:
            break
        found += frontier
    return found


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
            for _ in range(MAX_DEPTH):
                if up not in work or up in held:
                    break
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


@dataclasses.dataclass(frozen=True)
class Plan:
    """Step 1 for the tops no earlier plan saw: what gets SIGTERM now, and the readers left to drain,
    each with the writers of its input; and all of the user's work, which step 2 waits for."""
    signal: tuple[int, ...]
    readers: dict[int, frozenset[int]]
    tops: frozenset[int]
    work: frozenset[int]


def plan_signals(table: Table, container: Container, known_tops: frozenset[int] = frozenset(),
                 told: frozenset[int] = frozenset()) -> Plan:
    """What step 1 signals for the tops not in KNOWN_TOPS (an earlier plan handled those). Work in TOLD
    got its SIGTERM already and is still running: step 3 plans below it, as if it held a session."""
    work = user_work(table, container)
    kernels = notebook_kernels(table, container)
    children = children_of(table)
    signal: list[int] = []
    readers: dict[int, frozenset[int]] = {}
    movable = work - holding_terminals(table, work, children) - told
    new_tops = [top for top in tops(table, movable) if top not in known_tops]
    new_tops += sorted(free_kernels(table, kernels, children) - known_tops - told)
    for top in new_tops:
        writers = pipe_writers(table, top, work)
        if writers:
            readers[top] = writers
            continue
        agents = [pid for pid in work_below(children, top, movable) if is_torchrun(table[pid])]
        workers = [child for agent in agents for child in children.get(agent, ()) if child in movable]
        # A torchrun still in its rendezvous has no workers yet: it (or its wrapper) gets the signal.
        signal += workers if workers else [top]
    return Plan(tuple(signal), readers, frozenset(new_tops), frozenset(work | kernels))


def rescan(table: Table, container: Container, known_tops: frozenset[int],
           signalled: set[int]) -> tuple[Plan, list[int]]:
    """Step 2's look at the table again: the plan for the tops no earlier plan saw, and what gets SIGTERM
    now. That is the plan's signals, and the new workers of the tops planned before: torchrun
    --max-restarts starts new workers under the same agent, which an earlier plan reached only through
    its old workers. A known top itself (torchrun between two restarts) is never signalled again."""
    plan = plan_signals(table, container, known_tops)
    fresh = [pid for pid in plan.signal if pid not in signalled]
    fresh += [pid for pid in plan_signals(table, container).signal
              if pid not in signalled and pid not in known_tops and pid not in fresh]
    return plan, fresh


def readers_to_signal(readers: dict[int, frozenset[int]], alive: set[int], writers_gone_at: dict[int, float],
                      now: float) -> list[int]:
    """The readers still alive READER_DRAIN_S after the last of their writers went. WRITERS_GONE_AT
    records when each reader's writers were first seen gone."""
    due = []
    for reader, writers in sorted(readers.items()):
        if reader not in alive or writers & alive:
            continue
        gone_at = writers_gone_at.setdefault(reader, now)
        if now - gone_at >= READER_DRAIN_S:
            due.append(reader)
    return due


def everything_left(table: Table, container: Container) -> list[int]:
    """Step 3, after the work still running was signalled tops first (plan_signals with what was told):
    every process of the container, services and holders included."""
    return sorted(in_container(table, container))


def shells(table: Table, pids: list[int]) -> list[int]:
    """The shells among PIDS: an interactive one ignores SIGTERM, and ends on SIGHUP."""
    return [pid for pid in pids
            if (table[pid].program or table[pid].name) in ("bash", "sh", "dash", "zsh", "fish")]


@dataclasses.dataclass(frozen=True)
class Ended:
    """A process the supervisor reaped that it did not start: an orphan (the user's work whose holder or
    launcher ended) that ended. status: as a shell reports it, 128 + N for a death by signal N."""
    pid: int
    name: str
    status: int
    at: float


def lost_with_a_holder(ended: list[Ended], since: float, told: set[int]) -> list[Ended]:
    """The work that ended with a holder rather than by the stop: reaped at or after SINCE (the moment a
    service ended on its own), not a holder itself, and ended by anything but the stop's own request, which
    is its SIGTERM (TOLD) answered with status 0 or 143. A trainer in a JupyterLab terminal killed with the
    server dies of SIGHUP (129) before, or while, the stop signals it. torchrun's own status 1 is left out:
    its agent ends with 1 on a stop signal although its workers saved (docs/torch-workarounds.md), and a
    worker that was lost ended as torchrun's child, not ours."""
    answered_the_stop = (0, 128 + signal.SIGTERM)
    return [process for process in ended
            if process.at >= since and not is_holder_by_name(process.name) and process.status != 0
            and not (process.pid in told and process.status in answered_the_stop)
            and not (process.name == "torchrun" and process.status == 1)]


# ---- signals sent to the supervisor --------------------------------------------------------------

# What no operator means as "stop": a child's end (reaped), job control and a terminal's size.
NOT_A_STOP = frozenset({signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH, signal.SIGTSTP,
                        signal.SIGTTIN, signal.SIGTTOU})
# What a job's own scheduler sends its job's processes (Slurm's --signal=USR1@60, "checkpoint now").
PASSED_ON = frozenset({signal.SIGUSR1, signal.SIGUSR2})


def signal_meaning(number: int, command_mode: bool) -> str:
    """What a signal to the supervisor means: "stop" for every signal whose default would end a process
    (HUP, QUIT, TERM, INT, PWR, a derived image's STOPSIGNAL: the orderly stop, never a sudden end of
    everything), "pass on" for USR1 and USR2 beside a command (to its work, as a batch job's processes
    get them), and "ignore" for the rest."""
    if number in NOT_A_STOP:
        return "ignore"
    if command_mode and number in PASSED_ON:
        return "pass on"
    return "stop"


def asked_by_a_service(number: int, sender: int, supervisor: int, requested_by: str | None) -> bool:
    """Whether a SIGTERM is the supervisor's own, relaying a service's request for the orderly stop
    (REQUESTED_BY): JupyterLab's File > Shut Down asks for it (jupyter_work_first.py), so that the user's
    work is stopped first, while the server still holds its terminals and kernels."""
    return number == signal.SIGTERM and sender == supervisor and requested_by is not None


def sent_from_inside(code: int, sender: int, parent: int, own_pid_namespace: bool, sender_descends: bool) -> bool:
    """Whether a signal came from a process of the container itself (a user's `pkill python` matching the
    supervisor): only the runtime stops the container. The runtime's signals come through tini, our
    parent (`docker stop`, the kubelet), from outside the PID namespace (sender 0), or from the kernel
    (CODE > 0: a terminal's Ctrl-C). Without a PID namespace of our own, only the supervisor's
    descendants (SENDER_DESCENDS) are the container's."""
    if code > 0 or sender in (0, parent):
        return False
    return own_pid_namespace or sender_descends
