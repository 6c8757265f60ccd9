"""The data-wait share (trainer/data.py, trainer/metrics.py): the part of a report's wall time the trainer
spent waiting for its next batch. A dataset slowed on purpose shows a high share, the synthetic data a low
one, over the same simulated compute per step.

    make test-unit PYTEST_ARGS=tests/unit/test_data_wait.py
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader

from trainer.data import MicroBatchStream, ResumableDistributedSampler, SyntheticTokens
from trainer.distributed import Placement
from trainer.metrics import MetricsReporter

STEPS = 10
BATCH_SIZE = 4
COMPUTE_S = 0.01  # what each step does besides waiting for its batch
SLOW_ITEM_S = 0.01  # the slowed dataset's time per sample: 40 ms of data per 10 ms of compute


class SlowTokens(SyntheticTokens):
    """The synthetic tokens from storage that cannot keep up."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SLOW_ITEM_S)
        return super().__getitem__(index)


def data_wait_share(dataset: SyntheticTokens) -> float:
    """The share the reporter computes for STEPS steps over DATASET, each step COMPUTE_S of work."""
    sampler = ResumableDistributedSampler(dataset, seed=0)
    stream = MicroBatchStream(DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True),
                              sampler=sampler)
    args = argparse.Namespace(max_steps=STEPS, batch_size=BATCH_SIZE, grad_accum=1, seq_len=16, metrics_file=None,
                              tensorboard_dir=None)
    reporter = MetricsReporter(args, placement=Placement(rank=0, local_rank=0, world_size=1),
                               device=torch.device("cpu"), flops_per_sample=None, peak=None)
    for _ in range(STEPS):
        stream.next_batch()
        time.sleep(COMPUTE_S)
    record = reporter.compute_record(STEPS, epoch=0, loss_sum=0.0, lr=0.0, memory_per_rank=[0],
                                     data_wait_seconds=(stream.take_wait_seconds(),))
    return record["data_wait_share"]


def test_a_slow_dataset_shows_a_high_data_wait_share_and_the_synthetic_data_a_low_one(one_rank):
    slow = data_wait_share(SlowTokens(200, seq_len=16, vocab_size=64, seed=0))
    synthetic = data_wait_share(SyntheticTokens(200, seq_len=16, vocab_size=64, seed=0))
    assert slow > 0.6, slow
    assert synthetic < 0.25, synthetic
