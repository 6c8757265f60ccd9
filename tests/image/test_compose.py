"""`docker compose up` as a user runs it on a host without GPUs (compose.cpu.yaml), and the GPU file's shape.

    make test PYTEST_ARGS="tests/image/test_compose.py"
"""
from __future__ import annotations

import json
import os
import uuid

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.compose import CPU_FILES, compose, compose_config, service_container
from tests.support.containers import LIVE_CONTAINERS, docker, free_port
from tests.support.ssh_client import generate_key, public_line, run, ssh_session

pytestmark = pytest.mark.tier("landing")


def test_the_gpu_service_reserves_every_gpu_and_sets_the_limits_training_needs():
    service = compose_config(["compose.yaml"])["services"]["dev"]
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert (device["driver"], device["count"], device["capabilities"]) == ("nvidia", -1, ["gpu"])
    assert service["ulimits"]["memlock"] == -1 and service["ulimits"]["stack"] == 64 * 2**20  # NVIDIA's advice
    assert int(service["shm_size"]) >= 8 * 2**30
    assert service["restart"] == "unless-stopped" and service["stop_grace_period"] == "30s"
    assert [port["host_ip"] for port in service["ports"]] == ["127.0.0.1", "127.0.0.1"]
    volumes = {volume["target"]: volume["type"] for volume in service["volumes"]}
    assert volumes == {"/workspace": "bind", "/etc/ssh/host_keys": "volume", "/home/dev/.cache": "volume"}


def test_the_cpu_override_drops_the_gpu_reservation_and_the_unlimited_memlock():
    service = compose_config(CPU_FILES)["services"]["dev"]
    assert "deploy" not in service
    assert service["image"].endswith(":cpu-latest")
    # Without RDMA memlock buys nothing, and engines that cannot grant it (rootless, this CI's) refuse to start.
    assert "memlock" not in service["ulimits"] and service["ulimits"]["stack"] == 64 * 2**20


def test_the_service_bounds_its_processes_on_either_host():
    # A fork bomb fills the container's PID table, not the host's; tests/image/test_stop_at_scale.py
    # shows that the stop path still saves the work then.
    for files in (["compose.yaml"], CPU_FILES):
        assert compose_config(files)["services"]["dev"]["pids_limit"] == 8192


def test_env_example_gives_compose_no_comment_as_a_value():
    # compose reads `KEY=   # text` as the value "# text": a Jupyter "password hash" or a public token.
    service = compose_config(CPU_FILES, options=["--env-file", ".env.example"])["services"]["dev"]
    values = {**service["environment"], **service["build"].get("args", {})}
    assert values and not [name for name, value in values.items() if "#" in str(value)], values


def test_compose_reads_env_example_as_it_is():
    # That .env.example documents every variable is a map test (tests/unit/test_maps.py).
    result = compose("--env-file", ".env.example", "config", "--quiet", files=CPU_FILES)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def compose_project(image: str, tmp_path):
    name, tag = image.rsplit(":", 1)
    key = generate_key()
    env = {
        "COMPOSE_PROJECT_NAME": f"pt-test-{uuid.uuid4().hex[:8]}",
        "IMAGE": name, "TAG": tag,
        "JUPYTER_PORT": str(free_port()), "SSH_PORT": str(free_port()),
        "WORKSPACE": str(tmp_path / "workspace"),
        "SSH_AUTHORIZED_KEYS": public_line(key),
        "JUPYTER_TOKEN": "compose-test-token-9f1c2b",
        "SHM_SIZE": "1g",
        "PUID": str(os.getuid() or 1000), "PGID": str(os.getgid() or 1000),
    }
    yield env, key
    compose("down", "--volumes", "--timeout", "30", files=CPU_FILES, env=env)


@pytest.mark.tier("full")
def test_compose_up_on_a_cpu_host_gives_jupyter_and_ssh(compose_project):
    env, key = compose_project
    compose("up", "--detach", "--no-build", "--wait", files=CPU_FILES, env=env)
    container = service_container("dev", CPU_FILES, env)
    try:
        # compose can exit 0 while the service failed to start: the container's state is the truth.
        container.wait_until_healthy()
        # compose.yaml names no start interval (Podman): Docker takes the image's, two probes a second.
        probe = json.loads(docker("inspect", "--format", "{{json .Config.Healthcheck}}", container.name).stdout)
        assert probe["StartInterval"] == 5 * 10**8 and probe["Interval"] == 5 * 10**9, probe
        contents = requests.get(f"http://127.0.0.1:{env['JUPYTER_PORT']}/api/contents",
                                params={"token": env["JUPYTER_TOKEN"]}, timeout=HTTP_TIMEOUT_S)
        assert contents.status_code == 200
        with ssh_session(int(env["SSH_PORT"]), key=key) as client:
            status, out, _ = run(client, "touch /workspace/from-ssh && nproc && command -v torchrun")
        assert status == 0, out
        made = os.stat(os.path.join(env["WORKSPACE"], "from-ssh"))
        assert (made.st_uid, made.st_gid) == (int(env["PUID"]), int(env["PGID"]))
    finally:
        LIVE_CONTAINERS.pop(container.name, None)
