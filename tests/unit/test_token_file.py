"""A token file (trainer/data.py's TokenFile) on its way to a DataLoader worker: the trainer's workers come
from a fork server, so the dataset reaches each one pickled. Pickled, a memory map is a copy of the whole
file; the dataset goes by its path instead and the worker maps the file itself.

    make test-unit PYTEST_ARGS=tests/unit/test_token_file.py
"""
from __future__ import annotations

import pickle

import numpy as np
import torch

from trainer.data import TokenFile

SEQ_LEN = 8
TOKENS = 100_000  # 200 kB on disk: a pickled copy could not hide in a few hundred bytes


def test_a_token_file_is_pickled_by_its_path_and_reads_the_same_windows(tmp_path):
    path = tmp_path / "train.bin"
    np.arange(TOKENS, dtype=np.uint16).tofile(path)
    dataset = TokenFile(path, SEQ_LEN)
    pickled = pickle.dumps(dataset)
    assert len(pickled) < 1_000, f"{len(pickled)} bytes: the tokens themselves were pickled"
    copy = pickle.loads(pickled)
    assert len(copy) == len(dataset) == (TOKENS - 1) // SEQ_LEN
    for index in (0, 1, len(dataset) - 1):
        assert all(torch.equal(mine, theirs) for mine, theirs in zip(copy[index], dataset[index]))
