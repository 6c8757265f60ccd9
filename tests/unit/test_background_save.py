"""The rules of background (asynchronous) sharded saves that one process can check, with a real
torch.distributed.checkpoint.async_save on a one-rank gloo group (trainer/background_save.py):
at most one save in flight, a checkpoint visible only once written, what a kill mid-write leaves,
and a full disk reported as one CheckpointWriteError.

    make test-unit PYTEST_ARGS=tests/unit/test_background_save.py

tests/trainer/test_async_checkpoint.py checks the same with 2 ranks under torchrun, and SIGTERM.
"""
from __future__ import annotations

import datetime
import errno
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from trainer import background_save
from trainer.background_save import BackgroundSaver
from trainer.checkpoint_folder import checkpoint_path, list_checkpoints_newest_first
from trainer.checkpoint_write import CheckpointWriteError, ShardWriter

GATE_TIMEOUT_S = 30


class GatedWriter(ShardWriter):
    """Writes only once the test opens the gate, and logs when each write begins and ends."""

    gate = threading.Event()
    log: list[str] = []

    def write_data(self, plan, planner):  # noqa: ANN001, ANN201 (DCP's own signature)
        step = self.path.name.split(".")[1]  # .step_000002.1a2b3c4d.tmp
        self.log.append(f"begin {step}")
        assert self.gate.wait(GATE_TIMEOUT_S)
        try:
            return super().write_data(plan, planner)
        finally:
            self.log.append(f"end {step}")


class FullDiskWriter(ShardWriter):
    def write_data(self, plan, planner):  # noqa: ANN001, ANN201
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def saver(monkeypatch) -> Iterator[BackgroundSaver]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    GatedWriter.gate.clear()
    GatedWriter.log = []
    monkeypatch.setattr(background_save, "ShardWriter", GatedWriter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DCP's notes about a one-rank group
        yield BackgroundSaver(is_main=True, control_group=dist.group.WORLD, timeout_s=60)
    GatedWriter.gate.set()
    dist.destroy_process_group()


def training_state(step: int) -> dict:
    return {"model": {"weight": torch.full((256,), float(step))}, "optimizer": {"state": {}, "param_groups": []},
            "step": step, "config": {}}


def test_a_checkpoint_appears_only_once_its_write_completed(saver, tmp_path):
    path = checkpoint_path(tmp_path, 2, sharded=True)
    saver.start(training_state(2), path)  # returns with the copy made and the write held at the gate
    assert not saver.done_everywhere()
    assert list_checkpoints_newest_first(tmp_path) == [] and not path.exists()
    GatedWriter.gate.set()
    finished = saver.finish()
    assert finished.path == path and list_checkpoints_newest_first(tmp_path) == [path]
    assert not list(tmp_path.glob(".step_*"))  # the temporary folder became the checkpoint


def test_a_kill_mid_write_leaves_only_a_temporary_folder_that_resume_passes_over(saver, tmp_path):
    GatedWriter.gate.set()
    saver.start(training_state(2), checkpoint_path(tmp_path, 2, sharded=True))
    saver.finish()
    GatedWriter.gate.clear()
    saver.start(training_state(4), checkpoint_path(tmp_path, 4, sharded=True))
    # What a kill now leaves on disk: step 2 whole, step 4 only under a temporary name.
    assert [path.name for path in list_checkpoints_newest_first(tmp_path)] == ["step_000002"]
    assert [path.name.split(".")[1] for path in tmp_path.glob(".step_*.tmp")] == ["step_000004"]
    GatedWriter.gate.set()
    saver.finish()


def test_a_new_save_first_waits_for_the_one_in_flight(saver, tmp_path):
    saver.start(training_state(2), checkpoint_path(tmp_path, 2, sharded=True))
    opener = threading.Timer(0.5, GatedWriter.gate.set)
    opener.start()
    started = time.monotonic()
    saver.start(training_state(4), checkpoint_path(tmp_path, 4, sharded=True))  # blocks until step 2 is written
    assert time.monotonic() - started >= 0.4
    assert (tmp_path / "step_000002").is_dir()  # visible before the next save began
    saver.finish()
    assert GatedWriter.log == ["begin step_000002", "end step_000002", "begin step_000004", "end step_000004"]
    copied = torch.load(tmp_path / "step_000004" / "training_state.pt", weights_only=True)
    assert copied["step"] == 4


def test_a_full_disk_during_the_background_write_is_one_error_and_leaves_nothing(saver, tmp_path, monkeypatch):
    monkeypatch.setattr(background_save, "ShardWriter", FullDiskWriter)
    path = checkpoint_path(tmp_path, 2, sharded=True)
    saver.start(training_state(2), path)
    with pytest.raises(CheckpointWriteError) as failure:
        saver.finish()
    assert str(failure.value) == (f"no space left writing {path} (No space left on device); free some space or "
                                  "point --ckpt-dir at a larger disk")
    assert list(tmp_path.iterdir()) == []


def test_closing_after_a_crash_waits_for_the_write_in_flight(saver, tmp_path):
    saver.start(training_state(2), checkpoint_path(tmp_path, 2, sharded=True))
    threading.Timer(0.5, GatedWriter.gate.set).start()
    saver.close()  # what train's `finally` does, before the process group is destroyed
    assert GatedWriter.log == ["begin step_000002", "end step_000002"]  # the writing thread is done
    assert list_checkpoints_newest_first(tmp_path) == []  # and never made visible: no rank agreed


def test_the_writing_group_times_out_as_the_run_does(monkeypatch):
    made: list[dict] = []
    monkeypatch.setattr(dist, "new_group", lambda **options: made.append(options))
    BackgroundSaver(is_main=True, control_group=None, timeout_s=42)
    assert made == [{"backend": "gloo", "timeout": datetime.timedelta(seconds=42)}]
