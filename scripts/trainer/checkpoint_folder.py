"""What a checkpoint folder holds, by name: one checkpoint per step, in either of two layouts, and the
temporary names writes go through; the newest few are kept, the rest and any leftover temporaries go.

  * `step_NNNNNN.pt` (DDP): one file, the full state, written by rank 0.
  * `step_NNNNNN/` (FSDP): a torch.distributed.checkpoint folder in which every rank writes its own
    shards of the model and optimizer, plus `training_state.pt` (schedule, data position, RNG, config)
    from rank 0. Loading reshards to whatever the current ranks hold, so a job saved at 4 ranks
    resumes at 2, and a DDP file resumes under FSDP.
Writing is checkpoint_write.py, reading checkpoint_read.py; checkpointer.py decides when.
"""
from __future__ import annotations

import pathlib
import re
import secrets
import shutil

CHECKPOINT_NAME = re.compile(r"^step_(\d+)(\.pt)?$")
SHARDED_KEYS = ("model", "optimizer")  # what every rank writes its own part of, in a sharded checkpoint
TRAINING_STATE_FILE = "training_state.pt"  # the rest of a sharded checkpoint, small, from rank 0


def checkpoint_path(ckpt_dir: pathlib.Path, step: int, sharded: bool) -> pathlib.Path:
    return ckpt_dir / (f"step_{step:06d}" if sharded else f"step_{step:06d}.pt")


def checkpoint_step(path: pathlib.Path) -> int:
    return int(CHECKPOINT_NAME.match(path.name)[1])


def list_checkpoints_newest_first(ckpt_dir: pathlib.Path) -> list[pathlib.Path]:
    """The checkpoints in CKPT_DIR, files and folders (temporary ones excluded), newest step first."""
    found = [path for path in ckpt_dir.glob("step_*") if CHECKPOINT_NAME.match(path.name)]
    return sorted(found, key=checkpoint_step, reverse=True)


def remove_old_checkpoints(ckpt_dir: pathlib.Path, keep: int, saved_step: int) -> None:
    """Deletes all but the KEEP newest checkpoints up to SAVED_STEP; temporary files are never touched
    here (remove_temporaries does that once, at the start, under the folder's lock).

    Checkpoints numbered above the one just saved are left alone: they can only be files this run could
    not read (moved aside when it started) or another job's, and counting them would delete what we saved.
    """
    ours = [path for path in list_checkpoints_newest_first(ckpt_dir) if checkpoint_step(path) <= saved_step]
    for stale in ours[keep:]:
        remove(stale)


def temporary_sibling(path: pathlib.Path) -> pathlib.Path:
    """A fresh hidden name beside PATH for a write in progress, renamed to PATH once it is whole. Its
    pattern is what remove_temporaries deletes: keep the two together."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def remove_temporaries(ckpt_dir: pathlib.Path) -> None:
    """Deletes the temporary files and folders (temporary_sibling) of saves that crashed. Only the holder
    of the folder's lock (trainer.folder_lock) may call it, before its own first save: then no live job
    owns any of them."""
    for stale in [*ckpt_dir.glob(".step_*.tmp"), *ckpt_dir.glob(".compiled_code.*.tmp")]:
        remove(stale)


def remove(path: pathlib.Path) -> None:
    """Deletes the file or folder PATH (a link, not what it points at); one that cannot go stays."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # an unwritable folder: the next save says so in one line; pruning is no reason to stop
