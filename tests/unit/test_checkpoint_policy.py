"""The checkpoint policy in one process, with no torchrun and no container: which checkpoints are
listed and pruned, when a sharded one counts as incomplete, which flag changes block a resume, and
where a resumed epoch's sampler begins.

    make test-unit PYTEST_ARGS=tests/unit/test_checkpoint_policy.py

tests/trainer runs the same code end to end (test_resume.py, test_checkpoint_safety.py).
"""
from __future__ import annotations

import argparse
import errno
import pathlib
import pickle
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from trainer.checkpoint_folder import (TRAINING_STATE_FILE, checkpoint_path, list_checkpoints_newest_first,
                                       remove_old_checkpoints, remove_temporaries)
from trainer.checkpoint_read import (IncompatibleCheckpoint, load_newest_checkpoint, missing_shard,
                                     read_failure)
from trainer.config import describe_model_change
from trainer.data import ResumableDistributedSampler


def make_checkpoints(ckpt_dir: pathlib.Path, steps: list[int], sharded: bool) -> None:
    for step in steps:
        path = checkpoint_path(ckpt_dir, step, sharded)
        if sharded:
            path.mkdir()
            (path / TRAINING_STATE_FILE).write_bytes(b"state")
        else:
            path.write_bytes(b"state")


def names(ckpt_dir: pathlib.Path) -> list[str]:
    return sorted(path.name for path in ckpt_dir.iterdir())


def test_checkpoints_are_listed_newest_first_files_and_folders_alike(tmp_path):
    make_checkpoints(tmp_path, [5, 100], sharded=False)
    make_checkpoints(tmp_path, [20], sharded=True)
    for stray in [".step_000200.pt.ab12cd34.tmp", "step_000300.pt.corrupt", "step_x.pt", "notes.txt"]:
        (tmp_path / stray).write_bytes(b"")
    assert [path.name for path in list_checkpoints_newest_first(tmp_path)] == [
        "step_000100.pt", "step_000020", "step_000005.pt"]


def test_pruning_keeps_the_newest_and_leaves_temporaries_to_the_start(tmp_path):
    """A temporary file may be another live job's write in flight: only the start, holding the folder's
    lock, removes them (remove_temporaries)."""
    make_checkpoints(tmp_path, [10, 20, 30], sharded=False)
    make_checkpoints(tmp_path, [40], sharded=True)
    (tmp_path / ".step_000050.pt.ab12cd34.tmp").write_bytes(b"half")
    (tmp_path / ".step_000050.ab12cd34.tmp").mkdir()
    remove_old_checkpoints(tmp_path, keep=2, saved_step=40)
    assert names(tmp_path) == [".step_000050.ab12cd34.tmp", ".step_000050.pt.ab12cd34.tmp", "step_000030.pt",
                               "step_000040"]
    remove_temporaries(tmp_path)
    assert names(tmp_path) == ["step_000030.pt", "step_000040"]


def test_pruning_never_counts_checkpoints_newer_than_the_one_just_saved(tmp_path):
    """A newer step can only be another job's or one this run could not read: counting it would
    delete the checkpoint just written."""
    make_checkpoints(tmp_path, [10, 20, 900], sharded=False)
    remove_old_checkpoints(tmp_path, keep=1, saved_step=20)
    assert names(tmp_path) == ["step_000020.pt", "step_000900.pt"]


def test_pruning_removes_a_symlink_not_what_it_points_at(tmp_path):
    ckpt_dir, outside = tmp_path / "ckpt", tmp_path / "precious"
    ckpt_dir.mkdir()
    outside.mkdir()
    (outside / "data").write_bytes(b"keep me")
    make_checkpoints(ckpt_dir, [30], sharded=False)
    (ckpt_dir / "step_000010").symlink_to(outside)
    remove_old_checkpoints(ckpt_dir, keep=1, saved_step=30)
    assert names(ckpt_dir) == ["step_000030.pt"] and (outside / "data").read_bytes() == b"keep me"


@pytest.fixture
def sharded_checkpoint(tmp_path) -> pathlib.Path:
    """A real torch.distributed.checkpoint folder, written by one process."""
    path = tmp_path / "step_000010"
    with warnings.catch_warnings():  # "torch.distributed is ... uninitialized": one process is the point
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": {"weight": torch.arange(4096.0), "bias": torch.ones(16)}}, checkpoint_id=path)
    (path / TRAINING_STATE_FILE).write_bytes(b"state")
    return path


def test_a_whole_sharded_checkpoint_misses_nothing(sharded_checkpoint):
    assert missing_shard(sharded_checkpoint) is None


def test_a_truncated_or_missing_shard_or_state_file_is_named(sharded_checkpoint):
    shard = next(sharded_checkpoint.glob("*.distcp"))
    size = shard.stat().st_size
    with open(shard, "r+b") as file:
        file.truncate(size - 1)
    assert missing_shard(sharded_checkpoint) == f"shard {shard.name} is truncated ({size - 1} of {size} bytes)"
    shard.unlink()
    assert missing_shard(sharded_checkpoint) == f"shard {shard.name} is missing"


def test_a_sharded_checkpoint_without_its_training_state_is_incomplete(sharded_checkpoint):
    (sharded_checkpoint / TRAINING_STATE_FILE).unlink()
    assert missing_shard(sharded_checkpoint) == f"{TRAINING_STATE_FILE} is missing"


def gpt_args(**changes: object) -> argparse.Namespace:
    flags = {"model": "gpt-tiny", "vocab_size": 256, "seq_len": 128, "lr": 1e-3, "num_classes": 10, "data_dir": None}
    return argparse.Namespace(**{**flags, **changes})


@pytest.mark.parametrize("now, change", [
    (gpt_args(), ""),
    (gpt_args(seq_len=64, lr=3e-4), ""),  # shapes unchanged: a resume may change these
    (gpt_args(vocab_size=512), "--vocab-size 256; now --vocab-size 512"),
    (gpt_args(model="gpt2-small", vocab_size=50304),
     "--model gpt-tiny, --vocab-size 256; now --model gpt2-small, --vocab-size 50304"),
])
def test_only_flags_that_change_parameter_shapes_block_a_resume(now, change):
    saved = {name: str(value) for name, value in vars(gpt_args()).items()}
    assert describe_model_change(saved, now) == change


def test_a_checkpoint_of_other_tensor_shapes_is_refused_not_moved_aside(tmp_path):
    path = tmp_path / "step_000010"
    with warnings.catch_warnings():  # one process, no group: the point
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": {"token_embedding.weight": torch.zeros(50304, 4)}}, checkpoint_id=path)
        torch.save({"config": {}}, path / TRAINING_STATE_FILE)
        unpadded = {"model": {"token_embedding.weight": torch.zeros(50257, 4)}}
        with pytest.raises(IncompatibleCheckpoint, match="token_embedding.weight"):
            load_newest_checkpoint(tmp_path, template=lambda: unpadded, check_config=lambda config: None,
                                   is_main=True)
    assert names(tmp_path) == ["step_000010"]  # a checkpoint of another shape is no corrupt one


@pytest.fixture
def one_process_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_resumed_epoch_continues_the_same_order_after_the_samples_already_used(one_process_group):
    dataset = list(range(64))
    sampler = ResumableDistributedSampler(dataset, seed=3)
    sampler.start_epoch(epoch=2, skip_samples=0)
    whole_epoch = list(sampler)
    resumed = ResumableDistributedSampler(dataset, seed=3)
    resumed.start_epoch(epoch=2, skip_samples=24)
    assert list(resumed) == whole_epoch[24:] and len(resumed) == 40
    resumed.start_epoch(epoch=3, skip_samples=0)
    assert sorted(resumed) == dataset and list(resumed) != whole_epoch  # the next epoch reshuffles


def chained(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize("error", [
    PermissionError(errno.EACCES, "Permission denied"),
    OSError(errno.EIO, "Input/output error"),
    chained(RuntimeError("PytorchStreamReader failed reading file data/0"), OSError(errno.ESTALE, "Stale file handle")),
], ids=["permission", "io-error", "stale-nfs-inside-torch"])
def test_a_refused_read_is_no_proof_of_damage(error):
    assert read_failure(error) is not None


@pytest.mark.parametrize("error", [
    RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory"),
    pickle.UnpicklingError("Weights only load failed"),
    KeyError("config"),
    FileNotFoundError(errno.ENOENT, "No such file or directory"),
], ids=["truncated", "unpickling", "format", "missing-part"])
def test_damage_is_what_a_read_proves(error):
    assert read_failure(error) is None


def test_a_damaged_checkpoint_is_moved_aside_and_the_previous_one_loaded(tmp_path):
    torch.save({"config": {}, "step": 5}, checkpoint_path(tmp_path, 5, sharded=False))
    checkpoint_path(tmp_path, 10, sharded=False).write_bytes(b"cut short")
    state = load_newest_checkpoint(tmp_path, template=dict, check_config=lambda config: None, is_main=True)
    assert state["step"] == 5 and names(tmp_path) == ["step_000005.pt", "step_000010.pt.corrupt"]
