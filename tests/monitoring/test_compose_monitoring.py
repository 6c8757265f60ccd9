"""compose.monitoring.yaml and the overrides that attach trainers to it, as docker compose reads them.

No registry is reachable here, so Grafana, Prometheus and dcgm-exporter cannot be pulled and started:
what compose resolves is checked instead, including its refusal to go on without Grafana's password.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_compose_monitoring.py
"""
from __future__ import annotations

import os

import pytest

from tests.support.compose import compose, compose_config

pytestmark = pytest.mark.tier("landing")

MONITORING = ["compose.monitoring.yaml"]
GPU_PROFILE = ["--profile", "gpu"]
PASSWORD = {"GRAFANA_ADMIN_PASSWORD": "a-test-password-7c1d"}


def without_grafana_settings(env: dict[str, str]) -> dict[str, str | None]:
    """ENV, with any GRAFANA_* variable of this process's environment removed, so only the test's count."""
    return {**{name: None for name in os.environ if name.startswith("GRAFANA_")}, **env}


def resolved(files: list[str], env: dict[str, str] | None = None, options: list[str] | None = None) -> dict:
    return compose_config(files, env=without_grafana_settings(env if env is not None else PASSWORD),
                          options=options or [])


@pytest.mark.parametrize("password", [None, ""])
def test_without_a_grafana_password_compose_refuses_with_one_line_naming_the_variable(password):
    env = {} if password is None else {"GRAFANA_ADMIN_PASSWORD": password}
    result = compose("config", "--quiet", files=MONITORING, env=without_grafana_settings(env))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "set GRAFANA_ADMIN_PASSWORD in .env" in lines[0], result.stderr


def test_grafana_has_no_anonymous_access_no_sign_up_and_the_password_from_the_environment():
    grafana = resolved(MONITORING)["services"]["grafana"]
    environment = grafana["environment"]
    assert environment["GF_SECURITY_ADMIN_PASSWORD"] == PASSWORD["GRAFANA_ADMIN_PASSWORD"]
    assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert environment["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_every_port_is_on_loopback_and_every_image_is_pinned():
    services = resolved(MONITORING, options=GPU_PROFILE)["services"]
    assert set(services) == {"prometheus", "grafana", "dcgm-exporter"}
    for name, service in services.items():
        assert all(port["host_ip"] == "127.0.0.1" for port in service.get("ports", [])), name
        tag = service["image"].rsplit(":", 1)[1]
        assert tag != "latest" and any(character.isdigit() for character in tag), service["image"]


def test_dcgm_exporter_starts_only_with_the_gpu_profile_and_reserves_the_gpus():
    assert "dcgm-exporter" not in resolved(MONITORING)["services"]
    dcgm = resolved(MONITORING, options=GPU_PROFILE)["services"]["dcgm-exporter"]
    device = dcgm["deploy"]["resources"]["reservations"]["devices"][0]
    assert (device["driver"], device["capabilities"]) == ("nvidia", ["gpu"])


@pytest.mark.parametrize("files, services", [
    (["compose.multinode.yaml", "deploy/monitoring/compose.attach-multinode.yaml"], ["node0", "node1"]),
    (["compose.yaml", "compose.cpu.yaml", "deploy/monitoring/compose.attach-dev.yaml"], ["dev"]),
])
def test_the_attach_overrides_put_the_trainers_on_the_network_prometheus_scrapes(files, services):
    monitoring_network = resolved(MONITORING)["networks"]["training"]["name"]
    config = resolved(files, env={})
    for service in services:
        networks = {config["networks"][key]["name"] for key in config["services"][service]["networks"]}
        assert monitoring_network in networks, service
        assert len(networks) == 2, f"{service} lost its own network: {networks}"
