"""The checkpoint folder's lock (scripts/trainer/folder_lock.py) against what a shared folder can hold:
a stale lock file, a reader holding its lock, and things at its name that are no lock file.
tests/trainer/test_checkpoint_folder.py runs two real jobs in one folder."""
from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys

import pytest

from trainer.folder_lock import LOCK_FILE, FolderInUse, FolderLock, StrayLockFile, pid_space


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


def ended_pid() -> str:
    """The pid of a process that has ended."""
    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def refusal_while_held(path, written: str) -> str:
    """The refusal of a job that finds WRITTEN in the lock file at PATH while another process holds its
    lock: one that opened the file read-only, as anyone who can read it could, or a job elsewhere."""
    path.write_text(written)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1]); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse) as refused:
            FolderLock(path.parent).acquire()
    finally:
        holder.kill()
        holder.wait(timeout=60)
    return str(refused.value)


def test_a_holder_that_is_no_job_is_not_named_by_the_dead_pid_of_the_file(tmp_path):
    finished, path = ended_pid(), tmp_path / LOCK_FILE
    message = refusal_while_held(path, f"pid {finished} on {socket.gethostname()}, since yesterday\n"
                                       f"pid space {pid_space()}\n")
    assert "is locked by a process that is not a training job" in message and f"names pid {finished}" in message
    assert f"find /proc/*/fd -lname {path.resolve()}" in message and "\n" not in message


@pytest.mark.parametrize("elsewhere", [
    "0c7a2b4e-5d1f-4c9b-9a55-3f2e8d7c6b1a/4026531836",  # another machine (or boot), its first namespace
    f"{pid_space().split('/')[0]}/4026532999",           # another container on this machine
    None,                                                # a lock file of an older version: no pid space
], ids=["another-machine", "another-container", "older-file"])
def test_a_job_of_the_same_host_name_elsewhere_is_named_not_taken_for_ended(tmp_path, elsewhere):
    """compose names every container `pytorch-dev`: a job in another one, or on another machine sharing the
    folder, has a pid this process cannot look up, and is still a live job."""
    holder = f"pid {ended_pid()} on {socket.gethostname()}, torchrun job 7, since 2026-12-04T01:00:00+00:00"
    message = refusal_while_held(tmp_path / LOCK_FILE, holder + (f"\npid space {elsewhere}\n" if elsewhere else ""))
    assert message == (f"--ckpt-dir {tmp_path} is in use by another training job ({holder}): let it finish or stop "
                       "it, or give this job another --ckpt-dir")


def test_the_lock_file_says_where_its_pid_means_something(tmp_path):
    lock = FolderLock(tmp_path)
    lock.acquire()
    try:
        holder, space = (tmp_path / LOCK_FILE).read_text().splitlines()
    finally:
        lock.release()
    assert holder.startswith(f"pid {os.getpid()} on {socket.gethostname()}")
    assert space == f"pid space {pid_space()}" and re.fullmatch(r"pid space [0-9a-f-]{36}/\d+", space), space


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
