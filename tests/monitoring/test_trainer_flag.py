"""--prometheus-port: a bad value or a taken port ends the trainer with one line, and of a node's ranks
only local rank 0 listens (one port per node).

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_trainer_flag.py
"""
from __future__ import annotations

import re

import pytest

from tests.support.training import TINY_MODEL, trainer_command
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

TRAINER = trainer_command("--ckpt-dir /tmp/ckpt-flag", nproc=None)
TINY = f"{TINY_MODEL} --batch-size 8 --num-workers 0 --device cpu --log-every 1 --ckpt-dir /tmp/ckpt-ranks --save-every 0"
PORT = 9412


def test_a_bad_port_is_one_line_naming_the_flag(training_container):
    result = training_container.run(f"{TRAINER} --prometheus-port 65536")
    assert result.rc == 2
    assert result.stderr.strip().count("\n") == 0
    assert "--prometheus-port: must be a TCP port (1-65535)" in result.stderr, result.stderr


@pytest.mark.tier("full")
def test_a_taken_port_is_one_line_saying_what_to_do(training_container):
    training_container.run("python -m http.server 9411 --bind 127.0.0.1 >/dev/null 2>&1 & echo $! >/tmp/taken.pid")
    try:
        wait_until(lambda: training_container.run("ss -ltnH 'sport = :9411'").stdout.strip(), SETTLES_S,
                   failure="the server that takes port 9411 did not listen")
        result = training_container.run(f"{TRAINER} --prometheus-port 9411 --max-steps 1")
    finally:
        training_container.run("kill $(cat /tmp/taken.pid)")
    assert result.rc != 0
    assert result.stderr.strip().splitlines() == [
        f"--prometheus-port 9411: cannot listen on {training_container.run('hostname').stdout.strip()} "
        "(Address already in use); another trainer may hold it: pick a free port"]


@pytest.mark.tier("full")
def test_only_local_rank_0_of_a_node_serves(training_container):
    training = trainer_command(f"{TINY} --max-steps 100000 --prometheus-port {PORT}")
    training_container.run(f"{training} >/tmp/ranks.log 2>&1 & echo $! >/tmp/ranks.pid")

    def metrics_with_a_loss() -> str | None:
        exposition = training_container.run(f"curl -fs localhost:{PORT}/metrics").stdout
        return exposition if re.search(r"^trainer_loss", exposition, re.M) else None
    try:
        exposition = wait_until(metrics_with_a_loss, SETTLES_S, interval=1, failure=lambda: (
            f"no trainer_loss on port {PORT}:\n" + training_container.run("cat /tmp/ranks.log").stdout))
        # Listeners on the trainer's port and the next ones, where a server per rank would also listen.
        count = training_container.run("ss -ltnH | awk '{print $4}' | grep -cE ':941[2-9]$'").stdout.strip()
    finally:
        training_container.run("kill -TERM $(cat /tmp/ranks.pid)")  # coreutils timeout passes it to torchrun
    assert count == "1", count + training_container.run("cat /tmp/ranks.log").stdout
    assert 'rank="0"' in exposition and 'rank="1"' not in exposition
