"""The trainer's DataLoader workers and a lock of the C library that another thread holds at their fork.

A forked child has only the thread that forked, so a lock another thread held at that instant stays held
in the child for good. glibc's exit-handler lock is taken whenever a process first builds a static
object with a destructor: torch's worker set-up does so in the child (torch.set_num_threads(1) makes the
intra-op thread pool), so does its first batch (each torch function's argument parser, the shared-memory
batch of default_collate), and the process group's threads do so at the first collectives, just as the
first workers fork. Landing runs 38 and 53 each saw one worker hang there, with its rank waiting on it:
a worker that had not reached its worker_init_fn. gdb on the worker here shows it waiting for that lock
in caffe2::pthreadpool() under at::set_num_threads.

Here a thread of the C library's own (tests/support/exit_lock_holder.c) holds the lock most of the time
while the trainer's loader starts a worker again and again. Doing the child's first-time work in the
parent first only moved the wait (gdb: next torch.randint's parser, then Tensor.new's in the worker's
collate), so forked workers cannot be made safe: the trainer's workers come from a fork server, a process
of one thread (trainer.data.worker_server). Before that change every run of this test hung its first
worker. The other tests hold what a fork server changes: a worker's parent is the server, so a killed
trainer's workers must end by themselves; the server sits in the trainer's process group, where a hang-up
must not kill it; and it must end before the trainer, not just after.

    make test PYTEST_ARGS=tests/host/test_dataloader_workers.py
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

ROUNDS = 30  # a fresh worker each: the loader is not persistent
ROUNDS_TAKE_S = 90  # torch's import and 30 workers on a loaded 2-core machine; a hung worker never ends
HOLDER_SOURCE = REPO_ROOT / "tests" / "support" / "exit_lock_holder.c"

FORK_ROUNDS = f"""
import ctypes, sys
sys.path.insert(0, {str(REPO_ROOT / "scripts")!r})
import torch
from torch.utils.data import RandomSampler
from trainer.data import SyntheticImages, make_loader

dataset = SyntheticImages(64, image_size=8, num_classes=4, seed=0)
loader = make_loader(dataset, RandomSampler(dataset), batch_size=4, num_workers=1, pin_memory=False,
                     persistent_workers=False)
holder = ctypes.CDLL(sys.argv[1])
assert holder.start_holding() == 0
for round in range({ROUNDS}):
    images, labels = next(iter(loader))
    print("round", round, "batch", tuple(images.shape), flush=True)
holder.stop_holding()
print("every worker started", flush=True)
"""


@pytest.fixture(scope="module")
def exit_lock_holder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc")
    assert compiler, "no C compiler (cc): install gcc, which the host tier's compiled runs need too"
    library = tmp_path_factory.mktemp("holder") / "exit_lock_holder.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-pthread", "-o", str(library), str(HOLDER_SOURCE)],
                   check=True, timeout=60)
    return library


def test_workers_start_while_another_thread_holds_the_exit_handler_lock(exit_lock_holder: Path) -> None:
    # A process of its own: torch set up in this one (by another test) would hide the fault.
    with subprocess.Popen([sys.executable, "-c", FORK_ROUNDS, str(exit_lock_holder)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
        try:
            output = process.communicate(timeout=ROUNDS_TAKE_S)[0]
        except subprocess.TimeoutExpired:
            # The loader's session: its hung worker has a process group of its own.
            subprocess.run(["pkill", "-KILL", "-s", str(process.pid)], check=False)
            output = process.communicate()[0]
            raise TimeoutError(f"a DataLoader worker never delivered its batch in {ROUNDS_TAKE_S} s:\n{output[-3000:]}")
    assert process.returncode == 0 and "every worker started" in output, output[-3000:]


KILLED_TRAINER = f"""
import sys, time
sys.path.insert(0, {str(REPO_ROOT / "scripts")!r})
from torch.utils.data import RandomSampler
from trainer.data import SyntheticImages, make_loader

dataset = SyntheticImages(64, image_size=8, num_classes=4, seed=0)
loader = make_loader(dataset, RandomSampler(dataset), batch_size=4, num_workers=2, pin_memory=False,
                     persistent_workers=True)
next(iter(loader))
print("workers running", flush=True)
time.sleep(600)
"""
WORKERS_END_S = 30  # a pidfd wakes them at once; the fall-back look is once a second


def session_members(session: int) -> list[str]:
    """The processes of SESSION still alive (not zombies), each as "PID NAME"."""
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == session and fields[0] != "Z":
            members.append(f"{entry} {name}")
    return members


def test_a_killed_trainer_leaves_no_worker_nor_fork_server_behind() -> None:
    """A worker's parent is the fork server, which the workers keep alive: torch's own check of the parent
    never fires, and a trainer killed by the kernel's OOM killer or by torchrun would leave them for good."""
    with subprocess.Popen([sys.executable, "-c", KILLED_TRAINER], stdout=subprocess.PIPE, text=True,
                          start_new_session=True) as trainer:
        try:
            assert trainer.stdout.readline() == "workers running\n"
            assert len(session_members(trainer.pid)) >= 5, "the trainer, the server, the tracker, 2 workers"
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=10)
            deadline = time.monotonic() + WORKERS_END_S
            while session_members(trainer.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not session_members(trainer.pid), f"left running: {session_members(trainer.pid)}"
        finally:
            subprocess.run(["pkill", "-KILL", "-s", str(trainer.pid)], check=False)


HUNG_UP_TRAINER = f"""
import signal, sys
sys.path.insert(0, {str(REPO_ROOT / "scripts")!r})
from torch.utils.data import RandomSampler
from trainer.data import SyntheticImages, make_loader

taken = []
for number in (signal.SIGHUP, signal.SIGTERM):  # as the trainer does: a stop at the next step
    signal.signal(number, lambda number, frame: taken.append(signal.Signals(number).name))
dataset = SyntheticImages(64, image_size=8, num_classes=4, seed=0)
loader = make_loader(dataset, RandomSampler(dataset), batch_size=4, num_workers=1, pin_memory=False,
                     persistent_workers=False)
next(iter(loader))
print("first worker ran", flush=True)
sys.stdin.readline()
next(iter(loader))  # a new worker, from the same server
print("took", *sorted(set(taken)), "and started a worker after them", flush=True)
"""


def test_a_hang_up_or_stop_sent_to_the_trainers_process_group_leaves_its_fork_server_running() -> None:
    """A terminal's hang-up reaches its whole foreground process group, where the fork server and its
    resource tracker sit beside the trainer; so does `kill -- -PGID`. The trainer stops at a step boundary
    and may need a worker until then (a new epoch without --persistent-workers)."""
    with subprocess.Popen([sys.executable, "-c", HUNG_UP_TRAINER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as trainer:
        try:
            assert trainer.stdout.readline() == "first worker ran\n"
            os.killpg(trainer.pid, signal.SIGHUP)
            os.killpg(trainer.pid, signal.SIGTERM)
            output = trainer.communicate("go on\n", timeout=60)[0]
            assert "took SIGHUP SIGTERM and started a worker after them" in output, output[-3000:]
        finally:
            subprocess.run(["pkill", "-KILL", "-s", str(trainer.pid)], check=False)


FINISHING_TRAINER = f"""
import os, sys
sys.path.insert(0, {str(REPO_ROOT / "scripts")!r})
import train_ddp

if __name__ == "__main__":
    status = train_ddp.main(["--model", "tiny", "--image-size", "8", "--max-steps", "2", "--batch-size", "4",
                             "--num-workers", "2", "--ckpt-dir", sys.argv[1]])
    children = [pid for pid in os.listdir("/proc") if pid.isdigit() and os.path.exists(f"/proc/{{pid}}/stat")
                and open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())]
    print("status", status, "children left", children, flush=True)
"""


def test_the_trainer_ends_its_fork_server_and_tracker_before_it_ends(tmp_path: Path) -> None:
    """Left to end a moment after the trainer, they still hold its terminal and output: a Python program
    holding that terminal saw the trainer gone, was the top of the work, and the stop signalled it."""
    script = tmp_path / "finishing.py"  # a file: its main is imported by each worker, as under spawn
    script.write_text(FINISHING_TRAINER)
    environment = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}
    finished = subprocess.run([sys.executable, str(script), str(tmp_path / "checkpoints")], env=environment,
                              capture_output=True, text=True, timeout=120)
    assert "status 0 children left []" in finished.stdout, finished.stdout[-2000:] + finished.stderr[-2000:]
