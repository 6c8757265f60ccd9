"""One training job per checkpoint folder: a lock file in --ckpt-dir that the job's rank 0 holds.

Two jobs in one folder (started twice by mistake: two tmux windows, a restart policy beside a live job)
would prune each other's checkpoints mid-write and resume from each other's steps. The lock is an
flock(2) on `--ckpt-dir/.lock`, which the kernel releases when the holder dies in any way, so a crashed
job never leaves the folder locked (its file stays and says who held it last); a job that ends removes
the file, so a finished folder holds checkpoints only. flock works on local
file systems and, on Linux, over NFS (as a POSIX lock). torchrun restarting its workers is no second
job: the old rank 0 has exited, and with it its lock.
"""
from __future__ import annotations

import datetime
import fcntl
import os
import pathlib
import socket

LOCK_FILE = ".lock"


class FolderInUse(Exception):
    """Another live job holds the folder; the message names it."""


class FolderLock:
    """Holds CKPT_DIR's lock from acquire() until release() or the end of the process."""

    def __init__(self, ckpt_dir: pathlib.Path) -> None:
        self.path = ckpt_dir / LOCK_FILE
        self.descriptor: int | None = None

    def acquire(self) -> None:
        """Takes the lock and writes who holds it; raises FolderInUse naming the holder when it is taken."""
        while True:
            # O_NOFOLLOW: a link planted at the name is refused, never written through.
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(descriptor, 512).decode(errors="replace").strip() or "a job that did not say"
                os.close(descriptor)
                raise FolderInUse(f"--ckpt-dir {self.path.parent} is in use by another training job ({holder}): "
                                  f"let it finish or stop it, or give this job another --ckpt-dir") from None
            if self.is_still_named(descriptor):
                break
            os.close(descriptor)  # the holder removed the file as we opened it: lock the new one
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, holder_description().encode(), 0)
        self.descriptor = descriptor

    def is_still_named(self, descriptor: int) -> bool:
        """Whether the locked file is still the one at our path (a holder that ends unlinks it first)."""
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        opened = os.fstat(descriptor)
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

    def release(self) -> None:
        """Removes the file, then lets go of the lock: a job waiting on the old file sees it gone and retries."""
        if self.descriptor is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass  # a folder that became unwritable keeps the file; the next job still gets the lock
        os.close(self.descriptor)  # closing the last descriptor releases the flock
        self.descriptor = None


def holder_description() -> str:
    """Who holds the lock, in words a person can act on: the process, its host, the job and the start."""
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()}{f', torchrun job {job}' if job else ''}, since {since}"
