"""The trainer's stream of micro-batches (trainer/data.py's MicroBatchStream) over data too small for it:
a loader that drops the last partial batch gives no batch at all from fewer samples than one batch on
every rank, and a stream that waited for one would wait for ever. It refuses such data in one line.

    make test-unit PYTEST_ARGS=tests/unit/test_batch_stream.py
"""
from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from trainer.data import MicroBatchStream, ResumableDistributedSampler, SyntheticTokens, UnusableData

BATCH_SIZE = 4


def stream_over(samples: int) -> MicroBatchStream:
    dataset = SyntheticTokens(samples, seq_len=8, vocab_size=16, seed=0)
    sampler = ResumableDistributedSampler(dataset, seed=0)
    return MicroBatchStream(DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True),
                            sampler=sampler)


@pytest.mark.parametrize("samples", [1, BATCH_SIZE - 1])
def test_fewer_samples_than_one_batch_are_refused_with_what_to_do(one_rank, samples):
    with pytest.raises(UnusableData) as refused:
        stream_over(samples)
    message = str(refused.value)
    assert f"holds {samples} samples, fewer than one batch on every rank ({BATCH_SIZE} x 1 ranks)" in message
    assert "lower --batch-size" in message and "\n" not in message


def test_one_whole_batch_is_enough_and_each_epoch_gives_it_again(one_rank):
    stream = stream_over(BATCH_SIZE)
    for epoch in range(3):
        inputs, _ = stream.next_batch()
        assert inputs.shape[0] == BATCH_SIZE and stream.epoch == epoch
