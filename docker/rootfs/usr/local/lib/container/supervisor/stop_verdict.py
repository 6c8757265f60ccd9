"""What the stop's last line and the container's exit status say, as pure functions over what the executor
(stop.py) recorded. "stopped cleanly" means nothing the stop ended was lost: everything it signalled ended
in time, and none of it ended unsaved. docs/how-it-runs.md, "The stop's rules", names each rule.

The stop sees the exit status only of what the supervisor reaps (the command, and work whose launcher or
shell ended before it: a `nohup` job); a trainer in an SSH or tmux shell is reaped by that shell. What it
knows of every program it signals is how that program took SIGTERM when it was sent: a program that
neither handles nor ignores it dies of it, unsaved.
"""
from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping

from process_kinds import is_holder_by_name

DIED_OF_SIGTERM = 128 + signal.SIGTERM
# What step 3's own signals give a session holder (a shell, sleep): it had nothing left to run.
ENDED_BY_STEP_3 = (DIED_OF_SIGTERM, 128 + signal.SIGHUP)


@dataclasses.dataclass(frozen=True)
class Signalled:
    """A process the stop sent SIGTERM as work, as it was when sent. shown: PID(command), as the log names
    it. counts_unhandled: a Python program other than a notebook kernel, with nothing running below it,
    whose death by an unhandled SIGTERM loses its work. A kernel's idle state, `watch nvidia-smi` or `tail
    -f` lose nothing by it, nor does a launcher (`subprocess.run` of a trainer): what runs below it
    becomes the next top, signalled and judged itself."""
    pid: int
    shown: str
    counts_unhandled: bool
    handles_sigterm: bool
    ignores_sigterm: bool


def unsaved(signalled: Mapping[int, Signalled], statuses: Mapping[int, int]) -> list[str]:
    """The work the stop ended unsaved, a line each: a signalled program whose exit status the supervisor
    saw was not 0 (a trainer whose save failed, its disk full), and a Python program that neither handled
    nor ignored its SIGTERM, and so died of it (torchrun's workers of a script that does not handle it).
    One that ignored it is named by the stop's own lines, as still running when step 3 came."""
    lines = []
    for pid, process in signalled.items():
        status = statuses.get(pid)
        if status is None or status == DIED_OF_SIGTERM:
            unhandled = status == DIED_OF_SIGTERM or not (process.handles_sigterm or process.ignores_sigterm)
            if unhandled and process.counts_unhandled:
                lines.append(f"{process.shown} did not handle SIGTERM and died of it")
        elif status:
            lines.append(f"{process.shown} exited with status {status} after its SIGTERM")
    return lines


def command_failed(status: int | None) -> bool:
    """Whether the command, where the stop did not signal it as work (a holder: `bash -c 'torchrun ...'`),
    ended failing: a status other than 0 and than those step 3's signals give a holder. bash passes on
    torchrun's 1 when its workers died; `sleep infinity` ends with 143 at step 3, having lost nothing."""
    return status is not None and status not in (0, *ENDED_BY_STEP_3)


def exit_status(ended_by: str, clean: bool, status: int = 0, spawned_by_hub: bool = False) -> int:
    """The container's exit status. ENDED_BY says what ended it:
      "command"      the command ended, or was stopped: its STATUS, or 1 where it says 0 but the stop was
                     not clean (work it left, or work beside it, lost);
      "docker stop"  a stop of the services: 0 when it was clean, else 1, so the platform's record of the
                     end (Kubernetes' Completed or Error) tells whether work was lost;
      "service"      a service ended the container: on purpose with STATUS 0 (JupyterLab's File > Shut
                     Down), or of its own failure: STATUS, or 1, so a restart policy acts; 0 only for a
                     clean shut-down under JupyterHub, which counts the exit itself."""
    if ended_by == "command":
        return status or (0 if clean else 1)
    if ended_by == "docker stop":
        return 0 if clean else 1
    if status == 0 and spawned_by_hub and clean:
        return 0
    return status or 1


def reported(reports: Mapping[int, str]) -> list[str]:
    """What programs wrote into the run folder's LOST_DIR during the stop, PID: its line, as the log names
    it: a trainer in an SSH or tmux shell whose save failed, whose status only its shell sees."""
    return [f"{pid} said: {line}" for pid, line in sorted(reports.items())]


# ---- work that ended with a holder, before the stop could ask it to save -----------------------------

@dataclasses.dataclass(frozen=True)
class Ended:
    """A process the supervisor reaped that it did not start: an orphan (the user's work whose holder or
    launcher ended) that ended. status: as a shell reports it, 128 + N for a death by signal N."""
    pid: int
    name: str
    status: int
    at: float


def may_have_been_lost(name: str, status: int) -> bool:
    """Whether an orphan that ended with STATUS may have been work lost: not 0, not a holder's."""
    return status != 0 and not is_holder_by_name(name)


def lost_with_a_holder(ended: list[Ended], since: float, told: set[int] | frozenset[int]) -> list[Ended]:
    """The work that ended with a holder rather than by the stop: reaped at or after SINCE (the moment a
    service ended on its own), one that may have been lost, and ended by anything but the stop's own
    request, which is its SIGTERM (TOLD) answered with status 0 or 143. A trainer in a JupyterLab terminal
    killed with the server dies of SIGHUP (129) before, or while, the stop signals it. torchrun's own status
    1 is left out: its agent ends with 1 on a stop signal although its workers saved
    (docs/torch-workarounds.md), and a worker that was lost ended as torchrun's child, not ours."""
    answered_the_stop = (0, 128 + signal.SIGTERM)
    return [process for process in ended
            if process.at >= since and may_have_been_lost(process.name, process.status)
            and not (process.pid in told and process.status in answered_the_stop)
            and not (process.name == "torchrun" and process.status == 1)]

