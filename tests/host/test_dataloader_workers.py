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
while the trainer's loader forks a worker again and again. Doing the child's first-time work in the
parent first only moves the wait (gdb: next torch.randint's parser, then Tensor.new's in the worker's
collate), so forked workers cannot be made safe from here: the fix is workers that do not inherit the
trainer's threads (a forkserver, started before the process group), whose process tree the stop's rules
must then learn. Until then this test is an expected failure, strict, so that the fix flips it.

    make test PYTEST_ARGS=tests/host/test_dataloader_workers.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

ROUNDS = 30  # a fresh worker each: the loader is not persistent
ROUNDS_TAKE_S = 90  # torch's import and 30 forks on a loaded 2-core machine; a hung worker never ends
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


@pytest.mark.xfail(strict=True, raises=TimeoutError,
                   reason="DataLoader workers are forked from the multi-threaded trainer: a lock another thread "
                          "holds at the fork hangs the worker (the docstring says why, and the fix)")
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
