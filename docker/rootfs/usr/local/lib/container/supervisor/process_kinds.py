"""What each process is, for the container's stop and what else reads the process table: a row of it
(Process), the container around it (Container), and the kinds the stop's rules are made of: a Python
program, a holder of sessions (sshd, a shell, tmux, JupyterLab, a kernel, a service; is_holder), a notebook
kernel and what is part of it, torchrun, and the processes Python's multiprocessing starts for a program.
Pure functions of a row, or of the table; stop_policy.py decides with them (docs/how-it-runs.md lists
which rule is decided where), process_table.py reads the rows.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

# Programs that hold sessions open (basenames of /proc/PID/exe). The Jupyter servers and notebook
# kernels are Python programs, told by their command line (JUPYTER_COMMAND).
# code-server is the -vscode variant's node, installed under that name (docker/build/install-code-server.sh):
# its server, terminal host and extension host hold the editor's sessions as JupyterLab holds its own.
# Shells: an interactive one ignores SIGTERM, and ends on SIGHUP (step 3).
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish"})
HOLDER_PROGRAMS = SHELLS | {"tini", "sshd", "tmux", "screen", "setpriv", "sleep", "code-server"}
# The same by name (/proc/PID/comm, at most 15 bytes), for a process whose executable cannot be read.
HOLDER_NAMES = SHELLS | {"tini", "sshd", "tmux: server", "tmux: client", "screen", "SCREEN", "jupyter-lab",
                         "jupyterhub-sing", "jupyter-server", "jupyter-noteboo", "setpriv", "sleep"}
# Names a holder's program gives its main thread whatever its executable (Node 24 calls it MainThread, so
# code-server's processes carry that name): for these the executable is read, and decides alone.
RENAMED_HOLDER_NAMES = frozenset({"MainThread"})
SERVER_COMMAND = re.compile(r"(^|/)(jupyter-lab|jupyterhub-singleuser|jupyter-server|jupyter-notebook)( |$)")
# A notebook kernel of any language: ipykernel, or a program handed the connection file a Jupyter server
# writes for a kernel in its runtime folder (IRkernel, xeus-python, a kernel spec of the user's).
KERNEL_COMMAND = re.compile(r"ipykernel_launcher|-m ipykernel|/jupyter/runtime/kernel-[\w-]+\.json( |$)")
JUPYTER_COMMAND = re.compile(SERVER_COMMAND.pattern + "|" + KERNEL_COMMAND.pattern)
# The processes Python's multiprocessing starts for a program: its fork server (the trainer's DataLoader
# workers are its forks, and run its command line), its resource tracker, a spawned child.
MULTIPROCESSING_COMMAND = re.compile(r" -c from multiprocessing\.(forkserver|resource_tracker|spawn) import ")
# Of those, the two that serve the program and end once it and theirs have (never signalled: is_plumbing).
PLUMBING_COMMAND = re.compile(r" -c from multiprocessing\.(forkserver|resource_tracker) import main")
TORCHRUN_COMMAND = re.compile(r"(/torchrun|torch\.distributed\.run|torch/distributed/run\.py) ")
# Names of programs that may be a Python program: only theirs is the command line worth reading.
PYTHON_NAMES = ("python", "pt_elastic", "torchrun", "jupyter", "ipykernel")


@dataclasses.dataclass(frozen=True)
class Process:
    """One row of /proc. program: the basename of its executable, None where it could not be read.
    command: its command line, read for Python programs only. stdin, outputs: the pipes on fd 0 and on
    fds 1 and 2 ("pipe:[1234]"). holds_terminal: it holds the master of a terminal in which another
    session runs (script(1), an editor's terminal server, a web terminal). session, terminal: its session's
    leader and its controlling terminal's device number (0: none), as /proc/PID/stat gives them."""
    pid: int
    parent: int
    name: str
    program: str | None = None
    command: str = ""
    kernel_thread: bool = False
    stdin: str | None = None
    outputs: frozenset[str] = frozenset()
    holds_terminal: bool = False
    session: int = 0
    terminal: int = 0


@dataclasses.dataclass(frozen=True)
class Container:
    """What the stop knows of the container: the supervisor's PID, the services it started, whether it has
    a PID namespace of its own. root: where set, only that process's descendants count (Container.below)."""
    supervisor: int
    services: frozenset[int] = frozenset()
    own_pid_namespace: bool = True
    root: int | None = None

    @classmethod
    def below(cls, root: int) -> Container:
        """The processes below ROOT, as a Jupyter server sees the work in one of its terminals or kernels."""
        return cls(supervisor=0, root=root)

    @property
    def counted_below(self) -> int | None:
        """The process whose descendants alone count: ROOT, or the supervisor without a PID namespace."""
        if self.root is not None:
            return self.root
        return None if self.own_pid_namespace else self.supervisor


Table = dict[int, Process]


def may_be_python(name: str) -> bool:
    return name.startswith(PYTHON_NAMES)


def is_python(process: Process) -> bool:
    return may_be_python(process.program if process.program is not None else process.name)


def is_entering(process: Process) -> bool:
    """Whether PROCESS is the engine entering the container to start a process there (`docker exec`, the
    HEALTHCHECK every 0.5 s of its first minute): runc names itself "runc:[2:INIT]" until, a moment later,
    it becomes that process. It is nothing yet; the next look sees what it became."""
    return process.name.startswith("runc:[")


def is_holder_by_name(name: str) -> bool:
    """Whether a process of this name holds sessions, where its executable cannot be read."""
    return name in HOLDER_NAMES


def may_be_holder(name: str) -> bool:
    """Whether a process of this name may hold sessions: only for these is the executable read."""
    return name in HOLDER_NAMES or name in RENAMED_HOLDER_NAMES


def is_holder(process: Process, container: Container) -> bool:
    """Whether PROCESS holds sessions (sshd, a shell, tmux, JupyterLab, a kernel, a service): never work."""
    # A service is the supervisor's child; a PID of one that ended may come back as anything.
    if process.pid in container.services and process.parent == container.supervisor:
        return True
    if process.program is not None:
        if process.program in HOLDER_PROGRAMS:
            return True
    elif process.name in HOLDER_NAMES:
        return True
    # A command line is read only for a Python program, for what a Jupyter server started and for what a
    # kernel forked (process_table.py).
    return bool(JUPYTER_COMMAND.search(process.command))


def terminal_host_candidates(rows: Mapping[int, tuple[int, str, int, int]]) -> list[int]:
    """The processes that may hold a terminal in which another session runs, from each process's (parent,
    name, session, controlling terminal): a parent of a session leader whose controlling terminal is not
    the parent's own, and no holder by name already (sshd, tmux, a shell). Only these few have their
    descriptors read for a terminal's master (process_table.holds_pty_master)."""
    return sorted({parent for pid, (parent, _, session, tty) in rows.items()
                   if session == pid and tty and parent in rows and rows[parent][3] != tty
                   and not is_holder_by_name(rows[parent][1])})


def is_kernel(process: Process) -> bool:
    """A notebook kernel, or a fork of one (a DataLoader worker names itself pt_data_worker)."""
    return bool(KERNEL_COMMAND.search(process.command))


def is_plumbing(table: Table, pid: int) -> bool:
    """multiprocessing's fork server or resource tracker, not one of the server's forks (which run its command
    line): each ends by itself once the program that started it and the processes it served have ended. A
    SIGTERM would kill the server under a trainer still saving, or be ignored by the tracker."""
    process = table[pid]
    return bool(PLUMBING_COMMAND.search(process.command)) and not (
        process.parent in table and table[process.parent].command == process.command)


def is_torchrun(process: Process) -> bool:
    return is_python(process) and bool(TORCHRUN_COMMAND.search(process.command + " "))


def part_of_its_parent(table: Table, pid: int) -> bool:
    """Whether PID is part of its parent's program, not a program of its own: its fork, which runs its
    command line (a DataLoader worker of a loop in a kernel), or multiprocessing's process it started."""
    parent = table[pid].parent
    return parent in table and (table[parent].command == table[pid].command
                                or bool(MULTIPROCESSING_COMMAND.search(table[pid].command)))


def in_a_kernel(table: Table, pid: int) -> bool:
    """Whether PID is part of a notebook kernel below it: a fork server the kernel's loop started, and its
    DataLoader workers, are the kernel's as its own forks are (the kernel's command line tells those)."""
    seen = {pid}
    while part_of_its_parent(table, pid):
        pid = table[pid].parent
        if is_kernel(table[pid]):
            return True
        if pid in seen:  # a table read while PIDs were reused may make a loop
            return False
        seen.add(pid)
    return False
