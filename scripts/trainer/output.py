"""The trainer outlives its output: a line that cannot be written is dropped, and training goes on.

`torchrun ... | head`, a `grep` or `tee` that exits early, a tmux pane's pipe that closed, a log file on a
full disk: the next `print` raises BrokenPipeError or OSError(ENOSPC), and a trainer that dies of it loses
the work since its last checkpoint, for want of a progress line nobody reads. keep_going_without_output()
wraps stdout and stderr so that the first failed write of each is reported once, on whatever still works
(the other stream, else the --metrics-file as a `{"note": ...}` record without a "step"), and every later
write to it is dropped. The file descriptor is pointed at /dev/null at that moment, so that neither the
buffered bytes nor Python's flush at exit can fail again (exit status 120, "Exception ignored ...").
"""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

_note_files: list[IO[str]] = []  # where a note goes when neither stream works: the metrics file, if any


class SurvivingStream:
    """A text stream that drops what it cannot write, after one note saying so; everything else is STREAM's."""

    def __init__(self, stream: IO[str], name: str, *, program: str) -> None:
        self.stream, self.name, self.program = stream, name, program
        self.lost: str | None = None  # why writes are dropped, once they are

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as error:  # ValueError: the stream was closed under us
                self.give_up(error)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as error:
                self.give_up(error)

    def give_up(self, error: BaseException) -> None:
        """Drops this stream's writes from now on, and says so once on whatever still works."""
        self.drop(error)
        note(self.loss_note())

    def loss_note(self) -> str:
        return (f"{self.program}: warning: {self.name} is gone ({self.lost}); its lines are dropped from here on "
                f"and training goes on")

    def drop(self, error: BaseException) -> None:
        self.lost = getattr(error, "strerror", None) or str(error) or type(error).__name__
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())  # what is still buffered now drains into /dev/null
            os.close(devnull)
        except (OSError, ValueError):
            pass  # no descriptor to redirect (a closed or in-memory stream): its writes are dropped here anyway

    def write_note(self, line: str) -> bool:
        """Whether LINE reached this stream; a failure drops the stream without a note of its own."""
        if self.lost is not None:
            return False
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError) as error:
            self.drop(error)
            return False
        return True

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the wrapped stream's
        return getattr(self.stream, name)


def keep_going_without_output(program: str) -> None:
    """Makes sys.stdout and sys.stderr survive a closed pipe or a full disk; call it first thing."""
    if not isinstance(sys.stdout, SurvivingStream):
        sys.stdout = SurvivingStream(sys.stdout, "stdout", program=program)
    if not isinstance(sys.stderr, SurvivingStream):
        sys.stderr = SurvivingStream(sys.stderr, "stderr", program=program)


def also_note_to(file: IO[str]) -> None:
    """FILE (the --metrics-file) receives the note of a lost output when neither stdout nor stderr works."""
    _note_files.append(file)


def note(message: str) -> None:
    """MESSAGE on the first of stderr and stdout that still works, else as a record in the metrics file;
    a stream found gone on the way is noted too."""
    messages = [message]
    for stream in (sys.stderr, sys.stdout):
        if isinstance(stream, SurvivingStream) and stream.lost is None:
            if stream.write_note("".join(line + "\n" for line in messages)):
                return
            messages.append(stream.loss_note())
    for file in _note_files:
        try:
            file.write("".join(json.dumps({"note": line}) + "\n" for line in messages))
            file.flush()
        except (OSError, ValueError):
            pass  # nothing left that works: training goes on regardless
