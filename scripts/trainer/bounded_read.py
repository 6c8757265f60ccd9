"""Reading a file that someone else may have planted, without letting it hang or exhaust the reader.

A checkpoint folder can be shared (a Slurm project folder, a PVC, a copied run), so a name in it may be
a symbolic link to /dev/zero, a FIFO that never sends, or a file of many gigabytes. read_regular_file
opens the name itself, never what a link points at, without blocking, and reads only a regular file of
at most LIMIT bytes; anything else raises RefusedFile with the reason, as one line can say it.
"""
from __future__ import annotations

import errno
import os
import pathlib
import stat
from typing import BinaryIO


def size_text(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size} bytes"


class RefusedFile(Exception):
    """The file is not one to read: the message says why (a link, not a regular file, too large)."""


def read_regular_file(path: pathlib.Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of PATH and its status. Raises FileNotFoundError, RefusedFile, or OSError."""
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer that never comes.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RefusedFile("is a symbolic link") from None
        raise
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise RefusedFile("is not a regular file")
        if status.st_size > limit:
            raise RefusedFile(f"is {size_text(status.st_size)}, more than the {size_text(limit)} allowed")
        with os.fdopen(os.dup(descriptor), "rb") as file:
            data = file.read(limit + 1)  # a file that grew since fstat is cut here, and refused below
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise RefusedFile(f"grew past the {size_text(limit)} allowed while it was read")
    return data, status


def open_regular_file(path: pathlib.Path) -> BinaryIO:
    """PATH open for reading, where it is a regular file (a link is followed: what it names is checked). A
    FIFO, a device or a folder raises RefusedFile at once, where open() waits for a FIFO's writer for ever:
    a checkpoint's loader is handed only what can be read to its end."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise RefusedFile("is not a regular file")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise
