"""Checkpoints that survive crashes: written atomically, pruned to the newest few, loaded safely.

Two layouts, one per parallelism, and either can be resumed by either:
  * `step_NNNNNN.pt` (DDP): one file, the full state, written by rank 0.
  * `step_NNNNNN/` (FSDP): a torch.distributed.checkpoint folder in which every rank writes its own
    shards of the model and optimizer, plus `training_state.pt` (schedule, data position, RNG, config)
    from rank 0. Loading reshards to whatever the current ranks hold, so a job saved at 4 ranks
    resumes at 2, and a DDP file resumes under FSDP.
Both are written under a fresh temporary name, fsynced and then renamed in one step, so a reader sees
either a whole checkpoint or none. Files are loaded with `weights_only=True`, so a `.pt` file can never
run code. The `.metadata` file of a sharded checkpoint is a pickle, as torch.distributed.checkpoint
writes it: resume only from folders you trust.
"""
from __future__ import annotations

import errno
import os
import pathlib
import re
import secrets
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from trainer.bounded_read import open_regular_file

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


def save_checkpoint_atomically(state: dict[str, Any], path: pathlib.Path) -> None:
    """Writes STATE to PATH so that a crash at any moment leaves either no file or a complete one
    (write_atomically)."""
    write_atomically(path, lambda file: torch.save(state, file))


def write_atomically(path: pathlib.Path, write_to: Callable[[BinaryIO], object]) -> None:
    """Writes PATH through WRITE_TO so that a crash at any moment leaves either no file or a complete one.

    The temporary file gets a fresh random name and is created exclusively (O_EXCL), so a file or a
    symlink someone planted in a shared checkpoint folder is never opened, let alone written through.
    Raises CheckpointWriteError, with the partial file removed, when the disk is full or the folder
    cannot be written.
    """
    temporary = temporary_sibling(path)
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask
    except OSError as error:
        raise_if_write_error(error, path)
        raise
    try:
        with os.fdopen(descriptor, "wb") as file:
            write_to(file)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, path)
        fsync_directory(path.parent)  # and the rename itself survives a power loss
    except Exception as error:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass  # a folder that turned read-only keeps the partial file; resume never lists it
        raise_if_write_error(error, path)
        raise


class CheckpointWriteError(Exception):
    """A checkpoint could not be written for a reason the user can fix (a full disk, a folder that became
    unwritable or read-only); one line says which."""


OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # full disk, full quota, file size limit


def raise_if_write_error(error: BaseException, path: pathlib.Path) -> None:
    """Raises CheckpointWriteError when the file system refused a write of PATH (ERROR holds an OSError).

    torch.save reports a failed write as a RuntimeError of its zip writer, and torch.distributed.checkpoint
    as a CheckpointException listing every rank's error; the OSError that says why is inside them.
    """
    cause = os_error_cause(error)
    if cause is None:
        return
    if cause.errno in OUT_OF_SPACE:
        raise CheckpointWriteError(f"no space left writing {path} ({cause.strerror}); free some space "
                                   f"or point --ckpt-dir at a larger disk") from error
    raise CheckpointWriteError(f"cannot write {path} ({cause.strerror or cause}); make --ckpt-dir writable again, "
                               f"or point it at another folder, and run the same command to resume from the "
                               f"last checkpoint") from error


def os_error_cause(error: BaseException | None) -> OSError | None:
    """The OSError behind ERROR (a failed write or read): in its chain of causes, or on any rank of a
    CheckpointException (an out-of-space one first, as the likeliest to explain the others)."""
    while error is not None:
        if isinstance(error, OSError) and error.errno is not None:
            return error
        if isinstance(error, CheckpointException):
            causes = [cause for failure, _ in error.failures.values() if (cause := os_error_cause(failure))]
            return min(causes, key=lambda cause: cause.errno not in OUT_OF_SPACE, default=None)
        error = error.__cause__ or error.__context__
    return None


def fsync_directory(directory: pathlib.Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_sharded_checkpoint(state: dict[str, Any], *, path: pathlib.Path, is_main: bool,
                            group: dist.ProcessGroup) -> None:
    """Writes STATE as the folder PATH; every rank calls it and writes its own shards.

    All ranks write into a fresh temporary folder (announce_temporary_folder);
    torch.distributed.checkpoint's last step has rank 0 write the metadata once every rank has finished.
    Only then does rank 0 add the training state and rename the folder (make_visible), so a crash at
    any moment leaves no folder or a complete one. Raises CheckpointWriteError on every rank, with the
    temporary folder removed, when a disk is full or a folder cannot be written.
    """
    temporary = announce_temporary_folder(path, is_main, group)
    try:
        dcp.save({key: state[key] for key in SHARDED_KEYS}, storage_writer=ShardWriter(temporary))
    except CheckpointException as error:  # every rank gets the same one: DCP gathers all ranks' failures
        discard_failed_write(error, temporary=temporary, path=path, is_main=is_main)
    make_visible(state, temporary=temporary, path=path, is_main=is_main, group=group)


def announce_temporary_folder(path: pathlib.Path, is_main: bool, group: dist.ProcessGroup) -> pathlib.Path:
    """A fresh folder beside PATH that rank 0 creates (mkdir fails on any existing name, a planted link
    included) and names to every rank. Collective; a folder rank 0 cannot make is a CheckpointWriteError
    on every rank."""
    announced: list[Any] = [None, None]  # the folder, or the problem
    if is_main:
        temporary = temporary_sibling(path)
        try:
            os.mkdir(temporary)
            announced[0] = temporary
        except OSError as error:
            try:
                raise_if_write_error(error, path)
            except CheckpointWriteError as problem:
                announced[1] = str(problem)
            else:
                raise
    dist.broadcast_object_list(announced, src=0, group=group)
    if announced[1]:
        raise CheckpointWriteError(announced[1])
    return announced[0]


def discard_failed_write(error: BaseException, *, temporary: pathlib.Path, path: pathlib.Path,
                         is_main: bool) -> NoReturn:
    """Removes the temporary folder of a failed sharded write; raises CheckpointWriteError for a full disk
    or an unwritable folder."""
    if is_main:
        shutil.rmtree(temporary, ignore_errors=True)
    raise_if_write_error(error, path)
    raise error


def make_visible(state: dict[str, Any], *, temporary: pathlib.Path, path: pathlib.Path, is_main: bool,
                 group: dist.ProcessGroup) -> None:
    """Once every rank's shards are in TEMPORARY: rank 0 adds STATE's training state and renames the
    folder to PATH. Collective; raises CheckpointWriteError on every rank when that write fails."""
    problem: list[str | None] = [None]
    if is_main:
        try:
            try:
                save_checkpoint_atomically({key: value for key, value in state.items() if key not in SHARDED_KEYS},
                                           temporary / TRAINING_STATE_FILE)
                fsync_directory(temporary)
                os.rename(temporary, path)
                fsync_directory(path.parent)
            except OSError as error:  # the rename into a folder that became unwritable, say
                raise_if_write_error(error, path)
                raise
        except CheckpointWriteError as error:
            shutil.rmtree(temporary, ignore_errors=True)
            problem[0] = str(error).replace(str(temporary / TRAINING_STATE_FILE), str(path))
    dist.broadcast_object_list(problem, src=0, group=group)
    if problem[0]:
        raise CheckpointWriteError(problem[0])


class ShardWriter(dcp.FileSystemWriter):
    """torch.distributed.checkpoint's file writer, except that a refused write (a full disk, a folder that
    became unwritable) reaches every rank as an OSError.

    DCP sends each rank's exception to the others pickled, which drops its chain of causes; torch.save's
    zip writer reports a failed write as a RuntimeError ("unexpected pos ..."), so the OSError that says
    "no space left" or "permission denied" would be lost. Raising it directly, with its errno, keeps it.
    """

    def write_data(self, plan: Any, planner: Any) -> Any:
        try:
            return super().write_data(plan, planner)
        except Exception as error:
            cause = os_error_cause(error)
            if cause is None:
                raise
            raise OSError(cause.errno, cause.strerror) from error


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
