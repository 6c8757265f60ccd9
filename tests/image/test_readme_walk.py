"""The README walked as a user walks it, from a clean copy of the repository: "Quick start" (cp
.env.example .env, a key in .env, make up) and "Connecting" (ssh, tmux, the torchrun line), then
`docker stop`. The commands are read from README.md, so when the README changes, this test follows.

Two departures, both forced: the image under test is given as IMAGE/TAG in .env instead of being built
by `make build`, and the host ports are free ones, since other tests run beside this one.

    make test-image PYTEST_ARGS="tests/image/test_readme_walk.py"
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, STARTS_S
from tests.support.compose import CPU_FILES, compose, service_container
from tests.support.containers import LIVE_CONTAINERS, docker, free_port
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

README = (REPO_ROOT / "README.md").read_text()
CPU_HOST_NPROC = "--nproc-per-node=2"  # what the README says to use on a host without GPUs


def readme_code_block(after_heading: str, marker: str = "") -> list[str]:
    """The lines of the first ```bash block after AFTER_HEADING (and after MARKER, when given)."""
    section = README[README.index(after_heading):]
    section = section[section.index(marker):] if marker else section
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def clean_copy_of_the_repository(target) -> None:
    """Tracked and untracked-but-not-ignored files, as a fresh clone of this working tree would have."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def set_in_env_file(env_file, values: dict[str, str]) -> None:
    """Edits .env as a user does: replaces each KEY= line (or adds it)."""
    lines = env_file.read_text().splitlines()
    for key, value in values.items():
        line = f"{key}={value}"
        matches = [index for index, text in enumerate(lines) if text.startswith(f"{key}=")]
        if matches:
            lines[matches[0]] = line
        else:
            lines.append(line)
    env_file.write_text("\n".join(lines) + "\n")


@pytest.fixture
def checkout(tmp_path, image):
    copy = tmp_path / "pytorch-dev"
    clean_copy_of_the_repository(copy)
    yield copy
    compose("down", "--volumes", "--timeout", "30", files=CPU_FILES, cwd=copy)


def shell(command: str, cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MAKEFLAGS": ""}, check=False)


def test_quick_start_connecting_and_docker_stop_as_the_readme_says(checkout, image):
    quick_start = readme_code_block("## Quick start")
    assert quick_start[0] == "cp .env.example .env" and "make build up" in quick_start[1], quick_start
    assert shell(quick_start[0], checkout).returncode == 0

    key = generate_key()
    name, tag = image.rsplit(":", 1)
    ssh_port, jupyter_port = free_port(), free_port()
    set_in_env_file(checkout / ".env", {
        "SSH_AUTHORIZED_KEYS": f'"{public_line(key)}"',
        "IMAGE": name, "TAG": tag, "SSH_PORT": str(ssh_port), "JUPYTER_PORT": str(jupyter_port),
        "COMPOSE_PROJECT_NAME": f"pt-readme-{uuid.uuid4().hex[:8]}",
    })
    up = shell("make up", checkout, timeout=420)  # make up waits up to UP_WAIT_S (300 s) for a healthy container
    assert up.returncode == 0, up.stdout + up.stderr

    container = service_container("dev", CPU_FILES, cwd=checkout)
    container.wait_until_healthy()

    # Jupyter made a token of its own; nothing in the environment is a comment from .env.example.
    token = re.search(r"/\?token=([0-9a-f]{48})", container.logs()).group(1)
    assert requests.get(f"http://127.0.0.1:{jupyter_port}/api/contents", params={"token": token},
                        timeout=HTTP_TIMEOUT_S).status_code == 200
    environment = docker("inspect", "--format", "{{json .Config.Env}}", container.name).stdout
    assert "=#" not in environment and "= #" not in environment, environment

    connecting = readme_code_block("## Connecting", "**SSH.**")
    assert connecting[0].startswith("ssh -p 2222 dev@127.0.0.1") and connecting[1].startswith("tmux new -s train")
    torchrun_line = next(line for line in connecting if line.startswith("torchrun"))
    torchrun_line = torchrun_line.replace("--nproc-per-node=gpu", CPU_HOST_NPROC)
    with ssh_session(ssh_port, key=key) as client:
        # `tmux new -s train`, then the torchrun line typed into it, as a user does.
        status, _, err = run(client, "tmux new -d -s train && tmux send-keys -t train "
                                     f"'OMP_NUM_THREADS=1 {torchrun_line}' Enter")
        assert status == 0, err
        wait_until(lambda: "step 10/" in run(client, "tmux capture-pane -p -t train")[1], STARTS_S,
                   failure=lambda: "training never reached step 10:\n" + run(client, "tmux capture-pane -p -t train")[1])

    docker("stop", container.name, timeout=90)  # compose gave the container a 30 s stop timeout
    assert container.state()["ExitCode"] == 0, container.logs()
    checkpoints = sorted((checkout / "workspace" / "ckpt").glob("step_*.pt"))
    assert checkpoints, f"no checkpoint in workspace/ckpt after docker stop:\n{container.logs()}"
    assert "your processes have exited" in container.logs() and "stopped cleanly" in container.logs()
    LIVE_CONTAINERS.pop(container.name, None)


def test_the_quick_start_with_a_setting_start_up_refuses_fails_with_start_ups_line(checkout, image):
    """As root, `PUID=$(id -u)` as the quick start says is 0, which start-up refuses: `make up` says so in
    start-up's own line and exits non-zero, instead of exiting 0 over a container that restarts forever."""
    assert shell("cp .env.example .env", checkout).returncode == 0
    name, tag = image.rsplit(":", 1)
    set_in_env_file(checkout / ".env", {
        "PUID": "0", "IMAGE": name, "TAG": tag, "SSH_PORT": str(free_port()), "JUPYTER_PORT": str(free_port()),
        "COMPOSE_PROJECT_NAME": f"pt-readme-{uuid.uuid4().hex[:8]}",
    })
    up = shell("make up", checkout, timeout=420)
    assert up.returncode != 0, up.stdout + up.stderr
    said = [line for line in up.stderr.splitlines() if line.startswith("make up: ")]
    assert said[0].startswith("make up: the container did not start: [start] ERROR: PUID=0 ") and "id -u" in said[0], \
        up.stdout + up.stderr
    stopped = compose("ps", "--all", "--quiet", "dev", files=CPU_FILES, cwd=checkout).stdout.strip()
    state = json.loads(docker("inspect", "--format", "{{json .State}}", stopped).stdout)
    assert stopped and state["Status"] == "exited" and not state["Restarting"], state
