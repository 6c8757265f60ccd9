"""Rootless Podman, for real: the image loaded once into an unprivileged user's store (.ci/install-podman.sh),
run by that user with Podman's default user namespace (the container's root is the user) and with
--userns=keep-id (the container runs as the user's own uid), as docs/runtimes.md documents.

    make test-image PYTEST_ARGS=tests/runtimes/test_rootless_podman.py
"""
from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.support.runtime_rules import SSH_OFF_LINE, TOKEN, TRAIN, checkpoints
from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S, STARTS_S
from tests.support.containers import free_port
from tests.support.podman import RootlessPodman, load_image, reset, rootless_podman
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.stopping import GRACE_PERIOD_S, endless_run_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("full")

TMUX_TRAINER = endless_run_command("tmux", 1)


@pytest.fixture(scope="module")
def podman() -> Iterator[RootlessPodman]:
    podman = rootless_podman()
    yield podman
    reset(podman)


@pytest.fixture(scope="module")
def podman_image(podman: RootlessPodman, image: str) -> str:
    """The image under test in the user's store: loaded once for the module, removed by `podman`'s reset."""
    return load_image(podman, image)


def start_services(podman: RootlessPodman, image_id: str, *options: str) -> tuple[str, int]:
    """Starts services mode detached with JupyterLab published on a free port; returns (name, port)."""
    name, port = f"pt-podman-{uuid.uuid4().hex[:8]}", free_port()
    started = podman.run("run", "--detach", "--name", name, "--shm-size=1g", "--publish", f"127.0.0.1:{port}:8888",
                         "--env", f"JUPYTER_TOKEN={TOKEN}", *options, image_id)
    assert started.returncode == 0, started.stderr
    return name, port


def logs(podman: RootlessPodman, name: str) -> str:
    result = podman.run("logs", name)
    return result.stdout + result.stderr


def wait_for_jupyter(port: int, failure: str | Callable[[], str]) -> None:
    def answers() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{port}/api/status", timeout=HTTP_TIMEOUT_S).status_code == 403
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            return False
    wait_until(answers, SETTLES_S, interval=1, failure=failure)


def check_jupyter_wants_its_token(port: int) -> None:
    url = f"http://127.0.0.1:{port}/api/status"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_rootless_podman_services_jupyter_ssh_and_podman_stop_saving_a_tmux_trainer(podman, podman_image):
    key, ssh_port = generate_key(), free_port()
    name, port = start_services(podman, podman_image, "--publish", f"127.0.0.1:{ssh_port}:2222",
                                "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}")
    try:
        wait_for_jupyter(port, lambda: f"JupyterLab did not answer:\n{logs(podman, name)[-3000:]}")
        check_jupyter_wants_its_token(port)
        with ssh_session(ssh_port, key=key) as client:
            status, out, err = run(client, f"id -un && tmux new-session -d -s train {json.dumps(TMUX_TRAINER)}")
        assert (status, out.split()) == (0, ["dev"]), err
        wait_until(lambda: podman.run("exec", name, "grep", "-q", '"step": 2,', "/tmp/tmux.jsonl").returncode == 0,
                   STARTS_S, failure=lambda: podman.run("exec", name, "cat", "/tmp/tmux.log").stdout)
        podman.run("stop", "--time", str(GRACE_PERIOD_S), name, timeout=GRACE_PERIOD_S + 30, check=True)
        state = podman.run("inspect", "--format", "{{.State.ExitCode}}", name, check=True).stdout.strip()
        copies = podman.folder()
        podman.run("cp", f"{name}:/tmp/tmux.log", str(copies / "tmux.log"), check=True)
        podman.run("cp", f"{name}:/tmp/tmux-ckpt", str(copies / "ckpt"), check=True)
    finally:
        container_logs = logs(podman, name)
        podman.run("rm", "--force", name)
    assert state == "0", container_logs[-3000:]
    log = (copies / "tmux.log").read_text()
    assert "stopped by SIGTERM at step" in log and list((copies / "ckpt").glob("*.pt")), log


def test_rootless_podman_keep_id_serves_jupyter_as_the_user_and_says_why_ssh_is_off(podman, podman_image):
    name, port = start_services(podman, podman_image, "--userns=keep-id")
    try:
        wait_for_jupyter(port, lambda: f"JupyterLab did not answer:\n{logs(podman, name)[-3000:]}")
        check_jupyter_wants_its_token(port)
        processes = podman.run("exec", name, "ps", "-eo", "uid=", check=True).stdout.split()
        container_logs = logs(podman, name)
    finally:
        podman.run("rm", "--force", name)
    assert set(processes) == {str(podman.uid)}, processes
    assert container_logs.count(SSH_OFF_LINE) == 1, container_logs


def test_rootless_podman_keep_id_trains_two_ranks_into_the_users_folder_as_the_user(podman, podman_image):
    folder = podman.folder()
    result = podman.run("run", "--rm", "--userns=keep-id", "--shm-size=1g", "--volume", f"{folder}:/workspace",
                        podman_image, "bash", "-c", f"cd /workspace && {TRAIN}")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = checkpoints(folder / "checkpoints")
    assert saved and {(path.stat().st_uid, path.stat().st_gid) for path in saved} == {(podman.uid, podman.gid)}


ROOTLESS_CALLER_LINE = "run as the container's root, which is you on the host"


@pytest.mark.parametrize("empty", [True, False], ids=["empty", "with-files"])
def test_rootless_podman_default_userns_leaves_the_users_folder_to_the_user_with_one_line(podman, podman_image,
                                                                                          empty):
    # The user's folder shows up as root's inside: re-owning it handed it to a subordinate uid on the host.
    folder = podman.folder(empty=empty)
    result = podman.run("run", "--rm", "--volume", f"{folder}:/workspace", podman_image, "true")
    assert result.returncode == 0, result.stderr
    assert (folder.stat().st_uid, folder.stat().st_gid) == (podman.uid, podman.gid)
    lines = [line for line in result.stderr.splitlines() if "/workspace" in line]
    assert len(lines) == 1 and "WARNING" not in lines[0] and ROOTLESS_CALLER_LINE in lines[0], result.stderr


def test_rootless_podman_default_userns_trains_two_ranks_into_the_users_folder_as_the_user(podman, podman_image):
    """`podman run -v ~/w:/workspace IMAGE torchrun ...` without keep-id: the checkpoint is the user's."""
    folder = podman.folder(empty=False)
    result = podman.run("run", "--rm", "--shm-size=1g", "--volume", f"{folder}:/workspace", podman_image,
                        "bash", "-c", f"{TRAIN} --ckpt-dir /workspace/ck")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = checkpoints(folder / "ck")
    assert saved and {(path.stat().st_uid, path.stat().st_gid) for path in saved} == {(podman.uid, podman.gid)}


def test_rootless_podman_default_userns_jupyterlab_writes_the_users_folder_and_says_what_ssh_cannot(
        podman, podman_image):
    folder = podman.folder(empty=False)
    name, port = start_services(podman, podman_image, "--volume", f"{folder}:/workspace")
    try:
        wait_for_jupyter(port, lambda: f"JupyterLab did not answer:\n{logs(podman, name)[-3000:]}")
        made = requests.put(f"http://127.0.0.1:{port}/api/contents/made-in-jupyter.txt", params={"token": TOKEN},
                            json={"type": "file", "format": "text", "content": "mine"}, timeout=HTTP_TIMEOUT_S)
        container_logs = logs(podman, name)
    finally:
        podman.run("rm", "--force", name)
    assert made.status_code == 201, made.text
    for path in (folder / "made-in-jupyter.txt", folder / "examples" / "ddp_quickstart.ipynb"):
        assert (path.stat().st_uid, path.stat().st_gid) == (podman.uid, podman.gid), path
    warnings = [line for line in container_logs.splitlines() if "WARNING" in line and "/workspace" in line]
    assert len(warnings) == 1 and "SSH logs in as dev" in warnings[0], container_logs


# What `make up` needs of the checkout: the Makefile reads versions from the Dockerfile.
MAKE_UP_FILES = ("Makefile", "Dockerfile", "compose.yaml", "compose.cpu.yaml", "compose.podman.yaml", "compose.cdi.yaml")
PODMAN_CPU_FILES = ("-f", "compose.yaml", "-f", "compose.cpu.yaml", "-f", "compose.podman.yaml")


def test_make_up_uses_podman_compose_where_no_docker_engine_answers_and_the_workspace_stays_the_users(
        podman, podman_image, image):
    """The test user cannot reach Docker's socket: for it, this host has Podman and no Docker engine."""
    checkout, workspace = podman.copy_of(REPO_ROOT, MAKE_UP_FILES), podman.folder()
    key, ssh_port, jupyter_port = generate_key(), free_port(), free_port()
    repository, _, tag = image.rpartition(":")
    env = {"IMAGE": repository, "TAG": tag, "WORKSPACE": str(workspace), "JUPYTER_PORT": str(jupyter_port),
           "SSH_PORT": str(ssh_port), "JUPYTER_TOKEN": TOKEN, "SSH_AUTHORIZED_KEYS": public_line(key),
           "COMPOSE_PROJECT_NAME": f"pt-podman-{uuid.uuid4().hex[:8]}"}
    try:
        up = subprocess.run(podman.as_user("make", "up", cwd=checkout, **env), capture_output=True, text=True,
                            timeout=300)
        assert up.returncode == 0 and "Podman without an NVIDIA CDI spec" in up.stdout, up.stdout + up.stderr
        wait_for_jupyter(jupyter_port, "JupyterLab started by make up did not answer")
        check_jupyter_wants_its_token(jupyter_port)
        with ssh_session(ssh_port, key=key) as client:
            status, out, err = run(client, "id -un && touch /workspace/made-over-ssh && echo made")
        assert (status, out.split()) == (0, ["dev", "made"]), err
        made = workspace / "made-over-ssh"
        assert (made.stat().st_uid, made.stat().st_gid) == (podman.uid, podman.gid)
    finally:
        subprocess.run(podman.as_user("podman-compose", *PODMAN_CPU_FILES, "down", "--volumes", cwd=checkout, **env),
                       capture_output=True, timeout=300)
