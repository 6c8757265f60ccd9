"""Telling the container's stop what a stop cost this run, when its last save fails.

The trainer's own error line goes to its terminal; a trainer in an SSH or tmux shell is reaped by that
shell, so the container's stop never sees its exit status and would say "stopped cleanly". The image
names a folder for such reports (CONTAINER_LOST_WORK_DIR): one file, named by this process's PID, holding
one line, which the stop names in its log and counts against a clean stop (docs/how-it-runs.md, rule 19).
Outside the image the variable is unset and nothing is written.
"""
from __future__ import annotations

import os

FOLDER_VARIABLE = "CONTAINER_LOST_WORK_DIR"


def report_lost_work(line: str) -> None:
    """Leaves LINE for the container's stop, where there is one; a report that cannot be written changes
    nothing (the trainer's own error line stands)."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return
    try:
        # Made anew, never through a link someone left there (the folder is writable by every uid).
        descriptor = os.open(os.path.join(folder, str(os.getpid())),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as report:
            report.write(line.replace("\n", " ")[:400] + "\n")
    except OSError:
        pass
