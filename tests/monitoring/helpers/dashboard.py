"""The Grafana dashboard of deploy/monitoring, read as Grafana reads it: rows, panels, their PromQL and
the variables, and the expressions with the variables replaced as Grafana does for "All"."""
from __future__ import annotations

import json
import re

import yaml

from tests.support import REPO_ROOT

GRAFANA_DIR = REPO_ROOT / "deploy" / "monitoring" / "grafana"
DASHBOARD_FILE = GRAFANA_DIR / "dashboards" / "training.json"
DATASOURCES_FILE = GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml"
# Variables Grafana defines itself.
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__all"}
VARIABLE = re.compile(r"\$\{?(\w+)")


def load_dashboard() -> dict:
    return json.loads(DASHBOARD_FILE.read_text())


def provisioned_datasource_uid() -> str:
    (datasource,) = yaml.safe_load(DATASOURCES_FILE.read_text())["datasources"]
    return datasource["uid"]


def panels_by_row(dashboard: dict) -> dict[str, list[dict]]:
    """Panels under each row, by the row's title (the dashboard's panel list is flat, rows included)."""
    rows: dict[str, list[dict]] = {}
    current = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], [])
        else:
            assert current is not None, f"panel {panel['title']!r} is above the first row"
            current.append(panel)
    return rows


def as_prometheus_runs_it(expr: str, rate_interval: str) -> str:
    """EXPR with every variable at "All" (its allValue .*) and $__rate_interval at RATE_INTERVAL."""
    expr = expr.replace("$__rate_interval", rate_interval)
    return VARIABLE.sub(".*", expr)


def label_values_query(definition: str) -> tuple[str, str]:
    """(series selector, label) of a Grafana variable query label_values(SELECTOR, LABEL)."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
    assert match, f"not a label_values() query: {definition}"
    return match[1], match[2]
