"""The file-system checks of the trainer's flags run on every rank at the same moment (issue 18, item 5):
`torchrun --nproc-per-node=8 ... --metrics-file m.jsonl` with no m.jsonl yet once died in a rank's
check with FileNotFoundError, because each rank created the missing file and removed it again.

    make test PYTEST_ARGS=tests/host/test_flag_checks_race.py

The ranks here are forked processes released by one barrier, closer together than torchrun's ranks
ever start, and the round repeats. Against the check before the fix, 11 runs of this test out of 11
failed: a rank's FileNotFoundError within the first 11 rounds, or a metrics file left behind.
"""
from __future__ import annotations

import multiprocessing
import pathlib

import pytest

from trainer.config import check_ckpt_dir, check_metrics_file

pytestmark = pytest.mark.tier("landing")

RANKS = 16
RANK_ANSWERS_S = 60  # sixteen processes importing the trainer's config on a loaded 2-core machine
ROUNDS = 20


def check_as_a_rank(barrier: multiprocessing.Barrier, results: multiprocessing.Queue, metrics_file: pathlib.Path,
                    ckpt_dir: pathlib.Path) -> None:
    barrier.wait()
    try:
        results.put(check_metrics_file(metrics_file) or check_ckpt_dir(ckpt_dir) or "ok")
    except Exception as error:  # what the racy check raised; reported rather than lost in the child
        results.put(f"{type(error).__name__}: {error}")


def test_many_ranks_check_a_metrics_file_that_does_not_exist_yet_at_once(tmp_path):
    context = multiprocessing.get_context("fork")  # the checks are imported once, as each rank has them
    for round_number in range(ROUNDS):
        metrics_file, ckpt_dir = tmp_path / f"metrics{round_number}.jsonl", tmp_path / f"ckpt{round_number}"
        barrier, results = context.Barrier(RANKS), context.Queue()
        ranks = [context.Process(target=check_as_a_rank, args=(barrier, results, metrics_file, ckpt_dir))
                 for _ in range(RANKS)]
        for rank in ranks:
            rank.start()
        answers = [results.get(timeout=RANK_ANSWERS_S) for _ in ranks]
        for rank in ranks:
            rank.join(timeout=RANK_ANSWERS_S)
        assert answers == ["ok"] * RANKS, f"round {round_number}: {sorted(set(answers))}"
        assert not metrics_file.exists()  # a check leaves nothing behind; rank 0's reporter creates it
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # no temporary file either
