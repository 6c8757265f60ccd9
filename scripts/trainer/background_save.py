"""Sharded checkpoints written in the background (--async-checkpoint): the loop waits only for the copy.

torch.distributed.checkpoint.async_save copies every rank's shards to CPU memory, then writes them from
a thread while training goes on. The rules that keep this as safe as the synchronous save:
  * at most one save is in flight: starting one first finishes the one before;
  * a checkpoint becomes visible only once every rank's write completed: the shards go to a temporary
    folder, and rank 0 adds the training state and renames it (trainer.checkpoint_write.make_visible) only
    after all ranks agreed, at a step boundary, that their writes are done. A process killed mid-write
    leaves only the temporary folder, which resume never lists and the next pruning removes;
  * a failed write (a full disk) reaches every rank at that agreement, as CheckpointWriteError, on the
    step it is noticed, and the caller stops training.
The writing thread's collectives go over a gloo group of their own, never the one training uses.
"""
from __future__ import annotations

import dataclasses
import datetime
import pathlib
import time
from concurrent.futures import Future, wait
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from trainer.checkpoint_folder import SHARDED_KEYS
from trainer.checkpoint_write import (ShardWriter, announce_temporary_folder, discard_failed_write,
                                      make_visible)


@dataclasses.dataclass
class PendingSave:
    path: pathlib.Path  # the name it gets once complete
    temporary: pathlib.Path
    training_state: dict[str, Any]  # all but the shards, as at the start; rank 0 writes it in last
    upload: Future
    started: float  # perf_counter at the start, for the total time


class BackgroundSaver:
    """One rank's side of the sharded saves in flight (at most one); every rank makes one, in step."""

    def __init__(self, is_main: bool, *, control_group: dist.ProcessGroup, timeout_s: float) -> None:
        self.is_main, self.control_group = is_main, control_group
        # Collective: every rank creates it at the same point. TIMEOUT_S is the run's --pg-timeout, so a
        # rank that died mid-write ends the others' wait as it ends the training group's.
        self.write_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        # One stager for the whole run: it keeps the CPU copy's buffers from one save to the next, so only
        # the first save allocates them (pinned on GPU machines, for fast device-to-host copies). Reusing
        # them is safe because a save is finished before the next one copies into them.
        self.stager = DefaultStager(StagingOptions(use_pinned_memory=torch.cuda.is_available(),
                                                   use_shared_memory=False, use_async_staging=False,
                                                   use_non_blocking_copy=False))
        self.pending: PendingSave | None = None

    def start(self, state: dict[str, Any], path: pathlib.Path) -> None:
        """Copies STATE's shards and starts writing them to PATH; returns once the copy is done.

        A save still in flight is finished first (finish() raises if it failed); call finish() yourself
        before this to report it.
        """
        self.finish()
        temporary = announce_temporary_folder(path, self.is_main, self.control_group)
        started = time.perf_counter()
        upload = dcp.async_save({key: state[key] for key in SHARDED_KEYS}, storage_writer=ShardWriter(temporary),
                                process_group=self.write_group, async_stager=self.stager)
        training_state = {key: value for key, value in state.items() if key not in SHARDED_KEYS}
        self.pending = PendingSave(path, temporary, training_state, upload, started)

    def done_everywhere(self) -> bool:
        """Whether the save in flight has finished writing on every rank; collective while one is in flight.

        Every rank has a save in flight at the same steps, so every rank calls the all-reduce or none does.
        """
        if self.pending is None:
            return False
        done = torch.tensor([int(self.pending.upload.done())])
        dist.all_reduce(done, op=dist.ReduceOp.MIN, group=self.control_group)
        return bool(done.item())

    def finish(self) -> PendingSave | None:
        """Waits until the save in flight is written on every rank and makes it visible; returns it (None
        when nothing was in flight). Collective. Raises CheckpointWriteError, on every rank, for a full disk."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        try:
            pending.upload.result()
        except CheckpointException as error:  # every rank gets the same one: DCP gathers all ranks' failures
            discard_failed_write(error, temporary=pending.temporary, path=pending.path, is_main=self.is_main)
        make_visible(pending.training_state, temporary=pending.temporary, path=pending.path, is_main=self.is_main,
                     group=self.control_group)
        return pending

    def close(self) -> None:
        """Frees the copy's buffers; call it after the last finish(), and after a crash too (in a `finally`).

        A write a crash left in flight is waited for, not finished: it stays a temporary folder, since no
        step boundary agreed it was written everywhere. Waiting keeps the writing thread from running
        into a destroyed process group; the write group's timeout bounds the wait.
        """
        if self.pending is not None:
            wait([self.pending.upload])  # its outcome no longer matters, so it is not raised
            self.pending = None
        self.stager.close()
