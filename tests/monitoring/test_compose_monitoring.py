"""compose.monitoring.yaml and the overrides that attach trainers to it, as docker compose reads them.

No registry is reachable here, so Grafana, Prometheus and dcgm-exporter cannot be pulled and started:
what compose resolves is checked instead, including its refusal to go on without Grafana's password.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_compose_monitoring.py
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support import REPO_ROOT

MONITORING = ["-f", "compose.monitoring.yaml"]
PASSWORD = {"GRAFANA_ADMIN_PASSWORD": "a-test-password-7c1d"}


def compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GRAFANA_")}
    return subprocess.run(["docker", "compose", *args], cwd=REPO_ROOT, env={**environment, **env},
                          capture_output=True, text=True, timeout=60, check=False)


def resolved(*args: str, env: dict[str, str] | None = None) -> dict:
    result = compose(*args, "config", "--format", "json", env=env if env is not None else PASSWORD)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("password", [None, ""])
def test_without_a_grafana_password_compose_refuses_with_one_line_naming_the_variable(password):
    env = {} if password is None else {"GRAFANA_ADMIN_PASSWORD": password}
    result = compose(*MONITORING, "config", "--quiet", env=env)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "set GRAFANA_ADMIN_PASSWORD in .env" in lines[0], result.stderr


def test_grafana_has_no_anonymous_access_no_sign_up_and_the_password_from_the_environment():
    grafana = resolved(*MONITORING)["services"]["grafana"]
    environment = grafana["environment"]
    assert environment["GF_SECURITY_ADMIN_PASSWORD"] == PASSWORD["GRAFANA_ADMIN_PASSWORD"]
    assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert environment["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_every_port_is_on_loopback_and_every_image_is_pinned():
    services = resolved(*MONITORING, "--profile", "gpu")["services"]
    assert set(services) == {"prometheus", "grafana", "dcgm-exporter"}
    for name, service in services.items():
        assert all(port["host_ip"] == "127.0.0.1" for port in service.get("ports", [])), name
        tag = service["image"].rsplit(":", 1)[1]
        assert tag != "latest" and any(character.isdigit() for character in tag), service["image"]


def test_dcgm_exporter_starts_only_with_the_gpu_profile_and_reserves_the_gpus():
    assert "dcgm-exporter" not in resolved(*MONITORING)["services"]
    dcgm = resolved(*MONITORING, "--profile", "gpu")["services"]["dcgm-exporter"]
    device = dcgm["deploy"]["resources"]["reservations"]["devices"][0]
    assert (device["driver"], device["capabilities"]) == ("nvidia", ["gpu"])


@pytest.mark.parametrize("files, services", [
    (["-f", "compose.multinode.yaml", "-f", "deploy/monitoring/compose.attach-multinode.yaml"], ["node0", "node1"]),
    (["-f", "compose.yaml", "-f", "compose.cpu.yaml", "-f", "deploy/monitoring/compose.attach-dev.yaml"], ["dev"]),
])
def test_the_attach_overrides_put_the_trainers_on_the_network_prometheus_scrapes(files, services):
    monitoring_network = resolved(*MONITORING)["networks"]["training"]["name"]
    config = resolved(*files, env={})
    for service in services:
        networks = {config["networks"][key]["name"] for key in config["services"][service]["networks"]}
        assert monitoring_network in networks, service
        assert len(networks) == 2, f"{service} lost its own network: {networks}"
