"""What JupyterLab's own closes stop first (jupyter_work_first.py acts on it): the shut-down of a terminal
with work running in it, and of a busy kernel. They choose as the container's stop does (stop_policy.look),
below the terminal's shell or the Jupyter server, and keep what the close itself would not have ended. Pure
functions over a process table, held by tests/unit/test_stop_progress.py on tables written by hand.
"""
from __future__ import annotations

from collections.abc import Callable

from process_kinds import Container, Table
from stop_policy import descends_from, look


def terminal_close(table: Table, shell: int,
                   ignores_hangup: Callable[[int], bool]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What a terminal's close stops first, and what it waits for: of look()'s choice below the terminal's
    SHELL, what belongs to a job the close's hang-up would reach (a child of the shell in its session that
    does not ignore SIGHUP; torchrun passes it on to its workers, whatever their session); and those jobs
    themselves, whose launcher (torchrun, after its workers saved) would die of the hang-up if the terminal
    closed before it exited. A `nohup` or `setsid` job outlives the terminal, as it always did, and so does
    a `nohup` below a job's subshell (`cd DIR && nohup CMD &`, `( nohup CMD ) &`): the hang-up ends the
    subshell, which does not ignore it, and never reaches what ignores it (reached_by_the_hang_up)."""
    jobs = {pid for pid, process in table.items()
            if process.parent == shell and process.session == shell and not ignores_hangup(pid)}
    first = look(table, Container.below(shell)).signal
    signalled = tuple(pid for pid in first
                      if any(reached_by_the_hang_up(table, pid, job, ignores_hangup) for job in jobs))
    return signalled, tuple(sorted(jobs)) if signalled else ()


def reached_by_the_hang_up(table: Table, pid: int, job: int, ignores_hangup: Callable[[int], bool]) -> bool:
    """Whether a terminal's hang-up to JOB (a child of its shell that does not ignore SIGHUP) ends PID:
    PID is the job or below it, and neither PID nor any process between it and the job ignores SIGHUP
    (what `nohup` started, and what that started, inherit its SIG_IGN)."""
    if pid != job and not descends_from(table, pid, job):
        return False
    while pid != job:
        if ignores_hangup(pid):
            return False
        pid = table[pid].parent
    return True


def kernel_close(table: Table, server: int, kernel: int, handles_sigterm: bool) -> tuple[int, ...]:
    """What a busy kernel's shutdown stops first: look()'s choice below the SERVER, in the kernel's subtree
    (the workers of a `!torchrun`), and the kernel itself only where its cell HANDLES_SIGTERM (a loop in a
    cell). A loop that does not keeps JupyterLab's own way, SIGINT first, which a loop that saves on
    KeyboardInterrupt relies on."""
    first = look(table, Container.below(server)).signal
    return tuple(pid for pid in first
                 if (handles_sigterm if pid == kernel else descends_from(table, pid, kernel)))
