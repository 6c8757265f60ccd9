"""Ranks agree on the checkpoint they resume from, or all refuse in one line
(scripts/trainer/checkpoint_read.py, agree_on_reading). Two real gloo ranks, each with its own view of the
checkpoint folder, as nodes whose network mounts disagree (a stale cache) have: one rank finds the newest
checkpoint damaged while the other reads it whole.

    make test PYTEST_ARGS=tests/host/test_checkpoint_agreement.py
"""
from __future__ import annotations

import datetime
import pathlib
import shutil

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

from trainer.checkpoint_folder import TRAINING_STATE_FILE, checkpoint_path
from trainer.checkpoint_read import CheckpointReadError, load_newest_checkpoint
from trainer.checkpoint_write import save_checkpoint_atomically

pytestmark = pytest.mark.tier("landing")

RANKS = 2
FINISHES_S = 60  # a rank that waits in a collective its peer never joins would hang until gloo gives up


def state(step: int) -> dict:
    return {"step": step, "config": {}, "model": {"weight": torch.full((4,), float(step))}}


def resume(rank: int, store: str, views: list[str], results: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=RANKS,
                            timeout=datetime.timedelta(seconds=FINISHES_S / 2))
    try:
        loaded = load_newest_checkpoint(pathlib.Path(views[rank]), template=lambda: {"model": {"weight": torch.zeros(4)}},
                                        check_config=lambda config: None, is_main=rank == 0,
                                        group=dist.group.WORLD)
        outcome = f"step {loaded['step']}" if loaded else "none"
    except CheckpointReadError as error:
        outcome = f"refused: {error}"
    pathlib.Path(results, f"rank{rank}").write_text(outcome)
    dist.destroy_process_group()


def run_two_ranks(tmp_path: pathlib.Path, views: list[pathlib.Path]) -> list[str]:
    results = tmp_path / "results"
    results.mkdir()
    context = mp.start_processes(resume, args=(str(tmp_path / "store"), [str(view) for view in views], str(results)),
                                 nprocs=RANKS, join=False, start_method="spawn")
    for process in context.processes:
        process.join(FINISHES_S)
    hung = [process.pid for process in context.processes if process.is_alive()]
    for process in context.processes:
        process.kill()
    assert not hung, f"ranks {hung} still wait after {FINISHES_S} s: they went different ways"
    return [(results / f"rank{rank}").read_text() for rank in range(RANKS)]


def views_of(tmp_path: pathlib.Path, sharded: bool) -> list[pathlib.Path]:
    """Two views of one folder holding steps 10 and 20; in the second, step 20 is cut short."""
    first, second = tmp_path / "node0", tmp_path / "node1"
    first.mkdir()
    for step in (10, 20):
        if sharded:
            path = checkpoint_path(first, step, sharded=True)
            dcp.save({"model": state(step)["model"]}, checkpoint_id=path, no_dist=True)
            torch.save({key: value for key, value in state(step).items() if key != "model"}, path / TRAINING_STATE_FILE)
        else:
            save_checkpoint_atomically(state(step), checkpoint_path(first, step, sharded=False))
    shutil.copytree(first, second)
    newest = checkpoint_path(second, 20, sharded)
    if sharded:
        shard = next(path for path in newest.iterdir() if path.suffix == ".distcp")
        shard.write_bytes(shard.read_bytes()[:8])
    else:
        newest.write_bytes(newest.read_bytes()[:100])
    return [first, second]


@pytest.mark.parametrize("sharded", [False, True], ids=["file", "sharded"])
def test_a_checkpoint_damaged_on_one_node_only_stops_every_rank_and_moves_nothing(tmp_path, sharded):
    views = views_of(tmp_path, sharded)
    outcomes = [outcome.replace(str(view), "CKPT_DIR") for outcome, view in zip(run_two_ranks(tmp_path, views), views)]
    assert outcomes[0] == outcomes[1] and outcomes[0].startswith("refused: "), outcomes  # one path on real nodes
    assert "reads back whole on rank(s) 0 but not on rank(s) 1" in outcomes[0], outcomes
    assert all(checkpoint_path(view, 20, sharded).exists() for view in views), "a checkpoint was moved"


def test_a_checkpoint_damaged_on_every_node_is_set_aside_and_all_resume_from_the_one_before(tmp_path):
    first, second = views_of(tmp_path, sharded=False)
    shutil.copy(checkpoint_path(second, 20, False), checkpoint_path(first, 20, False))
    assert run_two_ranks(tmp_path, [first, second]) == ["step 10", "step 10"]
    assert (first / "step_000020.pt.corrupt").exists()
