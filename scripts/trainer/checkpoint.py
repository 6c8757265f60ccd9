"""Checkpoints that survive crashes: written atomically, pruned to the newest few, loaded safely.

A checkpoint is one `step_NNNNNN.pt` file. It is written under a temporary name, fsynced and then
renamed, so a reader sees either the whole previous file set or the whole new file, never half of
one. Loading uses `weights_only=True`, so a checkpoint file can never run code; everything in it is
therefore tensors and plain Python values.
"""
from __future__ import annotations

import errno
import os
import pathlib
import re
import secrets
from typing import Any

import torch

CHECKPOINT_NAME = re.compile(r"^step_(\d+)\.pt$")


def checkpoint_path(ckpt_dir: pathlib.Path, step: int) -> pathlib.Path:
    return ckpt_dir / f"step_{step:06d}.pt"


def checkpoint_step(path: pathlib.Path) -> int:
    return int(CHECKPOINT_NAME.match(path.name)[1])


def list_checkpoints_newest_first(ckpt_dir: pathlib.Path) -> list[pathlib.Path]:
    """The complete checkpoint files in CKPT_DIR (temporary files excluded), newest step first."""
    found = [path for path in ckpt_dir.glob("step_*.pt") if CHECKPOINT_NAME.match(path.name)]
    return sorted(found, key=checkpoint_step, reverse=True)


def save_checkpoint_atomically(state: dict[str, Any], path: pathlib.Path) -> None:
    """Writes STATE to PATH so that a crash at any moment leaves either no file or a complete one.

    The temporary file gets a fresh random name and is created exclusively (O_EXCL), so a file or a
    symlink someone planted in a shared checkpoint folder is never opened, let alone written through.
    Raises CheckpointWriteError, with the partial file removed, when the disk is full.
    """
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask
    try:
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, path)
    except Exception as error:
        temporary.unlink(missing_ok=True)
        raise_if_out_of_space(error, path)
        raise
    fsync_directory(path.parent)  # and the rename itself survives a power loss


class CheckpointWriteError(Exception):
    """A checkpoint could not be written for a reason the user can fix (a full disk); one line says which."""


OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # full disk, full quota, file size limit


def raise_if_out_of_space(error: BaseException, path: pathlib.Path) -> None:
    """Raises CheckpointWriteError when ERROR comes from running out of space while writing PATH.

    torch.save reports a failed write as a RuntimeError of its zip writer; the OSError that says why is
    further down the chain of causes.
    """
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in OUT_OF_SPACE:
            raise CheckpointWriteError(f"no space left writing {path} ({cause.strerror}); free some space "
                                       f"or point --ckpt-dir at a larger disk") from error
        cause = cause.__cause__ or cause.__context__


def fsync_directory(directory: pathlib.Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_old_checkpoints(ckpt_dir: pathlib.Path, keep: int, saved_step: int) -> None:
    """Deletes all but the KEEP newest checkpoints up to SAVED_STEP, and temporary files of earlier crashes.

    Checkpoints numbered above the one just saved are left alone: they can only be files this run could
    not read (moved aside when it started) or another job's, and counting them would delete what we saved.
    """
    ours = [path for path in list_checkpoints_newest_first(ckpt_dir) if checkpoint_step(path) <= saved_step]
    for stale in [*ours[keep:], *ckpt_dir.glob(".step_*.tmp")]:
        stale.unlink(missing_ok=True)


def load_newest_checkpoint(ckpt_dir: pathlib.Path, is_main: bool) -> dict[str, Any] | None:
    """Loads the newest checkpoint that reads back whole; an unreadable one is moved aside and skipped.

    Returns None when CKPT_DIR holds no usable checkpoint (a fresh start). The main rank renames each
    unreadable file to NAME.corrupt (kept for a person to inspect, never counted again) and says so in
    one line; the other ranks skip it silently.
    """
    for path in list_checkpoints_newest_first(ckpt_dir):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated, corrupt or foreign: any failure means "not usable"
            if is_main:
                move_aside(path, error)
            continue
        state["path"] = str(path)
        return state
    return None


def move_aside(path: pathlib.Path, error: BaseException) -> None:
    """Renames an unreadable checkpoint to PATH.corrupt, with one line saying why."""
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    corrupt = path.with_name(f"{path.name}.corrupt")
    path.replace(corrupt)
    print(f"warning: checkpoint {path} is unreadable ({reason}); moved {path} aside to {corrupt} "
          f"and trying the previous one", flush=True)


def capture_rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's torch RNG states as tensors (the only RNGs the trainer draws from)."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
