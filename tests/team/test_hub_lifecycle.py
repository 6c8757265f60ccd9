"""The hub of deploy/jupyterhub as shipped, over time: `docker restart` of the hub leaves the users' servers
and their training running (the hub finds them again and its proxy routes to them), and its idle culler,
with a short HUB_IDLE_TIMEOUT, stops a server with nothing running but not one whose trainer runs in a
terminal nobody watches (the image's supervisor reports that work to the hub).

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_hub_lifecycle.py"
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.containers import docker
from tests.support.hub import USERS, Hub, JupyterAccess, add_user, hub_answers, log_in, open_jupyterlab, running_hub
from tests.support.jupyter_websockets import run_in_terminal
from tests.support.training import TINY_RUN, trainer_command
from tests.support.waiting import wait_until
from tests.support import SETTLES_S, STARTS_S

pytestmark = pytest.mark.tier("full")

IDLE_TIMEOUT_S = 60
METRICS = "/workspace/lifecycle.jsonl"


@pytest.fixture(scope="module")
def hub(image, tmp_path_factory) -> Iterator[Hub]:
    with running_hub(image, tmp_path_factory.mktemp("hub"), HUB_IDLE_TIMEOUT=str(IDLE_TIMEOUT_S)) as running:
        yield running


@pytest.fixture(scope="module")
def servers(hub) -> dict[str, JupyterAccess]:
    for user in USERS:
        add_user(hub, user)
    return {user: open_jupyterlab(hub, user, log_in(hub, user)) for user in USERS}


@pytest.fixture(scope="module")
def trainer(hub, servers) -> str:
    """A trainer started in alice's terminal, left running with no browser watching; her container."""
    flags = f"{TINY_RUN} --max-steps 1000000 --save-every 1000000 --metrics-file {METRICS}"
    command = f"cd /workspace && {trainer_command(flags, nproc=1, timeout_s=None)} > /workspace/train.log 2>&1"
    run_in_terminal(servers["alice"], f'{command} & echo "trainer""-started"', "trainer-started")
    container = hub.container_of("alice")
    wait_until(lambda: steps(container)[-1:] >= [2], STARTS_S, interval=1, failure="the trainer never trained")
    return container


def steps(container: str) -> list[int]:
    """The steps alice's trainer has logged so far, in order."""
    lines = docker("exec", container, "cat", METRICS, check=False).stdout.splitlines()
    return [json.loads(line)["step"] for line in lines if '"step"' in line]


def started_at(container: str) -> str:
    return docker("container", "inspect", "--format", "{{.State.StartedAt}}", container).stdout.strip()


def test_a_hub_restart_leaves_the_servers_and_their_training_running(hub, servers, trainer):
    since = started_at(trainer)
    before = steps(trainer)[-1]
    docker("restart", hub.container, timeout=120)
    wait_until(lambda: hub_answers(hub), SETTLES_S, failure=hub.logs)
    # The restarted hub's proxy routes to alice's server again, for the session she had.
    alice = servers["alice"]
    wait_until(lambda: alice.get("api/status").status_code == 200, SETTLES_S, interval=1, failure=hub.logs)
    wait_until(lambda: steps(trainer)[-1] > before + 2, SETTLES_S, interval=1, failure="the trainer stopped training")
    assert started_at(trainer) == since, "alice's container was restarted"
    logged = steps(trainer)
    assert logged == sorted(set(logged)), f"the trainer started over: {logged}"


def test_the_culler_stops_an_idle_server_but_not_one_whose_trainer_runs(hub, servers, trainer):
    # From here on nobody uses alice's server: only her trainer runs.
    idle_since = time.monotonic()
    bobs = hub.container_of("bob")
    # bob's server has had nothing to do since its page loaded; the culler looks every timeout/4.
    wait_until(lambda: docker("container", "inspect", bobs, check=False).returncode != 0,
               IDLE_TIMEOUT_S * 3, interval=2, failure=lambda: "the culler left bob's idle server: " + hub.logs())
    # Past the timeout and two of the culler's rounds with alice idle too, but for her trainer.
    time.sleep(max(0.0, idle_since + IDLE_TIMEOUT_S * 1.5 + 15 - time.monotonic()))
    before = steps(trainer)[-1]
    wait_until(lambda: steps(trainer)[-1] > before + 2, SETTLES_S, interval=1, failure="the trainer stopped training")
    assert docker("container", "inspect", "--format", "{{.State.Running}}", trainer).stdout.strip() == "true", \
        "the culler stopped alice's server while her trainer ran: " + hub.logs()
