"""A real JupyterHub (deploy/jupyterhub: its image, its compose file, its config) with DockerSpawner and
configurable-http-proxy, spawning one container of the image under test per user. Two users sign up on
the hub's own page, its admin authorizes them, and they log in (the shipped NativeAuthenticator, with
team_authenticator.py) and work through the hub's proxy, as their browsers would.

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_jupyterhub.py"
"""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, SETTLES_S, STARTS_S
from tests.support.containers import docker
from tests.support.hub import USERS, Hub, JupyterAccess, add_user, log_in, open_jupyterlab, running_hub
from tests.support.jupyter_websockets import run_in_kernel, run_in_terminal
from tests.support.training import TINY_RUN, trainer_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("full")


@pytest.fixture(scope="module")
def hub(image, tmp_path_factory) -> Iterator[Hub]:
    with running_hub(image, tmp_path_factory.mktemp("hub")) as running:
        yield running


@pytest.fixture(scope="module")
def servers(hub) -> dict[str, JupyterAccess]:
    """Each user signed up, authorized by the admin and logged in, with their JupyterLab open."""
    for user in USERS:
        add_user(hub, user)
    return {user: open_jupyterlab(hub, user, log_in(hub, user)) for user in USERS}


def test_each_user_gets_a_container_of_the_image(hub, servers, image):
    for user in USERS:
        container = json.loads(docker("container", "inspect", hub.container_of(user)).stdout)[0]
        assert container["Config"]["Image"] == image
        assert f"JUPYTERHUB_USER={user}" in container["Config"]["Env"]
        assert container["HostConfig"]["ShmSize"] == 1024 ** 3  # what the hub's SHM_SIZE asked for
        assert container["HostConfig"]["PidsLimit"] == 8192      # HUB_PIDS_LIMIT's default
        assert list(container["NetworkSettings"]["Networks"]) == [hub.network_of(user)]
        processes = docker("exec", hub.container_of(user), "ps", "-eo", "user:12,args").stdout
        assert "jupyterhub-singleuser" in processes and "sshd" not in processes  # SSH stays off under a hub
        # The healthcheck finds the server under the hub's prefix (/user/NAME/) and port.
        wait_until(lambda: json.loads(docker("container", "inspect", "--format", "{{json .State.Health}}",
                                             hub.container_of(user)).stdout)["Status"] == "healthy",
                   SETTLES_S, interval=1, failure=f"{user}'s container did not turn healthy")


def test_a_kernel_imports_torch_as_the_hub_user(servers):
    for user, server in servers.items():
        printed = run_in_kernel(server, "import os, torch; print(os.environ['JUPYTERHUB_USER'], torch.__version__)")
        assert printed.split()[0] == user


def test_a_terminal_runs_a_two_rank_torchrun(servers):
    for server in servers.values():
        command = (f"cd $(mktemp -d) && {trainer_command(f'{TINY_RUN} --max-steps 2 --metrics-file m.jsonl', timeout_s=None)}; "
                   'echo "torchrun-exit""-$?"')
        output = run_in_terminal(server, command, "torchrun-exit-", timeout=300)
        assert "torchrun-exit-0" in output, output[-3000:]


def test_each_user_sees_only_their_own_workspace(servers):
    for user, server in servers.items():
        run_in_kernel(server, f"open('/workspace/only-{user}.txt', 'w').write('{user}')")
    for user, server in servers.items():
        listing = run_in_kernel(server, "import os; print(sorted(os.listdir('/workspace')))")
        assert f"only-{user}.txt" in listing
        assert not any(f"only-{other}.txt" in listing for other in USERS if other != user), listing


def test_one_users_cookie_or_token_cannot_reach_the_other_users_server(hub, servers):
    alice = servers["alice"]
    own = alice.get("api/contents")
    assert own.status_code == 200 and own.json()["type"] == "directory"
    bobs = alice.session.get(hub.url + "user/bob/api/contents", timeout=HTTP_TIMEOUT_S)
    assert bobs.status_code in (403, 404) or "application/json" not in bobs.headers.get("Content-Type", ""), bobs.text
    assert '"type": "directory"' not in bobs.text and '"content"' not in bobs.text
    # The token the hub gave alice's server works on alice's server only.
    env = docker("exec", hub.container_of("alice"), "printenv", "JUPYTERHUB_API_TOKEN").stdout.strip()
    headers = {"Authorization": f"token {env}"}
    assert requests.get(hub.url + "user/alice/api/contents", headers=headers, timeout=HTTP_TIMEOUT_S).status_code == 200
    assert requests.get(hub.url + "user/bob/api/contents", headers=headers, timeout=HTTP_TIMEOUT_S).status_code == 403


def test_one_users_container_cannot_reach_the_other_users_ports(hub, servers):
    bob = json.loads(docker("container", "inspect", hub.container_of("bob")).stdout)[0]
    bobs_ip = bob["NetworkSettings"]["Networks"][hub.network_of("bob")]["IPAddress"]
    connect = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)"
    # The hub's proxy reaches bob's server; alice's container reaches the hub's API, not bob's server.
    assert docker("exec", hub.container, "python3", "-c", connect, bobs_ip, "8888", check=False).returncode == 0
    assert docker("exec", hub.container_of("alice"), "python3", "-c", connect, hub.container, "8081",
                  check=False).returncode == 0
    to_bob = docker("exec", hub.container_of("alice"), "python3", "-c", connect, bobs_ip, "8888", check=False)
    assert to_bob.returncode != 0, "alice's container reached bob's server"


def test_stopping_a_server_from_the_hub_saves_a_trainer_started_in_its_terminal(hub, servers, image):
    alice = servers["alice"]
    flags = f"{TINY_RUN} --max-steps 100000 --save-every 100000 --ckpt-dir /workspace/ckpt --metrics-file /workspace/stop.jsonl"
    command = f"cd /workspace && {trainer_command(flags, timeout_s=None)} > /workspace/stop.log 2>&1"
    run_in_terminal(alice, f'{command} & echo "trainer""-started"', "trainer-started")
    container = hub.container_of("alice")
    wait_until(lambda: docker("exec", container, "grep", "-q", '"step": 2,', "/workspace/stop.jsonl",
                              check=False).returncode == 0, STARTS_S, interval=1, failure="the trainer never trained")

    hub_session = alice.session
    stopped = hub_session.delete(hub.url + "hub/api/users/alice/server", timeout=HTTP_TIMEOUT_S, headers={
        "X-XSRFToken": hub_session.cookies.get("_xsrf", path="/hub/"), "Referer": hub.url + "hub/home"})
    assert stopped.status_code in (202, 204), stopped.text
    wait_until(lambda: docker("container", "inspect", container, check=False).returncode != 0, SETTLES_S, interval=1,
               failure=lambda: "the hub did not stop alice's container: "
               + docker("container", "inspect", "--format", "{{json .State}}", container, check=False).stdout
               + docker("logs", f"{hub.run}-hub", check=False).stderr[-3000:])

    saved = docker("run", "--rm", "--volume", f"{hub.workspace_volume_of('alice')}:/workspace", image,
                   "bash", "-c", "cat /workspace/stop.log; ls /workspace/ckpt", check=False)
    assert "stopped by SIGTERM at step" in saved.stdout, saved.stdout[-3000:]
    assert ".pt" in saved.stdout, saved.stdout[-3000:]
