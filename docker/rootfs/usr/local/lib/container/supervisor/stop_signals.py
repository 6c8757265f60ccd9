"""What reaches the supervisor and may stop the container: the signals sent to it, taken as
signal_policy.py decides (the orderly stop, passed on to the user's work, or ignored), and JupyterLab's
File > Shut Down, which asks for the stop through a pipe (StopRequests).
"""
from __future__ import annotations

import os
import signal
import threading

import process_kinds
import process_table
import signal_policy
import stop_policy
from run_folder import log, warn
from stop import describe

STOP_REQUEST_FD = 3  # where JupyterLab finds the pipe to ask for the orderly stop through (StopRequests)
# Every signal an operator may send is waited for, never left to its default action, which would end the
# supervisor at once and everything with it (signal_policy.signal_meaning says what each one means). The
# faults stay a crash's, and SIGPIPE and SIGXFSZ stay ignored, as Python leaves them.
FAULTS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
                    signal.SIGTRAP, signal.SIGSYS})
WAITED_SIGNALS = frozenset(signal.valid_signals()) - FAULTS - {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL,
                                                                 signal.SIGSTOP}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a realtime signal past SIGRTMIN
        return f"signal {number}"


class StopRequests:
    """JupyterLab's File > Shut Down, as a request for the container's orderly stop: the server (as the
    user) cannot signal the supervisor (root), so it writes a line to a pipe it got at its start
    (jupyter_work_first.py): `stop`, a tab, and what it had to close with work still running, if anything.
    A thread reads the line and wakes the main loop with a SIGTERM of the supervisor's own, which
    Signals.take knows by REQUESTED_BY."""

    LONGEST_LINE = 4096

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.requested_by: str | None = None
        self.left_running = ""  # what the service closed with work still running, in its words
        self.service = ""

    def listen(self, service: str) -> None:
        os.close(self.write_end)  # the service holds it now: the read ends when the service does
        self.service = service
        threading.Thread(target=self.read, args=(threading.main_thread().ident,), daemon=True).start()

    def read(self, main_thread: int) -> None:
        with os.fdopen(self.read_end, "rb") as pipe:
            line = pipe.readline(self.LONGEST_LINE)
        if line:  # not the end of the service's output: a request
            self.left_running = line.decode("utf-8", "replace").partition("\t")[2].strip()
            self.requested_by = self.service
            signal.pthread_kill(main_thread, signal.SIGTERM)


class Signals:
    """What the signals sent to the supervisor mean here: the runtime's stop, ignored, or passed on."""

    def __init__(self, container: process_kinds.Container, command_mode: bool,
                 requests: StopRequests) -> None:
        self.container, self.command_mode, self.requests = container, command_mode, requests
        self.asked_by: str | None = None  # the service that asked for the stop, if one did

    def take(self, info: signal.struct_siginfo) -> bool:
        """Acts on one signal as signal_policy.decide judges it; True when it stops the container."""
        number, sender = info.si_signo, info.si_pid
        descends = (not self.container.own_pid_namespace
                    and process_table.descends_from(sender, self.container.supervisor))
        action = signal_policy.decide(number, info.si_code, sender, supervisor=self.container.supervisor,
                                      parent=os.getppid(), command_mode=self.command_mode,
                                      requested_by=self.requests.requested_by,
                                      own_pid_namespace=self.container.own_pid_namespace,
                                      sender_descends=descends)
        if action == "ignore":
            return False
        if action == "asked by a service":
            self.asked_by = self.requests.requested_by
            log(f"{self.asked_by} asked to shut down (JupyterLab's File > Shut Down): stopping as docker "
                "stop does, your work first")
            return True
        if action == "from inside":
            warn(f"ignored {signal_name(number)} from process {sender} "
                 f"({process_table.read_command(sender)[:60] or 'gone'}) of this container: only the "
                 "container's runtime stops it (docker stop)")
            return False
        if action == "pass on":
            table = process_table.snapshot(self.container)
            targets = stop_policy.look(table, self.container).signal
            process_table.signal_each(signal.Signals(number), targets)
            log(f"passed {signal_name(number)} on to your work: "
                f"{describe(targets, table) or 'none is running'}")
            return False
        if number not in (signal.SIGTERM, signal.SIGINT):
            log(f"{signal_name(number)} received: stopping as docker stop does")
        return True
