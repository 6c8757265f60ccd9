"""Process-group setup and teardown, and the stop vote that lets all ranks halt on the same step."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import math
import os
import signal
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where this process sits in the job, from torchrun's environment (or world size 1 without it): its
    ranks, the world size, the job's id (--rdzv-id; None without torchrun) and how often torchrun has
    restarted the workers (--max-restarts). The rest of the trainer takes them from here."""

    rank: int
    local_rank: int
    world_size: int
    job_id: str | None = None
    restart_count: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def read_placement() -> Placement:
    """RANK/LOCAL_RANK/WORLD_SIZE and TORCHELASTIC_* as torchrun sets them; plain `python train_ddp.py` is
    rank 0 of 1."""
    return Placement(int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)),
                     int(os.environ.get("WORLD_SIZE", 1)), job_id=os.environ.get("TORCHELASTIC_RUN_ID"),
                     restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))


def choose_device(requested: str, placement: Placement) -> torch.device:
    """This rank's device: its own GPU (LOCAL_RANK) when CUDA is used, else the CPU."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", placement.local_rank)


def start_process_group(placement: Placement, *, device: torch.device, backend: str,
                        timeout_s: int) -> dist.ProcessGroup:
    """Joins the job's process group and returns a CPU (gloo) group for control messages.

    The device is set first so NCCL binds each rank to its own GPU. Under torchrun the rendezvous is
    env:// (MASTER_ADDR/PORT); a lone process uses an in-memory store and needs no port. Control
    messages (the stop vote) go over gloo even when training uses NCCL, so checking for a signal
    never waits for the GPU to finish its queued work.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    options = {"device_id": device} if backend == "nccl" else {}
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, init_method="env://", timeout=timeout, **options)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **options)
    return dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD


# docker stop, Slurm preemption and torchrun shutting down send SIGTERM; Ctrl-C sends SIGINT; a terminal
# that closes under the trainer (a JupyterLab terminal shut down, its server gone, an SSH connection
# dropped without tmux) sends SIGHUP. Each is a request to stop, never a reason to lose the run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Slurm's --signal=USR1@SECONDS (ahead of the time limit) and the container's supervisor beside a command
# send SIGUSR1: a checkpoint now, and training goes on. By default it would end the process unsaved.
SAVE_SIGNAL = signal.SIGUSR1
# One request may come as several signals: Slurm may deliver --signal twice, and `kill -USR1` to every rank
# reaches them one after the other, some before a step's vote and some after it. A SIGUSR1 within this
# long of the checkpoint a SIGUSR1 asked for is answered by that checkpoint.
SAVE_SIGNAL_REPEATS_WITHIN_S = 10.0


class Requests(NamedTuple):
    """What the ranks agreed on at a step boundary: stop there, or save a checkpoint there first."""
    stop: bool
    save: bool


class StoppedWithNothingToSave(BaseException):
    """A stop signal while this run had trained nothing since its checkpoint or its start: in its first step,
    which under --compile is mostly compiling, for minutes on a CPU. Nothing is lost by ending at once, so
    the process does, rather than keep the stop waiting out its grace period and be killed mid-compile.
    A BaseException, as KeyboardInterrupt is: the compiler's `except Exception` must not swallow it."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class StopSignal:
    """Remembers a stop signal (STOP_SIGNALS) instead of dying of it, so training can stop at a step
    boundary, and SAVE_SIGNAL as a request for a checkpoint at the next one. The handler only records: a
    second signal while the checkpoint is being written changes nothing, and SIGUSR1s that come together
    (SAVE_SIGNAL_REPEATS_WITHIN_S) make one checkpoint. Output to a terminal that hung up is dropped by
    trainer/output.py, so the save goes on.

    Used as `with StopSignal() as stop:`, it leaves the process as it found it:
      * a stop signal the process ignores on entry stays ignored. `nohup` ignores SIGHUP so that a run
        outlives its terminal, and a shell without job control ignores SIGINT for a job it started with
        `&`; a trainer that took the signal back would end a run its user detached on purpose;
      * on exit, normal or not, every handler it replaced is put back. A notebook kernel that ran
        train_ddp.main() in a cell must end on the next SIGTERM, not record it and sit idle.
    """

    def __init__(self) -> None:
        self.received: str | None = None
        # SIGUSR1s recorded, and how many of them a vote has carried. The handler only counts up and the
        # vote only moves its own mark: a signal that lands while a vote is being built is in the next.
        self.saves_asked = 0
        self._saves_voted = 0
        self.save_answered_at = -math.inf  # time.monotonic() of the last vote that made the ranks save
        self._replaced: dict[signal.Signals, Any] = {}
        self._ends_at_once = False  # inside nothing_to_lose(): a stop signal ends the process there and then

    def __enter__(self) -> StopSignal:
        for handled in (*STOP_SIGNALS, SAVE_SIGNAL):
            if signal.getsignal(handled) is not signal.SIG_IGN:
                self._replaced[handled] = signal.signal(handled, self._record)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for stop_signal, handler in self._replaced.items():
            # None: a handler installed outside Python, which cannot be put back; the default is closest.
            signal.signal(stop_signal, signal.SIG_DFL if handler is None else handler)
        self._replaced.clear()

    def _record(self, signum: int, frame: object) -> None:
        if signum == SAVE_SIGNAL:
            if time.monotonic() - self.save_answered_at >= SAVE_SIGNAL_REPEATS_WITHIN_S:
                self.saves_asked += 1
        else:
            self.received = signal.Signals(signum).name
            if self._ends_at_once:
                self._ends_at_once = False
                raise StoppedWithNothingToSave(self.received)

    @contextlib.contextmanager
    def nothing_to_lose(self, nothing: bool) -> Iterator[None]:
        """Where NOTHING, a stop signal inside (or one already received) raises StoppedWithNothingToSave
        instead of waiting for the step boundary. Every rank gets the signal from a container's stop,
        torchrun or Slurm; a rank signalled alone ends the others' step with a connection error, and
        torchrun restarts them from the same checkpoint: nothing is lost either way."""
        if nothing and self.received:
            raise StoppedWithNothingToSave(self.received)
        self._ends_at_once = nothing
        try:
            yield
        finally:
            self._ends_at_once = False

    def agree(self, control_group: dist.ProcessGroup) -> Requests:
        """What any rank was asked, the same on every rank at the same step: all ranks stop on the step
        after any rank's stop signal, and all save on the step after any rank's SIGUSR1 (answered here)."""
        saves_asked = self.saves_asked  # read once: a later SIGUSR1 counts up past it, for the next vote
        vote = torch.tensor([1 if self.received else 0, 1 if saves_asked > self._saves_voted else 0])
        self._saves_voted = saves_asked
        dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=control_group)
        requests = Requests(stop=bool(vote[0]), save=bool(vote[1]))
        if requests.save:  # the checkpoint comes now: it answers every SIGUSR1 so far, the vote's wait's too
            self.save_answered_at = time.monotonic()
            self._saves_voted = self.saves_asked
        return requests

    @property
    def save_asked(self) -> bool:
        """Whether a SIGUSR1 came that no vote has carried yet."""
        return self.saves_asked > self._saves_voted


def freeze_what_lives_as_long_as_the_process() -> None:
    """Moves every object made so far (the imports': about 290,000, most of the process's) out of the garbage
    collector's sight: none of them is ever garbage, and finish_process_group's collection, which runs at
    every stop, then looks only at what training made. A full collection walked them all: about 0.1 s on
    an idle machine, and seconds at a stop under memory pressure, out of the stop's grace period."""
    gc.freeze()


def finish_process_group() -> None:
    """Frees what still holds the process group, then destroys it; the frozen objects are put back.

    FSDP's modules, hooks and device mesh form reference cycles that only the garbage collector frees.
    Left to the interpreter's exit, they can be torn down after the process group, and gloo then ends
    the rank with SIGABRT ("terminate called without an active exception") after a successful run.
    """
    gc.collect()
    dist.destroy_process_group()
    gc.unfreeze()  # a notebook kernel that ran main() gets its collector as it was
