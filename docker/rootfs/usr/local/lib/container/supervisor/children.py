"""The supervisor's children: reaped as they end, the status of those it watches kept, and the one way it
pauses (every wait of the supervisor's sleeps here, reaping while it sleeps)."""
from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Iterator

import process_table
import stop_verdict

# Waits start with short pauses and slow down to POLL_S: most work ends within a fraction of a second,
# and a check of 5,000 processes costs tens of milliseconds.
FIRST_POLL_S = 0.02
POLL_S = 0.2


class Children:
    """Reaps every child (as a subreaper the supervisor inherits the orphans of what it started) and
    keeps the exit status of those it watches, as a shell reports it (128 + N for a death by signal N).
    The ends of orphans that may have been work lost are kept too, with their names (the last ORPHANS_KEPT,
    stop_verdict.may_have_been_lost): the stop names the work that ended with a service rather than by the
    stop (stop_verdict.lost_with_a_holder)."""

    ORPHANS_KEPT = 256

    def __init__(self) -> None:
        self.watched: set[int] = set()
        self.kept: set[int] = set()  # not watched, but their status is wanted: the work the stop signalled
        self.status: dict[int, int] = {}
        self.orphans_ended: collections.deque[stop_verdict.Ended] = collections.deque(
            maxlen=self.ORPHANS_KEPT)

    def reap(self) -> list[int]:
        ended = []
        while True:
            try:
                # Peeked first (WNOWAIT): until it is reaped, the zombie's name is still in /proc.
                peeked = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return ended
            if peeked is None:
                return ended
            name = "" if peeked.si_pid in self.watched else process_table.read_name(peeked.si_pid)
            pid, status = os.waitpid(peeked.si_pid, os.WNOHANG)
            if pid == 0:
                return ended
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code
            if pid in self.watched or pid in self.kept:
                self.status[pid] = code
            if pid not in self.watched and stop_verdict.may_have_been_lost(name, code):
                self.orphans_ended.append(stop_verdict.Ended(pid, name, code, time.monotonic()))
            ended.append(pid)

    def status_of(self, pid: int) -> int:
        """PID's exit status, waiting for it to end if it has not yet."""
        while pid not in self.status:
            self.pause(POLL_S)
        return self.status[pid]

    def pause(self, seconds: float) -> None:
        """Sleeps SECONDS, reaping as children end (SIGCHLD is blocked: waited for, not handled)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if signal.sigtimedwait({signal.SIGCHLD}, left) is not None:
                self.reap()
        self.reap()

    def pauses(self, deadline: float) -> Iterator[None]:
        """Pauses, FIRST_POLL_S and then each twice as long up to POLL_S, until DEADLINE (time.monotonic):
        the caller checks what it waits for after each, and stops when that has ended."""
        pause_s = FIRST_POLL_S
        while time.monotonic() < deadline:
            self.pause(pause_s)
            yield
            pause_s = min(POLL_S, pause_s * 2)
