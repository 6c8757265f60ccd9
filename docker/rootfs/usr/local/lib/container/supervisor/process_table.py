"""The container's process table, read from /proc for stop_policy.py (what the stop decides over), and
the signals sent to its processes.

Only what the policy needs is read, since a stop may find thousands of processes: the executable of a
process whose name is a session holder's (so a trainer renamed `bash` is told from a real bash), the
command line of a Python program, the stdin of each top of the user's work, and only where one of them
reads a pipe, the outputs of the rest.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import TypeVar

import process_kinds
import process_tree
import stop_policy

T = TypeVar("T")
KERNEL_THREAD_FLAG = 0x00200000  # PF_KTHREAD, in /proc/PID/stat's flags

# Root without CAP_SYS_PTRACE (Docker's default) may not read another user's /proc/PID/exe or fd/, the
# user's own ids may: each owner's processes are read under that owner's effective ids. The ids are the
# process's, not a thread's: only the supervisor's main thread reads the table, or sends signals.


def read_stat(pid: str) -> tuple[int, str, str, int, int, int] | None:
    """(parent, name, state, flags, session, controlling terminal) from /proc/PID/stat, whose name may
    hold spaces and ')'."""
    try:
        descriptor = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        line = os.read(descriptor, 4096)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    end = line.rfind(b")")
    fields = line[end + 2:].split(None, 7)  # state, parent, and on to the flags
    return (int(fields[1]), line[line.find(b"(") + 1:end].decode("utf-8", "replace"), fields[0].decode(),
            int(fields[6]), int(fields[3]), int(fields[4]))


def read_name(pid: int) -> str:
    """PID's name (a zombie keeps it until it is reaped); empty when it cannot be read."""
    stat = read_stat(str(pid))
    return stat[1] if stat else ""


def readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def read_command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether PID is ANCESTOR's descendant now, by the parents in /proc (stat only, any owner's)."""
    def parent_of(up: int) -> int | None:
        stat = read_stat(str(up))
        return None if stat is None else stat[0]
    return process_tree.descends(parent_of, pid, ancestor)


def is_alive(pid: int) -> bool:
    """Running, or stopped: not exited (a zombie has, and waits only for its parent to reap it)."""
    stat = read_stat(str(pid))
    return stat is not None and stat[2] != "Z"


def signal_masks(pid: int) -> tuple[int, int]:
    """PID's masks of the signals it handles and of those it ignores (/proc/PID/status); none for one gone."""
    masks = {"SigCgt": 0, "SigIgn": 0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in masks:
                    masks[name] = int(value.strip(), 16)
    except (OSError, ValueError):
        pass
    return masks["SigCgt"], masks["SigIgn"]


def handles(pid: int, number: signal.Signals) -> bool:
    """Whether PID has a handler of its own for signal NUMBER (a trainer's for SIGTERM)."""
    return bool(signal_masks(pid)[0] >> (number - 1) & 1)


def ignores(pid: int, number: signal.Signals) -> bool:
    """Whether PID ignores signal NUMBER (what `nohup` does for SIGHUP)."""
    return bool(signal_masks(pid)[1] >> (number - 1) & 1)


def signal_each(number: signal.Signals, pids: list[int] | tuple[int, ...]) -> list[int]:
    """Signals each of PIDS; returns those that still exist but could not be signalled. A SIGTERM is followed
    by SIGCONT: a job stopped with Ctrl-Z acts on its SIGTERM only once it runs again."""
    failed = []
    for pid in pids:
        try:
            os.kill(pid, number)
            if number == signal.SIGTERM:
                os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        except OSError:
            failed.append(pid)
    return failed


class OwnersIds:
    """Takes UID and GID as the effective ids while reading, and root's back after."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.switch = os.geteuid() == 0 and uid != 0

    def __enter__(self) -> None:
        if self.switch:
            os.setegid(self.gid)
            try:
                os.seteuid(self.uid)
            except OSError:
                os.setegid(0)
                raise

    def __exit__(self, *_: object) -> None:
        if self.switch:
            os.seteuid(0)
            os.setegid(0)


def owner_of(pid: int) -> tuple[int, int]:
    try:
        owner = os.stat(f"/proc/{pid}")
    except OSError:  # gone: whatever is read of it now fails under any ids
        return 0, 0
    return owner.st_uid, owner.st_gid


def read_as_owners(pids: list[int], read: Callable[[int], T],
                   owners: dict[int, tuple[int, int]]) -> dict[int, T]:
    """READ(pid) for each of PIDS, under the ids of its owner. OWNERS keeps the owners found, so that a
    process read more than once in a snapshot is looked up once."""
    by_owner: dict[tuple[int, int], list[int]] = {}
    for pid in pids:
        if pid not in owners:
            owners[pid] = owner_of(pid)
        by_owner.setdefault(owners[pid], []).append(pid)
    found = {}
    for (uid, gid), group in by_owner.items():
        try:
            with OwnersIds(uid, gid):
                found.update((pid, read(pid)) for pid in group)
        except OSError:  # ids that cannot be taken (no CAP_SETUID): read what may be read
            found.update((pid, read(pid)) for pid in group)
    return found


def read_program_and_command(pid: int, name: str) -> tuple[str | None, str]:
    program = None
    if process_kinds.may_be_holder(name):
        exe = readlink(f"/proc/{pid}/exe")
        program = None if exe is None else os.path.basename(exe.removesuffix(" (deleted)"))
    return program, read_command(pid) if process_kinds.may_be_python(program or name) else ""


def holds_pty_master(pid: int) -> bool:
    """Whether PID has a pseudo-terminal's master open (/dev/ptmx, /dev/pts/ptmx in a container): it
    holds that terminal, as script(1), an editor's terminal server or a web terminal do. One whose
    descriptors cannot be read counts as holding one: then its terminal's work is stopped first."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    return any((readlink(f"/proc/{pid}/fd/{name}") or "").rsplit("/", 1)[-1] == "ptmx" for name in names)


def terminal_hosts(rows: dict[int, tuple[int, str, int, int]],
                   owners: dict[int, tuple[int, int]]) -> set[int]:
    """The processes that hold a terminal in which another session runs: of those the policy names as
    maybe holding one (process_kinds.terminal_host_candidates), the ones with a terminal's master open."""
    found = read_as_owners(process_kinds.terminal_host_candidates(rows), holds_pty_master, owners)
    return {pid for pid, holds in found.items() if holds}


def read_outputs(pid: int) -> frozenset[str]:
    links = (readlink(f"/proc/{pid}/fd/1"), readlink(f"/proc/{pid}/fd/2"))
    return frozenset(link for link in links if link and link.startswith("pipe:"))


def read_children_commands(parents: set[int], rows: dict[int, tuple[int, str, int, int]],
                           details: dict[int, tuple[str | None, str]],
                           owners: dict[int, tuple[int, int]]) -> None:
    """Adds to DETAILS the command line of each child of PARENTS not read yet (its program stays unread)."""
    children = [pid for pid, (parent, _, _, _) in rows.items() if parent in parents and pid not in details]
    commands = read_as_owners(children, read_command, owners)
    details.update((pid, (None, command)) for pid, command in commands.items())


def snapshot(container: process_kinds.Container, pipes: bool = True) -> process_kinds.Table:
    """The live processes (a zombie has exited already) with what the stop policy needs of each. With
    PIPES, the stdin of each top of the user's work, and where one is a pipe, every work's outputs.
    Most processes need only their stat: at 5,000 processes each further read per process is felt in
    how soon the stop signals (BENCHMARKS.md, "The resident supervisor")."""
    rows: dict[int, tuple[int, str, int, int]] = {}  # parent, name, session, terminal
    table: process_kinds.Table = {}
    owners: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_stat(entry)
        if stat is None or stat[2] == "Z":
            continue
        pid, (parent, name, _, flags, session, tty) = int(entry), stat
        if flags & KERNEL_THREAD_FLAG:
            table[pid] = process_kinds.Process(pid, parent, name, kernel_thread=True)
        else:
            rows[pid] = (parent, name, session, tty)
    worth_reading = [pid for pid, (_, name, _, _) in rows.items()
                     if process_kinds.may_be_holder(name) or process_kinds.may_be_python(name)]
    details = read_as_owners(worth_reading, lambda pid: read_program_and_command(pid, rows[pid][1]),
                           owners)
    # A Jupyter server's children are its kernels, of any language, and its terminals: read, the few that
    # there are. What a kernel forked runs its command line under any name (a loop's DataLoader workers),
    # and stays the kernel's: a kernel's other children are read too.
    servers = {pid for pid, (_, command) in details.items() if process_kinds.SERVER_COMMAND.search(command)}
    read_children_commands(servers, rows, details, owners)
    kernels = {pid for pid, (_, command) in details.items() if process_kinds.KERNEL_COMMAND.search(command)}
    read_children_commands(kernels, rows, details, owners)
    # So are the forks of multiprocessing's fork server (a loop's DataLoader workers, in a kernel or not).
    helpers = {pid for pid, (_, command) in details.items()
               if process_kinds.MULTIPROCESSING_COMMAND.search(command)}
    read_children_commands(helpers, rows, details, owners)
    # What the engine started from outside (parent 0: `docker exec`, the HEALTHCHECK): a few shells, read
    # so the healthcheck's is told from a user's (stop_policy.health_probes).
    outside = [pid for pid, (parent, name, _, _) in rows.items()
               if parent == 0 and pid != 1 and not details.get(pid, (None, ""))[1] and name in ("bash", "sh")]
    details.update((pid, (details.get(pid, (None, ""))[0], command))
                   for pid, command in read_as_owners(outside, read_command, owners).items())
    hosts = terminal_hosts(rows, owners)
    for pid, (parent, name, session, terminal) in rows.items():
        program, command = details.get(pid, (None, ""))
        table[pid] = process_kinds.Process(pid, parent, name, program, command, holds_terminal=pid in hosts,
                                         session=session, terminal=terminal)
    if not pipes:
        return table
    work = stop_policy.user_work(table, container)
    stdin = read_as_owners(stop_policy.tops(table, work), lambda pid: readlink(f"/proc/{pid}/fd/0"), owners)
    outputs: dict[int, frozenset[str]] = {}
    if any(link and link.startswith("pipe:") for link in stdin.values()):
        outputs = read_as_owners(sorted(work), read_outputs, owners)
    for pid in stdin.keys() | outputs.keys():
        row = table[pid]  # built again rather than dataclasses.replace(), which costs twice as much
        table[pid] = process_kinds.Process(pid, row.parent, row.name, row.program, row.command,
                                         row.kernel_thread, stdin.get(pid), outputs.get(pid, frozenset()),
                                         row.holds_terminal, row.session, row.terminal)
    return table
