"""One training job per checkpoint folder: a lock file in --ckpt-dir that the job's rank 0 holds.

Two jobs in one folder (started twice by mistake: two tmux windows, a restart policy beside a live job)
would prune each other's checkpoints mid-write and resume from each other's steps. The lock is an
flock(2) on `--ckpt-dir/.lock`, which the kernel releases when the holder dies in any way, so a crashed
job never leaves the folder locked (its file stays and says who held it last); a job that ends removes
the file, so a finished folder holds checkpoints only. flock works on local file systems and, on Linux,
over NFS (as a POSIX lock). The file's first line names the holder for people; its second says where
that pid means something (pid_space), so a job on another machine, or in another container of the same
host name, is never taken for one that has ended. torchrun restarting its workers is no second job: the
old rank 0 has exited, and with it its lock.
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import os
import pathlib
import re
import shlex
import socket
import stat

LOCK_FILE = ".lock"
# Only the job's own user may open the file: flock needs no write access, so anyone who can read a lock
# file can hold its lock, and keep every job of ours out of the folder.
LOCK_MODE = 0o600
# The lock file's second line: where its pid means something (pid_space).
PID_SPACE_LINE = "pid space"
UNKNOWN_PID_SPACE = "unknown"


class FolderInUse(Exception):
    """Another live job holds the folder; the message names it."""


class StrayLockFile(Exception):
    """Something that is not a lock file (a link, a FIFO, a folder) sits at the lock's name."""


class FolderLock:
    """Holds CKPT_DIR's lock from acquire() until release() or the end of the process; the lock file
    names this process, and JOB_ID (torchrun's --rdzv-id) where it runs under torchrun."""

    def __init__(self, ckpt_dir: pathlib.Path, job_id: str | None = None) -> None:
        self.path = ckpt_dir / LOCK_FILE
        self.job_id = job_id
        self.descriptor: int | None = None

    def acquire(self) -> None:
        """Takes the lock and writes who holds it; raises FolderInUse naming the holder when it is taken,
        and StrayLockFile when something else sits at the lock's name."""
        while True:
            descriptor = self.open_lock_file()
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                written = os.read(descriptor, 512).decode(errors="replace").strip()
                os.close(descriptor)
                raise FolderInUse(self.in_use_line(written)) from None
            if self.is_still_named(descriptor):
                break
            os.close(descriptor)  # the holder removed the file as we opened it: lock the new one
        if os.fstat(descriptor).st_mode & 0o077:  # a file an older version left readable to all
            try:
                os.fchmod(descriptor, LOCK_MODE)
            except OSError:
                pass  # a file system without modes (vfat, some network mounts): nothing to narrow
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{holder_description(self.job_id)}\n{PID_SPACE_LINE} {pid_space()}\n".encode(), 0)
        self.descriptor = descriptor

    def open_lock_file(self) -> int:
        """The lock file, opened for writing. O_NOFOLLOW refuses a link planted at the name instead of
        writing through it, O_NONBLOCK keeps a FIFO there from hanging the job, and the check of what was
        opened sends anything but a regular file to the person who can remove it."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            descriptor = os.open(self.path, flags, LOCK_MODE)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link, a folder, a socket
                raise StrayLockFile(self.stray_line()) from None
            raise
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # a FIFO or a device
            os.close(descriptor)
            raise StrayLockFile(self.stray_line())
        return descriptor

    def stray_line(self) -> str:
        try:
            mode = os.lstat(self.path).st_mode
        except OSError:
            mode = 0
        kind = next((name for test, name in [(stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                                             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")] if test(mode)),
                    "not a regular file")
        return (f"--ckpt-dir {self.path.parent}: {self.path} is {kind}, not the job's lock file; no job of ours "
                f"made it: remove it (rm -r {self.path}) and run the same command again")

    def in_use_line(self, written: str) -> str:
        """Why the folder is taken: the job its lock file names, unless that job's pid is one of ours and
        has ended (then the lock is held by a process that never wrote its name: not a training job of
        ours). A host name cannot tell that: compose names every container `pytorch-dev`, on every machine
        that shares a folder."""
        holder, _, rest = written.partition("\n")
        named = re.match(r"pid (\d+) on ", holder)
        recorded_space = re.search(rf"^{PID_SPACE_LINE} (\S+)$", rest, re.M)
        own_space = pid_space()
        if (named and recorded_space and own_space != UNKNOWN_PID_SPACE and recorded_space[1] == own_space
                and not process_exists(int(named[1]))):
            return (f"--ckpt-dir {self.path.parent} is locked by a process that is not a training job (its lock "
                    f"file still names pid {named[1]}, which has ended): find the holder with `find /proc/*/fd "
                    f"-lname {shlex.quote(str(self.path.resolve()))} 2>/dev/null` and stop it, or give this job "
                    f"another --ckpt-dir")
        holder = holder or "a job that did not say"
        return (f"--ckpt-dir {self.path.parent} is in use by another training job ({holder}): "
                f"let it finish or stop it, or give this job another --ckpt-dir")

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


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def pid_space() -> str:
    """Which processes a pid of this process's names: this boot of this machine (the kernel's boot id,
    which a container shares with its host) and this PID namespace. Two holders agree on it only when
    the same pid is the same process for both; UNKNOWN_PID_SPACE where /proc does not say."""
    try:
        boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")  # pid:[4026531836]
    except OSError:
        return UNKNOWN_PID_SPACE
    return f"{boot}/{namespace.removeprefix('pid:[').removesuffix(']')}"


def holder_description(job: str | None) -> str:
    """Who holds the lock, in words a person can act on: the process, its host, the job and the start."""
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()}{f', torchrun job {job}' if job else ''}, since {since}"
