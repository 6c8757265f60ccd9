"""Reading the newest checkpoint safely: files are loaded with `weights_only=True`, so a `.pt` file can never
run code, and only regular files are opened; a damaged or incompatible one is told apart, agreed on by
every rank, and moved aside so the run resumes from the one before. The `.metadata` file of a sharded
checkpoint is a pickle, as torch.distributed.checkpoint writes it: resume only from folders you trust.
"""
from __future__ import annotations

import errno
import pathlib
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from trainer.bounded_read import open_regular_file
from trainer.checkpoint_folder import SHARDED_KEYS, TRAINING_STATE_FILE, list_checkpoints_newest_first
from trainer.checkpoint_write import os_error_cause  # a failed read's cause is found as a failed write's

class IncompatibleCheckpoint(Exception):
    """The newest checkpoint belongs to another model: resuming would fail or silently change the run."""


class DamagedCheckpoint(Exception):
    """A sharded checkpoint's own metadata proves part of it missing or cut short."""


class CheckpointReadError(Exception):
    """A checkpoint could not be read for a reason that is not damage (permissions, an I/O error of the
    disk or of a network mount): the files stay where they are, and one line says what to fix."""


def read_failure(error: BaseException) -> OSError | None:
    """The OSError that kept a checkpoint from being read, when it proves nothing about the checkpoint.

    Only damage moves a checkpoint aside: a format or unpickling error, a short file, a missing part. A
    refused or failed read (EACCES, EIO, ESTALE...) may be gone on the next try, and moving every
    checkpoint aside for it would restart training from step 0. A missing file inside a checkpoint
    (ENOENT) is damage: saves are renamed into place whole.
    """
    cause = os_error_cause(error)
    return cause if cause is not None and cause.errno != errno.ENOENT else None


def load_newest_checkpoint(ckpt_dir: pathlib.Path, *, template: Callable[[], dict[str, Any]],
                           check_config: Callable[[dict[str, str]], str | None],
                           is_main: bool, group: dist.ProcessGroup | None = None) -> dict[str, Any] | None:
    """The state of the newest checkpoint that reads back whole; damaged ones are moved aside and skipped.

    TEMPLATE gives the current state dict, into which a sharded checkpoint's tensors are loaded (full
    tensors under DDP, this rank's shards under FSDP: DCP reshards on the way). CHECK_CONFIG returns a
    problem when the checkpoint's config cannot be resumed with the current flags; that raises
    IncompatibleCheckpoint before any tensor is loaded. Returns None when nothing is usable (a fresh
    start). All ranks of GROUP call this together, and agree on each checkpoint before going on
    (agree_on_reading), so they resume from the same step or all refuse. Raises CheckpointReadError,
    moving nothing, when a checkpoint cannot be read but is not proven damaged.
    """
    set_aside = 0
    for path in list_checkpoints_newest_first(ckpt_dir):
        try:
            state = read_checkpoint(path, template, check_config, group)
        except (IncompatibleCheckpoint, CheckpointReadError):
            raise
        except (Exception, CheckpointException) as error:  # truncated, missing, corrupt: "not usable"
            kind, line = verdict(path, error)  # after agree_on_reading: dcp.load's, alike on every rank
            if kind == "unreadable":
                raise CheckpointReadError(line) from error
            if is_main:
                move_aside(path, error)
            set_aside += 1
            continue
        state["path"] = str(path)
        return state
    if set_aside and is_main:
        print(f"warning: no readable checkpoint left in {ckpt_dir} ({set_aside} set aside as *.corrupt): "
              f"training starts afresh at step 0", flush=True)
    return None


def cannot_read(path: pathlib.Path, cause: OSError) -> str:
    return (f"cannot read checkpoint {path} ({cause.strerror or cause}); nothing was moved: make --ckpt-dir "
            f"readable again (its permissions, the disk or the mount) and run the same command to resume")


def read_checkpoint(path: pathlib.Path, template: Callable[[], dict[str, Any]],
                    check_config: Callable[[dict[str, str]], str | None],
                    group: dist.ProcessGroup | None = None) -> dict[str, Any]:
    """PATH's state. Every rank reads it, and the ranks agree on what they found before a sharded
    checkpoint's tensors are loaded, which is collective."""
    found = None
    try:
        state = read_without_tensors(path, check_config)
    except (Exception, CheckpointException) as error:
        found = verdict(path, error)
    agree_on_reading(path, found, group)
    if not path.is_dir():
        return state
    tensors = {key: value for key, value in template().items() if key in SHARDED_KEYS}
    try:
        dcp.load(tensors, checkpoint_id=path)  # fills TENSORS in place, reading the parts this rank holds
    except CheckpointException as error:  # every rank gets the same one: DCP gathers all ranks' failures
        mismatch = size_mismatch(error)
        if mismatch:  # a whole checkpoint of another model, not a corrupt one: leave it where it is
            raise IncompatibleCheckpoint(f"{path} holds another model's tensors ({mismatch}): use the flags it "
                                         f"was saved with to resume, or another --ckpt-dir to start afresh") from None
        raise
    return {**state, **tensors}


def read_without_tensors(path: pathlib.Path, check_config: Callable[[dict[str, str]], str | None]) -> dict[str, Any]:
    """A `.pt` file's whole state, or a sharded checkpoint's training state once its shards are all there."""
    if path.is_dir():
        missing = missing_shard(path)
        if missing:
            raise DamagedCheckpoint(missing)
    # Opened as a regular file first: a FIFO planted as the newest checkpoint would hang torch.load.
    with open_regular_file(path / TRAINING_STATE_FILE if path.is_dir() else path) as file:
        state = torch.load(file, map_location="cpu", weights_only=True)
    problem = check_config(state["config"])
    if problem:
        raise IncompatibleCheckpoint(problem)
    return state


def verdict(path: pathlib.Path, error: BaseException) -> tuple[str, str]:
    """What ERROR, met reading PATH, says of it: ("incompatible" | "unreadable" | "damaged", the line)."""
    if isinstance(error, IncompatibleCheckpoint):
        return "incompatible", str(error)
    cause = read_failure(error)
    return ("unreadable", cannot_read(path, cause)) if cause is not None else ("damaged", damage(error))


def agree_on_reading(path: pathlib.Path, found: tuple[str, str] | None, group: dist.ProcessGroup | None) -> None:
    """Raises on every rank of GROUP alike when any rank could not use PATH (FOUND: this rank's verdict).
    A checkpoint of another model, or one a rank cannot read, stops all; one damaged on every rank is
    DamagedCheckpoint (moved aside, and the previous one tried); one whole on some ranks and damaged on
    others (nodes that see the folder differently) stops all too, moving nothing: skipping it on some
    ranks only would resume them from different steps, and moving it would lose a good checkpoint."""
    verdicts = [found]
    if group is not None:
        verdicts = [None] * dist.get_world_size(group)
        dist.all_gather_object(verdicts, found, group=group)
    failed = {rank: found for rank, found in enumerate(verdicts) if found}
    if not failed:
        return
    for kind, error in (("incompatible", IncompatibleCheckpoint), ("unreadable", CheckpointReadError)):
        line = next((line for found_kind, line in failed.values() if found_kind == kind), None)
        if line:
            raise error(line)
    reason = next(iter(failed.values()))[1]
    if len(failed) < len(verdicts):
        whole = [str(rank) for rank in range(len(verdicts)) if rank not in failed]
        raise CheckpointReadError(
            f"checkpoint {path} reads back whole on rank(s) {', '.join(whole)} but not on rank(s) "
            f"{', '.join(map(str, failed))} ({reason}): the nodes see --ckpt-dir differently, as a stale network "
            f"mount does; nothing was moved: make every node see the same files, then run the same command to resume")
    raise DamagedCheckpoint(reason)


def size_mismatch(error: CheckpointException) -> str | None:
    """DCP's "Size mismatch between saved ... and current ... for NAME" on any rank, or None."""
    messages = (str(failure) for failure, _ in error.failures.values())
    return next((message for message in messages if message.startswith("Size mismatch")), None)


def missing_shard(path: pathlib.Path) -> str | None:
    """What is missing or cut short in the sharded checkpoint PATH, or None when every byte is there.

    The metadata lists, for every tensor, the file, offset and length of its bytes; a file shorter than
    that is truncated. This costs a stat per file, reads no tensor, and gives every rank the same answer.
    """
    metadata = dcp.FileSystemReader(path).read_metadata()
    needed: dict[str, int] = {}
    for item in metadata.storage_data.values():
        needed[item.relative_path] = max(needed.get(item.relative_path, 0), item.offset + item.length)
    for name, size in sorted(needed.items()):
        shard = path / name
        if not shard.is_file():
            return f"shard {name} is missing"
        if shard.stat().st_size < size:
            return f"shard {name} is truncated ({shard.stat().st_size} of {size} bytes)"
    if not (path / TRAINING_STATE_FILE).is_file():
        return f"{TRAINING_STATE_FILE} is missing"
    return None


def damage(error: BaseException) -> str:
    """What is wrong with a checkpoint that ERROR says is damaged, in a few words. Never torch's own advice
    to load it with weights_only=False: that runs whatever code a damaged or planted file holds."""
    text = str(error)
    if "weights_only" in text or text.startswith("Weights only load failed"):
        # torch wraps whatever its safe loader refused (a planted object, a garbled pickle) in that advice;
        # the first sentence of the loader's own error says what it found.
        found = re.search(r"WeightsUnpickler error: ([^\n]*?)(?:\.\s|\.?$)", text, re.M)
        return "the safe loader refused it" + (f": {found.group(1).strip()}" if found else "")
    return text.splitlines()[0] if text else type(error).__name__


def move_aside(path: pathlib.Path, error: BaseException) -> None:
    """Renames a damaged checkpoint (file or folder) to PATH.corrupt, with one line saying why."""
    reason = damage(error)
    corrupt = path.with_name(f"{path.name}.corrupt")
    try:
        path.replace(corrupt)
    except OSError as refused:
        raise CheckpointReadError(f"checkpoint {path} is damaged ({reason}) and cannot be moved aside "
                                  f"({refused.strerror}): move it out of --ckpt-dir yourself, or make the folder "
                                  f"writable, and run the same command again") from None
    print(f"warning: checkpoint {path} is unreadable ({reason}); moved {path} aside to {corrupt} "
          f"and trying the previous one", flush=True)
