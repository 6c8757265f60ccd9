"""Several nodes with compose.multinode.yaml: containers on one docker network meet through torchrun's c10d
rendezvous and train the sample trainer; a 2x2 job matches a 1x4 job, ends cleanly, and survives a lost node.

    make test FLAVOR=cpu PYTEST_ARGS="tests/deploy/test_multinode.py"
"""
from __future__ import annotations

import time

import pytest

from tests.support import SETTLES_S
from tests.deploy.helpers.multinode_compose import (ERROR_MARKERS, NODE_SERVICES, TINY_TRAINING, MultinodeJob, cpu_override,
                                     final_checkpoints_match, image_env, steps_of_checkpoints)

pytestmark = pytest.mark.tier("landing")

JOB_TIMEOUT_S = 240


@pytest.fixture
def new_job(image, tmp_path):
    """Makes MultinodeJobs of the image under test; takes every one down (volumes too) after the test."""
    jobs: list[MultinodeJob] = []
    override = cpu_override(tmp_path)

    def make(**env: str) -> MultinodeJob:
        job = MultinodeJob({**image_env(image), **env}, override)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.remove()


def assert_clean_logs(job: MultinodeJob, services=NODE_SERVICES) -> None:
    for service in services:
        log = job.logs(service)
        found = [marker for marker in ERROR_MARKERS if marker in log]
        assert not found, f"{service} logged {found} in a job that succeeded:\n{log[-5000:]}"


def test_two_nodes_of_two_ranks_train_what_one_node_of_four_ranks_trains(new_job, image):
    training = f"{TINY_TRAINING} --max-steps 8 --save-every 4 --log-every 4"
    two_by_two = new_job(NNODES="2", NPROC_PER_NODE="2", TRAIN_ARGS=training)
    one_by_four = new_job(NNODES="1", NPROC_PER_NODE="4", TRAIN_ARGS=training)
    two_by_two.start("node0", "node1")
    one_by_four.start("node0")

    assert two_by_two.wait_for_exit(NODE_SERVICES, JOB_TIMEOUT_S) == {"node0": 0, "node1": 0}, two_by_two.all_logs()
    assert one_by_four.wait_for_exit(("node0",), JOB_TIMEOUT_S) == {"node0": 0}, one_by_four.all_logs(("node0",))
    for job in (two_by_two, one_by_four):
        assert " on 4 rank(s) with " in job.logs("node0")
        assert "done: 8 steps" in job.logs("node0")
    comparison = final_checkpoints_match(image, two_by_two.checkpoint_volume(), one_by_four.checkpoint_volume())
    assert comparison["files"] == ["step_000008.pt", "step_000008.pt"], comparison
    assert comparison["allclose"], comparison
    # A clean end: neither the rendezvous host nor the other node logs an error (the shutdown race).
    assert_clean_logs(two_by_two)
    assert_clean_logs(one_by_four, ("node0",))


@pytest.mark.tier("full")
def test_a_lost_node_that_returns_rejoins_and_the_job_finishes_from_the_shared_checkpoint(new_job, image):
    # Long enough to kill node1, re-form alone, let node1 come back and re-form with it.
    job = new_job(NNODES="1:2", NPROC_PER_NODE="2", MAX_RESTARTS="3", RDZV_LAST_CALL_TIMEOUT="3",
                  TRAIN_ARGS=f"{TINY_TRAINING} --max-steps 1000 --save-every 20 --log-every 100")
    job.start("node0", "node1")
    # Counted from here on: if node1 starts over 3 s late, node0 may first train alone, then re-form with it.
    job.wait_for_log("node0", " on 4 rank(s) with ", timeout=SETTLES_S)
    log = job.logs("node0")
    formed = {ranks: log.count(f" on {ranks} rank(s) with ") for ranks in (2, 4)}
    job.wait_for_log("node0", "saved checkpoint", timeout=SETTLES_S, count=log.count("saved checkpoint") + 1)  # a 4-rank one
    job.compose("kill", "node1")  # SIGKILL: a node that vanishes, as on a hardware failure

    job.wait_for_log("node0", " on 2 rank(s) with ", timeout=SETTLES_S, count=formed[2] + 1)  # alone, from the checkpoint
    job.start("node1")
    job.wait_for_log("node0", " on 4 rank(s) with ", timeout=SETTLES_S, count=formed[4] + 1)  # re-formed with node1
    codes = job.wait_for_exit(NODE_SERVICES, JOB_TIMEOUT_S)

    assert codes == {"node0": 0, "node1": 0}, job.all_logs()
    log = job.logs("node0")
    assert log.count("resumed from") >= 2, log[-5000:]
    assert "done: 1000 steps" in log
    assert steps_of_checkpoints(image, job.checkpoint_volume())[-1] == 1000


@pytest.mark.tier("full")
def test_a_lost_node_that_never_returns_ends_the_job_with_a_clear_message_within_the_timeout(new_job):
    join_timeout_s = 20
    job = new_job(NNODES="2", NPROC_PER_NODE="2", MAX_RESTARTS="1", RDZV_JOIN_TIMEOUT=str(join_timeout_s),
                  TRAIN_ARGS=f"{TINY_TRAINING} --max-steps 100000 --save-every 20 --log-every 100")
    job.start("node0", "node1")
    job.wait_for_log("node0", "saved checkpoint", timeout=SETTLES_S)
    job.compose("kill", "node1")
    killed_at = time.monotonic()

    codes = job.wait_for_exit(("node0",), timeout=join_timeout_s + 60)
    took = time.monotonic() - killed_at
    assert codes["node0"] != 0
    assert took < join_timeout_s + 45, f"node0 ended {took:.0f} s after losing node1"
    last_line = job.logs("node0").strip().splitlines()[-1]
    assert "[torchrun_node] the job ended" in last_line and "2 node(s)" in last_line, last_line
