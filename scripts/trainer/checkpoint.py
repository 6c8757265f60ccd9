"""Checkpoints that survive crashes: written atomically, pruned to the newest few, loaded safely.

A checkpoint is one `step_NNNNNN.pt` file. It is written under a temporary name, fsynced and then
renamed, so a reader sees either the whole previous file set or the whole new file, never half of
one. Loading uses `weights_only=True`, so a checkpoint file can never run code; everything in it is
therefore tensors and plain Python values.
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import torch

CHECKPOINT_NAME = re.compile(r"^step_(\d+)\.pt$")


def checkpoint_path(ckpt_dir: pathlib.Path, step: int) -> pathlib.Path:
    return ckpt_dir / f"step_{step:06d}.pt"


def list_checkpoints_newest_first(ckpt_dir: pathlib.Path) -> list[pathlib.Path]:
    """The complete checkpoint files in CKPT_DIR (temporary files excluded), newest step first."""
    found = [(int(match[1]), path) for path in ckpt_dir.glob("step_*.pt")
             if (match := CHECKPOINT_NAME.match(path.name))]
    return [path for _, path in sorted(found, reverse=True)]


def save_checkpoint_atomically(state: dict[str, Any], path: pathlib.Path) -> None:
    """Writes STATE to PATH so that a crash at any moment leaves either no file or a complete one."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())  # the bytes are on disk before the name points at them
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # and the rename itself survives a power loss
    finally:
        os.close(directory)


def remove_old_checkpoints(ckpt_dir: pathlib.Path, keep: int) -> None:
    """Deletes all but the KEEP newest checkpoints, and temporary files an earlier crash left behind."""
    for stale in [*list_checkpoints_newest_first(ckpt_dir)[keep:], *ckpt_dir.glob(".step_*.pt.tmp")]:
        stale.unlink(missing_ok=True)


def load_newest_checkpoint(ckpt_dir: pathlib.Path, warn: bool) -> dict[str, Any] | None:
    """Loads the newest checkpoint that reads back whole; an unreadable one is reported and skipped.

    Returns None when CKPT_DIR holds no usable checkpoint (a fresh start). WARN says whether this
    rank reports skipped files, so a multi-rank job reports each once.
    """
    for path in list_checkpoints_newest_first(ckpt_dir):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated, corrupt or foreign: any failure means "not usable"
            if warn:
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                print(f"warning: checkpoint {path} is unreadable ({reason}); trying the previous one", flush=True)
            continue
        state["path"] = str(path)
        return state
    return None


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
