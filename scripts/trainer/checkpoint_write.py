"""Writing a checkpoint so that it survives a crash: under a fresh temporary name, fsynced, then renamed
in one step, so a reader sees either a whole checkpoint or none (checkpoint_folder.py names the files).
A failed write (a full disk, a lost mount) ends in CheckpointWriteError, one line, with nothing half-made
left where a resume would look.
"""
from __future__ import annotations

import errno
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from trainer.checkpoint_folder import SHARDED_KEYS, TRAINING_STATE_FILE, temporary_sibling

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
