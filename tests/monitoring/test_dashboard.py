"""The Grafana dashboard and its provisioning, checked as files (Grafana is in no registry reachable
here): one datasource for every panel, every variable defined, a training row and a GPU row with the
panels the issue lists, and GPU panels on metric names both dcgm-exporter and gpu_exporter.py serve.
test_live_prometheus.py runs every expression against a real Prometheus.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_dashboard.py
"""
from __future__ import annotations

import re

import pytest
import yaml

from tests.support import REPO_ROOT
from tests.monitoring.helpers.dashboard import (GRAFANA_BUILTINS, GRAFANA_DIR, VARIABLE, load_dashboard, panels_by_row,
                                        provisioned_datasource_uid)

pytestmark = pytest.mark.tier("landing")

TRAINING_PANELS = {"Loss", "Throughput", "MFU", "Step time", "Step", "Time since the last checkpoint", "Restarts"}
GPU_PANELS = {"GPU utilization", "GPU memory used", "GPU temperature", "GPU power", "SM clock"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load_dashboard()


def test_every_panel_and_query_uses_the_provisioned_datasource(dashboard):
    uid = provisioned_datasource_uid()
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid, panel["title"]
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"]["uid"] == uid, variable["name"]


def test_every_variable_a_panel_uses_is_defined(dashboard):
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    texts = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    texts += [variable["definition"] for variable in dashboard["templating"]["list"]]
    used = {name for text in texts for name in VARIABLE.findall(text)}
    assert used - GRAFANA_BUILTINS <= defined, f"used but not defined: {sorted(used - GRAFANA_BUILTINS - defined)}"
    assert {"training_job", "node", "gpu_host"} <= defined  # the job and node selectors


def test_a_training_row_and_a_gpu_row_hold_the_panels_an_operator_needs(dashboard):
    rows = panels_by_row(dashboard)
    assert set(rows) == {"Training", "GPUs"}
    assert TRAINING_PANELS <= {panel["title"] for panel in rows["Training"]}
    assert GPU_PANELS <= {panel["title"] for panel in rows["GPUs"]}
    utilization = next(panel for panel in rows["GPUs"] if panel["title"] == "GPU utilization")
    steps = utilization["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert 80 in [step["value"] for step in steps], "the 80% line is missing"
    assert utilization["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_gpu_panels_use_only_names_the_in_container_exporter_serves_too(dashboard):
    served = set(re.findall(r'"(DCGM_FI_\w+)"', (REPO_ROOT / "scripts" / "gpu_exporter.py").read_text()))
    gpu_exprs = [target["expr"] for panel in panels_by_row(dashboard)["GPUs"] for target in panel["targets"]]
    used = {name for expr in gpu_exprs for name in re.findall(r"DCGM_FI_\w+", expr)}
    assert used and used <= served, f"not served by scripts/gpu_exporter.py: {sorted(used - served)}"


def test_grafana_provisions_the_dashboard_from_the_folder_compose_mounts():
    provider = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    (only,) = provider["providers"]
    grafana = yaml.safe_load((REPO_ROOT / "compose.monitoring.yaml").read_text())["services"]["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts[only["options"]["path"]] == "./deploy/monitoring/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/monitoring/grafana/provisioning"
