"""The checkpoint folder's lock (scripts/trainer/folder_lock.py) against what a shared folder can hold:
a stale lock file, a reader holding its lock, and things at its name that are no lock file.
tests/trainer/test_checkpoint_folder.py runs two real jobs in one folder."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from trainer.folder_lock import LOCK_FILE, FolderInUse, FolderLock, StrayLockFile


def test_the_lock_file_is_the_jobs_users_alone(tmp_path):
    """flock needs no write access: a lock file others can read is one they can hold."""
    (tmp_path / LOCK_FILE).write_text("pid 1 on elsewhere, since yesterday")
    os.chmod(tmp_path / LOCK_FILE, 0o644)  # as an older version left it
    lock = FolderLock(tmp_path)
    lock.acquire()
    try:
        assert stat.S_IMODE(os.stat(tmp_path / LOCK_FILE).st_mode) == 0o600
    finally:
        lock.release()


def test_a_holder_that_is_no_job_is_not_named_by_the_dead_pid_of_the_file(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()
    path = tmp_path / LOCK_FILE
    path.write_text(f"pid {finished} on {socket.gethostname()}, since yesterday")
    # A process that opened the stale file read-only and holds its lock, as anyone who can read it could.
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1]); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse) as refused:
            FolderLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait(timeout=60)
    message = str(refused.value)
    assert "is locked by a process that is not a training job" in message and f"names pid {finished}" in message
    assert f"find /proc/*/fd -lname {path.resolve()}" in message and "\n" not in message


@pytest.mark.parametrize("kind", ["a symbolic link", "a FIFO", "a folder"])
def test_something_else_at_the_locks_name_is_named_with_the_way_to_remove_it(tmp_path, kind):
    path = tmp_path / LOCK_FILE
    if kind == "a symbolic link":
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(StrayLockFile) as refused:
        FolderLock(tmp_path).acquire()
    assert str(refused.value) == (f"--ckpt-dir {tmp_path}: {path} is {kind}, not the job's lock file; no job of "
                                  f"ours made it: remove it (rm -r {path}) and run the same command again")
    assert not (tmp_path / "elsewhere").exists()  # nothing written through the link
