"""What a signal sent to the supervisor means (pure functions): the orderly stop, passed on to the user's
work, or ignored; and whether it came from the runtime at all. decide() judges them in order, and
stop_signals.py acts on what it returns.
"""
from __future__ import annotations

import signal

# What no operator means as "stop": a child's end (reaped), job control and a terminal's size.
NOT_A_STOP = frozenset({signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH, signal.SIGTSTP,
                        signal.SIGTTIN, signal.SIGTTOU})
# What a job's own scheduler sends its job's processes (Slurm's --signal=USR1@60, "checkpoint now").
PASSED_ON = frozenset({signal.SIGUSR1, signal.SIGUSR2})


def decide(number: int, code: int, sender: int, *, supervisor: int, parent: int, command_mode: bool,
           requested_by: str | None, own_pid_namespace: bool, sender_descends: bool) -> str:
    """What the supervisor does with one signal (NUMBER, with its siginfo's CODE and SENDER), judged in this
    order: "ignore" what no one means as a stop; "asked by a service" for a service's request for the
    orderly stop; "from inside" (ignored, with a line) for any other signal a process of the container
    sent; then its meaning, "pass on" or "stop". Stop_signals.Signals.take acts on the answer."""
    meaning = signal_meaning(number, command_mode)
    if meaning == "ignore":
        return "ignore"
    if asked_by_a_service(number, sender, supervisor, requested_by):
        return "asked by a service"
    if sent_from_inside(code, sender, parent, own_pid_namespace, sender_descends):
        return "from inside"
    return meaning


def signal_meaning(number: int, command_mode: bool) -> str:
    """What a signal to the supervisor means: "stop" for every signal whose default would end a process
    (HUP, QUIT, TERM, INT, PWR, a derived image's STOPSIGNAL: the orderly stop, never a sudden end of
    everything), "pass on" for USR1 and USR2 beside a command (to what look() would signal first, as a
    batch job's processes get them), and "ignore" for the rest."""
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


def sent_from_inside(code: int, sender: int, parent: int, own_pid_namespace: bool,
                     sender_descends: bool) -> bool:
    """Whether a signal came from a process of the container itself (a user's `pkill python` matching the
    supervisor): only the runtime stops it. The runtime's signals come through tini, our parent
    (`docker stop`, the kubelet), from outside the PID namespace (sender 0), or from the kernel
    (CODE > 0: a terminal's Ctrl-C). Without a PID namespace of our own, only the supervisor's
    descendants (SENDER_DESCENDS) are the container's."""
    if code > 0 or sender in (0, parent):
        return False
    return own_pid_namespace or sender_descends
