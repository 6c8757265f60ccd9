"""The Checkpointer's policy in one process, with small fakes (trainer/checkpointer.py): when it saves,
what it keeps, what resume restores, how background saves are finished, the folder's lock, and the one
line a folder that stops being writable ends with.

    make test-unit PYTEST_ARGS=tests/unit/test_checkpointer.py

The fakes stand in for the training state (a tiny model and a step counter) and for the background
saver; the files are real, written by trainer/checkpoint_write.py into a temporary folder, on a one-rank gloo
group. tests/trainer runs the same code with 2 ranks under torchrun.
"""
from __future__ import annotations

import argparse
import errno
import os
import pathlib
import socket
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from trainer import checkpoint_write, checkpointer
from trainer.background_save import PendingSave
from trainer.checkpointer import CheckpointFailure, Checkpointer
from trainer.distributed import Placement


class FakeState:
    """What the Checkpointer needs of a TrainingState: a step, flags, a place in the job, a state dict."""

    def __init__(self, ckpt_dir: pathlib.Path, **flags: object) -> None:
        defaults = {"ckpt_dir": ckpt_dir, "save_every": 2, "keep": 2, "max_steps": 6, "parallel": "ddp",
                    "async_checkpoint": True, "pg_timeout": 60, "init_from": None, "model": "tiny",
                    "num_classes": 10, "data_dir": None, "compile": False}
        self.args = argparse.Namespace(**{**defaults, **flags})
        self.placement, self.group = Placement(rank=0, local_rank=0, world_size=1), dist.group.WORLD
        self.weight = torch.zeros(4)
        self.step = 0

    def state_dict(self) -> dict:
        return {"model": {"weight": self.weight.clone()}, "optimizer": {}, "step": self.step, "epoch": 0,
                "samples_in_epoch": 8 * self.step,
                "config": {name: str(value) for name, value in vars(self.args).items()}}

    def load_state_dict(self, state: dict) -> None:
        self.weight, self.step = state["model"]["weight"], state["step"]

    def train_one_step(self) -> None:
        self.step += 1
        self.weight += 1


def names(folder: pathlib.Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def train(state: FakeState, saver: Checkpointer, steps: int) -> None:
    for _ in range(steps):
        state.train_one_step()
        saver.step_done()


def test_saves_every_save_every_steps_and_the_last_step_keeping_the_newest(one_rank, tmp_path):
    state = FakeState(tmp_path, save_every=3, max_steps=7, keep=2)
    with Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 7)
        assert names(tmp_path) == [".lock", "step_000003.pt", "step_000006.pt"]
        saver.finish()
    assert names(tmp_path) == ["step_000006.pt", "step_000007.pt"]  # --keep 2, and the lock gone with the job


def test_the_last_step_is_saved_once_when_the_interval_saved_it(one_rank, tmp_path, monkeypatch):
    writes: list[str] = []
    write = checkpointer.save_checkpoint_atomically
    monkeypatch.setattr(checkpointer, "save_checkpoint_atomically",
                        lambda state, path: (writes.append(path.name), write(state, path)))
    state = FakeState(tmp_path, save_every=3, max_steps=6, keep=5)
    with Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 6)
        saver.finish()
    assert writes == ["step_000003.pt", "step_000006.pt"]


def test_zero_steps_save_the_start_and_save_every_0_saves_only_the_end(one_rank, tmp_path):
    state = FakeState(tmp_path / "zero", max_steps=0)
    with Checkpointer(state) as saver:
        saver.resume()
        saver.finish()
    state = FakeState(tmp_path / "end", save_every=0, max_steps=5)
    with Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 5)
        saver.finish()
    assert names(tmp_path / "zero") == ["step_000000.pt"] and names(tmp_path / "end") == ["step_000005.pt"]


def test_resume_restores_the_newest_state_and_does_not_save_it_again(one_rank, tmp_path, capsys):
    first = FakeState(tmp_path, save_every=2, max_steps=4)
    with Checkpointer(first) as saver:
        saver.resume()
        train(first, saver, 4)
        saver.finish()
    again = FakeState(tmp_path, save_every=2, max_steps=4)
    with Checkpointer(again) as saver:
        saver.resume()
        assert again.step == 4 and torch.equal(again.weight, torch.full((4,), 4.0))
        saver.finish()  # nothing trained since the checkpoint: nothing written
    assert names(tmp_path) == ["step_000002.pt", "step_000004.pt"]
    resumed = f"resumed from {tmp_path}/step_000004.pt: step 4, epoch 0, 32 samples into the epoch"
    assert resumed in capsys.readouterr().out


def test_a_checkpoint_of_another_model_refuses_the_start_with_status_2(one_rank, tmp_path):
    with Checkpointer(FakeState(tmp_path, max_steps=0)) as saver:
        saver.resume()
        saver.finish()
    with Checkpointer(FakeState(tmp_path, num_classes=5)) as saver, pytest.raises(CheckpointFailure) as failure:
        saver.resume()
    assert failure.value.status == 2 and "(--num-classes 10; now --num-classes 5)" in str(failure.value)


class FakeSaver:
    """The background saver's interface: a write in flight until the test says it is done everywhere."""

    def __init__(self, is_main: bool, *, control_group: object, timeout_s: float) -> None:
        self.log: list[str] = []
        self.pending: PendingSave | None = None
        self.written_everywhere = False

    def start(self, state: dict, path: pathlib.Path) -> None:
        assert self.pending is None, "a second save started while one was in flight"
        self.log.append(f"start {path.name}")
        self.pending = PendingSave(path, path, state, upload=None, started=0.0)

    def done_everywhere(self) -> bool:
        return self.pending is not None and self.written_everywhere

    def finish(self) -> PendingSave | None:
        pending, self.pending = self.pending, None
        if pending:
            pending.path.mkdir()  # what make_visible does, in short
            self.log.append(f"finish {pending.path.name}")
        return pending

    def close(self) -> None:
        self.log.append("close")


@pytest.fixture
def fake_saver(monkeypatch) -> Iterator[list[FakeSaver]]:
    made: list[FakeSaver] = []

    def make(*args: object, **kwargs: object) -> FakeSaver:
        made.append(FakeSaver(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(checkpointer, "BackgroundSaver", make)
    yield made


def test_background_saves_finish_one_at_a_time_and_the_end_saves_synchronously(one_rank, tmp_path, fake_saver,
                                                                                monkeypatch):
    synchronous: list[str] = []
    monkeypatch.setattr(checkpointer, "save_sharded_checkpoint",
                        lambda state, *, path, is_main, group: (synchronous.append(path.name), path.mkdir()))
    state = FakeState(tmp_path, parallel="fsdp", save_every=2, max_steps=7, keep=5)
    with Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 3)  # step 2 starts a save; nobody has written it yet
        fake_saver[0].written_everywhere = True
        train(state, saver, 1)  # step 4: the loop reports step 2 first, then starts step 4
        fake_saver[0].written_everywhere = False
        train(state, saver, 3)  # step 6 finishes step 4 itself before it starts: one in flight at most
        saver.finish()  # step 7: the save in flight first, then the last step, synchronously
    assert fake_saver[0].log == ["start step_000002", "finish step_000002", "start step_000004",
                                 "finish step_000004", "start step_000006", "finish step_000006", "close"]
    assert synchronous == ["step_000007"]


def test_a_crash_mid_run_still_closes_the_saver_and_frees_the_folder(one_rank, tmp_path, fake_saver):
    state = FakeState(tmp_path, parallel="fsdp")
    with pytest.raises(RuntimeError), Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 2)
        raise RuntimeError("a step failed")
    assert fake_saver[0].log[-1] == "close" and ".lock" not in names(tmp_path)


def test_a_second_job_in_the_folder_is_refused_with_one_line_naming_the_first(one_rank, tmp_path):
    with Checkpointer(FakeState(tmp_path)) as first:
        first.resume()
        with Checkpointer(FakeState(tmp_path)) as second, pytest.raises(CheckpointFailure) as refusal:
            second.resume()
        assert refusal.value.status == 2
        message = str(refusal.value)
        assert message.startswith(f"--ckpt-dir {tmp_path} is in use by another training job (pid {os.getpid()} "
                                  f"on {socket.gethostname()}, since "), message
        assert message.endswith("let it finish or stop it, or give this job another --ckpt-dir") and "\n" not in message
    with Checkpointer(FakeState(tmp_path)) as third:  # the first ended: the folder is free again
        third.resume()


def test_temporaries_of_crashed_saves_go_at_the_start_and_pruning_never_touches_a_live_one(one_rank, tmp_path):
    tmp_path.joinpath(".step_000050.pt.ab12cd34.tmp").write_bytes(b"a crashed save")
    tmp_path.joinpath(".step_000060.ab12cd34.tmp").mkdir()
    state = FakeState(tmp_path, save_every=1, keep=1)
    with Checkpointer(state) as saver:
        saver.resume()
        assert names(tmp_path) == [".lock"]
        tmp_path.joinpath(".step_000002.pt.ffff0000.tmp").write_bytes(b"a write in flight")
        train(state, saver, 3)  # three saves, each pruning
        assert names(tmp_path) == [".lock", ".step_000002.pt.ffff0000.tmp", "step_000003.pt"]


def test_a_folder_that_turns_unwritable_mid_run_ends_with_one_line_and_keeps_what_was_saved(one_rank, tmp_path,
                                                                                             monkeypatch):
    """As root (which every permission lets through) a refusing os.open stands in for `chmod a-w`;
    tests/trainer/test_lost_output.py's neighbours do it for real, as the container's user."""
    state = FakeState(tmp_path, save_every=2)
    with Checkpointer(state) as saver:
        saver.resume()
        train(state, saver, 2)
        real_open = os.open

        def refusing_open(path: object, *args: object, **kwargs: object) -> int:
            if str(path).startswith(str(tmp_path)) and not str(path).endswith(".lock"):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)
        monkeypatch.setattr(checkpoint_write.os, "open", refusing_open)
        with pytest.raises(CheckpointFailure) as failure:
            train(state, saver, 2)
    assert failure.value.status == 1
    assert str(failure.value) == (f"cannot write {tmp_path}/step_000004.pt (Permission denied); make --ckpt-dir "
                                  "writable again, or point it at another folder, and run the same command to "
                                  "resume from the last checkpoint")
    assert names(tmp_path) == ["step_000002.pt"]
