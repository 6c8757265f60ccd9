"""The fabric overrides of compose.multinode.yaml (compose.fabric.yaml for InfiniBand and RoCE,
compose.fabric-efa.yaml for EFA): each gives the `node` service what NCCL needs to use the fabric, as
`docker compose config` resolves it, and says what each setting is for.

    make test FLAVOR=cpu PYTEST_ARGS=tests/deploy/test_fabric.py

No machine here has InfiniBand or EFA: that NCCL then uses it is doctor's to say on the real machines
(`doctor --nccl-log`, whose verdicts tests/unit/test_doctor_nccl_log.py covers).
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

OVERRIDES = ["compose.fabric.yaml", "compose.fabric-efa.yaml"]


def resolved_node(override: str, **env: str) -> dict:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NCCL_", "FI_", "INFINIBAND_"))}
    result = subprocess.run(["docker", "compose", "-f", "compose.multinode.yaml", "-f", override,
                             "--profile", "machines", "config", "--format", "json"],
                            cwd=REPO_ROOT, env={**environment, **env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]["node"]


@pytest.mark.parametrize("override", OVERRIDES)
def test_the_node_gets_the_devices_the_capability_and_the_limits(override):
    node = resolved_node(override)
    assert node["network_mode"] == "host"
    assert [(device["source"], device["target"]) for device in node["devices"]] == [
        ("/dev/infiniband", "/dev/infiniband")]
    assert "IPC_LOCK" in node["cap_add"]
    assert node["ulimits"]["memlock"] == -1 and node["ulimits"]["stack"] == 67108864


def test_infiniband_settings_come_from_env():
    node = resolved_node("compose.fabric.yaml", NCCL_SOCKET_IFNAME="ib0", NCCL_IB_HCA="=mlx5_0:1",
                         NCCL_IB_GID_INDEX="3")
    environment = node["environment"]
    assert (environment["NCCL_SOCKET_IFNAME"], environment["NCCL_IB_HCA"], environment["NCCL_IB_GID_INDEX"]) == \
        ("ib0", "=mlx5_0:1", "3")


def test_efa_settings_select_the_ofi_plugin_and_the_efa_provider():
    environment = resolved_node("compose.fabric-efa.yaml")["environment"]
    assert environment["FI_PROVIDER"] == "efa"
    assert environment["NCCL_NET_PLUGIN"] == "ofi" and environment["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert resolved_node("compose.fabric-efa.yaml", FI_EFA_USE_DEVICE_RDMA="0")["environment"][
        "FI_EFA_USE_DEVICE_RDMA"] == "0"


@pytest.mark.parametrize("override", OVERRIDES)
def test_failing_loudly_is_opt_in(override):
    """NCCL_NET set to a network NCCL cannot use makes it fail at start; unset, compose passes nothing
    (an empty NCCL_NET would name no network at all and fail every job)."""
    assert resolved_node(override)["environment"].get("NCCL_NET") is None
    assert resolved_node(override, NCCL_NET="IB")["environment"]["NCCL_NET"] == "IB"


@pytest.mark.parametrize("override", OVERRIDES)
def test_every_setting_says_what_it_is_for(override):
    lines = (REPO_ROOT / override).read_text().splitlines()
    body = [line for line in lines[lines.index("  node:") + 1:] if line.strip() and not line.lstrip().startswith("#")]
    silent = [line.strip() for line in body if not line.rstrip().endswith(":") and "#" not in line]
    assert not silent, f"{override}: say what these are for in a trailing comment: {silent}"


@pytest.mark.parametrize("override", OVERRIDES)
def test_the_scaling_out_guide_explains_the_override(override):
    guide = (REPO_ROOT / "docs" / "scaling-out.md").read_text()
    assert override in guide
    for setting in re.findall(r"^\s+([A-Z][A-Z0-9_]+):", (REPO_ROOT / override).read_text(), re.M):
        assert setting in guide, f"docs/scaling-out.md does not say what {setting} in {override} is for"
