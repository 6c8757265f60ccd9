"""Datasets and the resumable sampling that lets a restarted run continue mid-epoch.

The synthetic datasets need no download and are pure functions of (seed, sample index), so every
rank, every restart and the single-process reference see the same samples in the same order. Token
data is cut into windows of --seq-len tokens; the sampler shuffles windows, so a checkpoint's data
position is a window index, just as it is an image index for the CNN.
"""
from __future__ import annotations

import functools
import itertools
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import pathlib
import select
import signal
import threading
import time
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

NOISE_SCALE = 1.5  # large enough that the task takes some steps to learn, small enough to learn


def sample_generator(seed: int, index: int) -> torch.Generator:
    """The random stream of synthetic sample INDEX: one generator per sample, so the same index gives the
    same sample in any worker, rank, world size or run (what makes a resume exact)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index + 1)


class SyntheticImages(Dataset):
    """Images made of a per-class prototype plus Gaussian noise; labels are learnable from pixels."""

    def __init__(self, num_samples: int, *, image_size: int, num_classes: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seed = seed
        prototypes_rng = torch.Generator().manual_seed(seed)
        self.prototypes = torch.randn(num_classes, 3, image_size, image_size, generator=prototypes_rng)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = sample_generator(self.seed, index)
        label = int(torch.randint(len(self.prototypes), (1,), generator=rng))
        noise = torch.randn(self.prototypes.shape[1:], generator=rng)
        return self.prototypes[label] + NOISE_SCALE * noise, label


# Each synthetic token is the previous one plus a random step of 1 to SYNTHETIC_BRANCHES (mod the
# vocabulary): a model that learns this rule gets the loss down from ln(vocab) to ln(SYNTHETIC_BRANCHES),
# and it takes real training steps to get there.
SYNTHETIC_BRANCHES = 4


class SyntheticTokens(Dataset):
    """Windows of SEQ_LEN + 1 tokens from a deterministic random walk; input and next-token target."""

    def __init__(self, num_samples: int, *, seq_len: int, vocab_size: int, seed: int) -> None:
        self.num_samples, self.seq_len, self.vocab_size, self.seed = num_samples, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = sample_generator(self.seed, index)
        start = torch.randint(self.vocab_size, (1,), generator=rng)
        steps = torch.randint(1, SYNTHETIC_BRANCHES + 1, (self.seq_len,), generator=rng)
        tokens = torch.cat([start, start + steps.cumsum(0)]) % self.vocab_size
        return tokens[:-1], tokens[1:]


class TokenFile(Dataset):
    """Non-overlapping windows of a flat uint16 token file (nanoGPT's train.bin), memory-mapped.

    Window i is tokens [i * SEQ_LEN, (i + 1) * SEQ_LEN] (one more for the last target), so the file is
    read where the sampler points and never loaded whole; every rank maps the same file.
    """

    def __init__(self, path: pathlib.Path, seq_len: int) -> None:
        import numpy as np  # only token files need numpy, for its memory map

        self.path, self.seq_len = path, seq_len
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")

    def __reduce__(self) -> tuple:
        """A DataLoader worker gets the path and maps the file itself: pickled, the map would be a copy."""
        return TokenFile, (self.path, self.seq_len)

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.seq_len
        window = torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype("int64"))
        return window[:-1], window[1:]


class UnusableData(Exception):
    """The training data cannot be trained on; the message is the line the user reads."""


def load_image_folder(root: str, image_size: int) -> Dataset:
    """An ImageFolder dataset (one sub-folder per class) resized to IMAGE_SIZE; needs torchvision."""
    from torchvision import datasets, transforms  # optional dependency, checked in config validation

    resize = transforms.Compose([
        transforms.Resize(image_size), transforms.CenterCrop(image_size), transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    try:
        return datasets.ImageFolder(root, resize)
    except OSError as error:  # no class folder, a class folder without images, a folder it may not read
        raise UnusableData(f"--data-dir {root} is not a folder of images per class: {error}") from None


class ResumableDistributedSampler(DistributedSampler):
    """A DistributedSampler that can begin an epoch part-way through, after the batches already used."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        super().__init__(dataset, shuffle=True, seed=seed, drop_last=True)
        self.first_index = 0

    def start_epoch(self, epoch: int, skip_samples: int) -> None:
        self.set_epoch(epoch)  # reshuffles: without it every epoch repeats the same order
        self.first_index = skip_samples

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.first_index, None)

    def __len__(self) -> int:
        return self.num_samples - self.first_index


# What a worker takes as a stop: its trainer's shutdown, the stop's last step, a hang-up where it runs.
WORKER_SIGNALS = {signal.SIGHUP, signal.SIGTERM}


def make_loader(dataset: Dataset, sampler: Sampler, *, batch_size: int, num_workers: int, pin_memory: bool,
                persistent_workers: bool) -> DataLoader:
    """The trainer's DataLoader: NUM_WORKERS processes from a fork server, each in a process group of its own."""
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, num_workers=num_workers,
                      multiprocessing_context=worker_server() if num_workers > 0 else None,
                      worker_init_fn=functools.partial(set_up_worker, os.getpid()), pin_memory=pin_memory,
                      persistent_workers=persistent_workers and num_workers > 0)


def worker_server() -> multiprocessing.context.BaseContext:
    """Where the DataLoader workers come from: a fork server, started now, with torch loaded.

    Not fork() of the training process: it has threads (the process group's, the metrics server's), and a
    forked child keeps for good any lock another thread held at that instant. glibc's exit-handler lock, which
    torch's first use of many functions takes, hung a worker that way (tests/host/test_dataloader_workers.py).
    The server is a fresh process with one thread, so its forks are safe and, torch being loaded, still fast.
    As under `spawn`, the dataset reaches each worker pickled and the worker imports the main script (which
    therefore keeps its `if __name__ == "__main__":`), and workers see the environment of the server's start.
    The server and its resource tracker end once the training process and its workers have.
    """
    context = multiprocessing.get_context("forkserver")
    # torch, the slow import: the server of Python 3.11 to 3.13 ignores the trainer's sys.path and its
    # script, so a preload of this module would fail there without a word (each worker imports it itself).
    context.set_forkserver_preload(["torch"])
    # It and its resource tracker start with the signals of a hang-up and a stop blocked, a mask they keep:
    # they sit in the trainer's process group, where a terminal's hang-up or a SIGTERM to the whole group
    # would kill them under a trainer still saving (Ctrl-C they ignore themselves). Blocked in this thread
    # only, so the trainer still takes both. Each is started apart: the tracker's start unblocks SIGTERM.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
    try:
        multiprocessing.resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
        multiprocessing.forkserver.ensure_running()  # its imports overlap the model's set-up, not the first step
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    return context


def stop_worker_server() -> None:
    """Ends the fork server and its resource tracker now that the workers have ended, rather than a moment
    after this process: until then they hold its terminal and its output, so a program holding that terminal
    (a terminal server in Python) or reading that output (`| tee`) would see the trainer not quite gone."""
    if multiprocessing.active_children():  # a worker still running keeps the server: both end after us
        return
    # Private, but in every Python from 3.8 to 3.14, whose own tests stop them so: there is no public way.
    multiprocessing.forkserver._forkserver._stop()
    multiprocessing.resource_tracker._resource_tracker._stop()


def set_up_worker(trainer: int, worker_id: int) -> None:
    """DataLoader worker init: the worker leaves the trainer's process group and ends with the trainer.

    Ctrl-C, and any signal sent to the whole process group (`kill -- -PGID`, an init that forwards to the
    group), then reaches only the training process, which stops at a step boundary and shuts its workers
    down itself. A worker killed by such a signal would crash the step instead.

    A worker's parent is the fork server, not the trainer, so torch's own check (has my parent changed?)
    never sees a trainer that was killed (out of memory, or by torchrun after another rank failed): its
    workers, and the server they keep alive, would run on for good. A thread here waits for the trainer's
    end instead, and ends the worker.
    """
    os.setpgrp()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_SIGNALS)  # the server's mask, not the worker's
    threading.Thread(target=exit_when_ended, args=(trainer,), name="ends with the trainer", daemon=True).start()


def exit_when_ended(pid: int) -> None:
    """Ends this process once process PID has ended (a pidfd is readable from then on)."""
    try:
        ended = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except OSError:  # no pidfd before Linux 5.3: look once a second
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(1)
        os._exit(1)
    select.select([ended], [], [])
    os._exit(1)


class MicroBatchStream:
    """Hands out micro-batches epoch after epoch and knows its position, for exact resumption.

    `epoch` and `batches_done` (micro-batches this rank consumed in the epoch) are what a checkpoint
    records; seek() to them continues with the very next batch. It also adds up the time the trainer
    waited for its batches, for the reports' data-wait share (take_wait_seconds).
    """

    def __init__(self, loader: DataLoader, *, sampler: ResumableDistributedSampler) -> None:
        if len(sampler) < loader.batch_size:  # not one whole batch an epoch: next_batch would wait for ever
            raise UnusableData(f"the training data holds {len(sampler.dataset)} samples, fewer than one batch on "
                               f"every rank ({loader.batch_size} x {sampler.num_replicas} ranks); add data or "
                               f"lower --batch-size")
        self.loader, self.sampler = loader, sampler
        self.epoch, self.batches_done = 0, 0
        self._batches: Iterator | None = None
        self._wait_seconds = 0.0

    def seek(self, epoch: int, batches_done: int) -> None:
        """The next batch is micro-batch BATCHES_DONE of EPOCH on this rank (a checkpoint's position)."""
        self.epoch, self.batches_done, self._batches = epoch, batches_done, None

    def take_wait_seconds(self) -> float:
        """The seconds spent waiting for batches since the last call."""
        waited, self._wait_seconds = self._wait_seconds, 0.0
        return waited

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        started = time.perf_counter()
        batch = self._next_batch()
        self._wait_seconds += time.perf_counter() - started
        return batch

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        while True:
            if self._batches is None:
                self.sampler.start_epoch(self.epoch, self.batches_done * self.loader.batch_size)
                self._batches = iter(self.loader)
            try:
                batch = next(self._batches)
            except StopIteration:
                self.epoch, self.batches_done, self._batches = self.epoch + 1, 0, None
                continue
            self.batches_done += 1
            return batch
