"""The one owner of a run's checkpoints: the folder's lock, resume, the save interval, background saves
in flight, pruning and the final save. The loop calls it at these points, and nowhere else:

    with Checkpointer(state) as checkpointer:  # state: a trainer.state.TrainingState
        checkpointer.resume()                  # lock --ckpt-dir, load the newest readable checkpoint
        while ...:
            if asked.save:                     # a SIGUSR1, agreed by every rank at this step
                checkpointer.save_now("why")   # a checkpoint of this step, before it is trained on
            ...one step...
            if first step and --compile and no stop waits:
                checkpointer.save_compiled_code(compiled_anything=...)  # for a warm resume
            checkpointer.step_done()           # saves every --save-every steps; reports background saves
        checkpointer.finish()                  # waits for the save in flight, saves the last step
    # closed on leaving the block, after a crash too: no write left running, the lock released

Every method is collective: all ranks call it at the same point. A checkpoint that cannot be written (a
full disk, a folder that became unwritable or read-only) raises CheckpointFailure on every rank with
the same one line, since training on without checkpoints would lose the work the next restart expects
to find. Checkpoints are files (DDP: rank 0 writes `step_N.pt`) or folders of shards (FSDP: every rank
writes, in the background with --async-checkpoint); trainer/checkpoint_write.py says how each stays
atomic, trainer/checkpoint_read.py how one is read safely. With --compile the folder also keeps the run's
compiled code (trainer/compiled_code.py), for a warm resume.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch.distributed as dist

from trainer import prometheus
from trainer.background_save import BackgroundSaver
from trainer.checkpoint_folder import (checkpoint_path, checkpoint_step, remove_old_checkpoints,
                                       remove_temporaries)
from trainer.checkpoint_read import CheckpointReadError, IncompatibleCheckpoint, load_newest_checkpoint
from trainer.checkpoint_write import CheckpointWriteError, save_checkpoint_atomically, save_sharded_checkpoint
from trainer.compiled_code import compiled_code_path, load_compiled_code, save_compiled_code
from trainer.config import describe_model_change
from trainer.folder_lock import FolderInUse, FolderLock, StrayLockFile
from trainer.state import TrainingState

T = TypeVar("T")


class CheckpointFailure(Exception):
    """Training cannot go on (or start) with this --ckpt-dir; the message is the line the user reads."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status  # 2 for a refusal at the start, 1 for a failure mid-run


class Checkpointer:
    """Saves and resumes STATE (a TrainingState) in its --ckpt-dir, as its flags say."""

    def __init__(self, state: TrainingState) -> None:
        args = state.args
        self.state, self.placement, self.group = state, state.placement, state.group
        self.ckpt_dir, self.save_every, self.keep = args.ckpt_dir, args.save_every, args.keep
        self.max_steps = args.max_steps
        self.sharded = args.parallel == "fsdp"
        self.compiling, self.compiled_code_loaded = args.compile, False
        # Sharded checkpoints are written in the background; the DDP file stays synchronous (docs/training.md).
        self.saver = (BackgroundSaver(self.placement.is_main, control_group=self.group, timeout_s=args.pg_timeout)
                      if args.async_checkpoint and self.sharded else None)
        self.lock = FolderLock(self.ckpt_dir, job_id=self.placement.job_id)
        self.last_saved_step = 0

    def resume(self) -> None:
        """Locks --ckpt-dir for this job and loads its newest readable checkpoint into the state; a fresh
        folder leaves the state at step 0. Every rank reads the checkpoint itself (a file, or the parts of a
        sharded folder it needs); the ranks then check they found the same step, which fails when
        --ckpt-dir is not shared between nodes."""
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)  # every rank at once: exist_ok makes that safe
        self.agree_on(self.take_lock, status=2, told_by_rank_0=True)
        started = time.perf_counter()
        unreadable = None
        try:
            loaded = load_newest_checkpoint(self.ckpt_dir, template=self.state.state_dict,
                                            check_config=self.resumable, is_main=self.placement.is_main,
                                            group=self.group)
        except IncompatibleCheckpoint as error:  # same answer on every rank: they read the same config
            raise CheckpointFailure(str(error), status=2) from None
        except CheckpointReadError as error:  # every rank alike (agree_on_reading): all ranks stop
            loaded, unreadable = None, str(error)
        found: list[Any] = [None] * self.placement.world_size
        dist.all_gather_object(found, (loaded["step"] if loaded else 0, unreadable), group=self.group)
        problems = [problem for _, problem in found if problem]
        if problems:
            raise CheckpointFailure(problems[0], status=2)
        found_steps = [step for step, _ in found]
        if len(set(found_steps)) > 1:
            raise CheckpointFailure(f"ranks found different checkpoints (steps {found_steps}): --ckpt-dir must be "
                                    f"shared by all nodes", status=1)
        if self.compiling:  # before anything compiles: a resume on an empty cache starts warm
            self.load_compiled_code()
        init_from = self.state.args.init_from
        if loaded is None:
            if init_from:
                self.say(f"starting from the pretrained weights of {init_from}")
            return
        self.state.load_state_dict(loaded)
        self.last_saved_step = self.state.step
        # A restarted fine-tuning job continues its own progress; the pretrained weights are only its start.
        instead = f", not from the pretrained --init-from {init_from}" if init_from else ""
        self.say(f"resumed from {loaded['path']}{instead}: step {loaded['step']}, epoch {loaded['epoch']}, "
                 f"{loaded['samples_in_epoch']} samples into the epoch, loaded in "
                 f"{time.perf_counter() - started:.3f} s")

    def step_done(self) -> None:
        """After each optimizer step: reports a background save once every rank has written it, and
        saves when the step is a multiple of --save-every."""
        if self.saver and self.saver.done_everywhere():
            self.finish_background_save()
        if self.save_every and self.state.step % self.save_every == 0:
            self.save(in_background=self.saver is not None)

    def save_now(self, why: str) -> None:
        """A checkpoint of this step, asked for by a signal (WHY), unless this step is saved already."""
        if self.state.step > self.last_saved_step:
            self.say(f"{why}: saving step {self.state.step} now")
            self.save(in_background=self.saver is not None)

    def load_compiled_code(self) -> None:
        """Every rank loads its local rank's compiled code; rank 0 says how it went, and which ranks could
        not (their own line would say the same N times)."""
        self.compiled_code_loaded, line = load_compiled_code(
            compiled_code_path(self.ckpt_dir, self.placement.local_rank), self.state.device)
        loaded: list[Any] = [None] * self.placement.world_size
        dist.all_gather_object(loaded, self.compiled_code_loaded, group=self.group)
        self.say(line)
        cold = [rank for rank, ok in enumerate(loaded) if not ok]
        if self.compiled_code_loaded and cold:
            self.say(f"compiled code: rank(s) {', '.join(map(str, cold))} found none of their own, or none they "
                     f"could use, and compile afresh")

    def save_compiled_code(self, *, compiled_anything: bool) -> None:
        """Once compilation is over (after the first step), the first node's ranks keep their compiled code
        in --ckpt-dir, one file a local rank; not when the file just loaded holds it all already."""
        if self.placement.rank != self.placement.local_rank or (self.compiled_code_loaded and not compiled_anything):
            return
        line = save_compiled_code(compiled_code_path(self.ckpt_dir, self.placement.local_rank), self.state.device)
        if line and (self.placement.is_main or "warning" in line):
            print(line, flush=True)

    def finish(self) -> None:
        """At the end of training (--max-steps or a stop signal): waits for the save in flight, then saves
        the last step unless it is saved already; 0 steps save the start (--init-from converted)."""
        if self.saver:
            self.finish_background_save()
        if self.state.step > self.last_saved_step or (self.max_steps == 0 and self.state.step == 0):
            self.save(in_background=False)
        dist.barrier(group=self.group)  # nobody leaves while rank 0 may still be pruning old checkpoints

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    def close(self) -> None:
        """Frees the background saver (a write a crash left in flight is waited for, never made visible)
        and releases the folder's lock. Call it in a `finally`, after a crash too."""
        try:
            if self.saver:
                self.saver.close()
        finally:
            self.lock.release()

    def save(self, *, in_background: bool) -> None:
        """Everything a restart needs to continue at the current step; in the background, the loop waits
        only for the copy (the previous save in flight is finished first)."""
        path = checkpoint_path(self.ckpt_dir, self.state.step, self.sharded)
        if in_background:
            self.finish_background_save()  # at most one in flight
        started = time.perf_counter()
        snapshot = self.state.state_dict()
        if in_background:
            self.agree_on(lambda: self.saver.start(snapshot, path))
            self.say(f"checkpoint {path}: training waited {time.perf_counter() - started:.3f} s for the copy; "
                     f"writing it in the background")
        elif self.sharded:  # every rank writes its shards, and every rank learns of a failure alike
            self.agree_on(lambda: save_sharded_checkpoint(snapshot, path=path, is_main=self.placement.is_main,
                                                          group=self.group))
            self.written(path, started)
        else:  # only rank 0 writes, so only rank 0 knows how the write went: it tells the others
            self.agree_on(lambda: self.placement.is_main and save_checkpoint_atomically(snapshot, path),
                          told_by_rank_0=True)  # (the other ranks' action is nothing)
            self.written(path, started)
        self.last_saved_step = self.state.step

    def finish_background_save(self) -> None:
        """Waits for the save in flight on every rank, makes it visible and reports it."""
        finished = self.agree_on(self.saver.finish)
        if finished:
            self.written(finished.path, finished.started)

    def written(self, path: Any, started: float) -> None:
        """Reports the checkpoint at PATH, whose save began at STARTED, and prunes the old ones."""
        seconds = time.perf_counter() - started
        prometheus.checkpoint_saved(seconds)
        if self.placement.is_main:
            remove_old_checkpoints(self.ckpt_dir, self.keep, checkpoint_step(path))
        self.say(f"saved checkpoint {path} in {seconds:.3f} s")

    def take_lock(self) -> None:
        """Rank 0 locks the folder for the whole job, then removes what crashed saves left: with the lock
        held, no live job can own a temporary file there."""
        if not self.placement.is_main:
            return
        try:
            self.lock.acquire()
        except (FolderInUse, StrayLockFile) as error:
            raise CheckpointWriteError(str(error)) from None
        except OSError as error:
            raise CheckpointWriteError(f"--ckpt-dir {self.ckpt_dir}: cannot create its lock file {self.lock.path} "
                                       f"({error.strerror}); choose a writable folder") from None
        remove_temporaries(self.ckpt_dir)

    def agree_on(self, action: Callable[[], T], *, status: int = 1, told_by_rank_0: bool = False) -> T | None:
        """Runs ACTION on every rank; a CheckpointWriteError becomes CheckpointFailure on every rank alike.

        Only TOLD_BY_RANK_0 communicates: after an action that only rank 0 does (it writes the one file, or
        takes the folder's lock), rank 0 broadcasts how it went. Otherwise ACTION is collective itself (a
        sharded save, the end of a background one) and fails on every rank alike, so each rank raises on
        its own and no rank waits.
        """
        problem: list[str | None] = [None]
        result = None
        try:
            result = action()
        except CheckpointWriteError as error:
            problem[0] = str(error)
        if told_by_rank_0:
            dist.broadcast_object_list(problem, src=0, group=self.group)
        if problem[0]:
            raise CheckpointFailure(problem[0], status=status)
        return result

    def resumable(self, saved_config: dict[str, str]) -> str | None:
        """Why a checkpoint saved with SAVED_CONFIG cannot be resumed with the current flags, or None."""
        change = describe_model_change(saved_config, self.state.args)
        if not change:
            return None
        return (f"--ckpt-dir {self.ckpt_dir} holds a checkpoint of another model ({change}): use the same flags "
                f"to resume, or another --ckpt-dir to start afresh")

    def say(self, line: str | None) -> None:
        if line and self.placement.is_main:
            print(line, flush=True)
