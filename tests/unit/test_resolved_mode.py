"""docs/how-it-runs.md's table of the modes against the line start-up prints (describe_resolved_mode in
docker/rootfs/usr/local/lib/container/start/mode.sh): every value the table names must be one the line
can say, and the line has one field per row, so the page and the log never drift apart.

    make test-unit PYTEST_ARGS=tests/unit/test_resolved_mode.py
"""
from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import REPO_ROOT

MODE_SH = REPO_ROOT / "docker/rootfs/usr/local/lib/container/start/mode.sh"
PAGE = REPO_ROOT / "docs/how-it-runs.md"
SERVICES = dict(CONTAINER_MODE="services", SPAWNED_BY_JUPYTERHUB=0, AT_A_TERMINAL=0, STARTED_AS_ROOT=1,
                WORK_RUNS_AS_CONTAINER_ROOT=0, RESOLVED_AUTH="token", ENABLE_SSH=1, ENABLE_JUPYTER=1,
                ENABLE_GPU_EXPORTER=0, OWN_PID_NAMESPACE=1, READ_ONLY_ROOT=0)
# Every value of every setting, spread over a few containers.
CONTAINERS = [
    SERVICES,
    SERVICES | dict(SPAWNED_BY_JUPYTERHUB=1, STARTED_AS_ROOT=0, RESOLVED_AUTH="hub", ENABLE_SSH=0,
                    ENABLE_GPU_EXPORTER=1, OWN_PID_NAMESPACE=0, READ_ONLY_ROOT=1),
    SERVICES | dict(CONTAINER_MODE="command", AT_A_TERMINAL=1, WORK_RUNS_AS_CONTAINER_ROOT=1, RESOLVED_AUTH="none",
                    ENABLE_SSH=0, ENABLE_JUPYTER=0),
    SERVICES | dict(RESOLVED_AUTH="password"),
    SERVICES | dict(RESOLVED_AUTH="platform"),
]


def in_mode_sh(commands: str, environment: dict[str, str] | None = None) -> str:
    """What COMMANDS print with start/mode.sh sourced, in ENVIRONMENT (default: this process's)."""
    script = f"set -euo pipefail; source {MODE_SH}; {commands}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30,
                          env=environment).stdout.strip()


def start_line(settings: dict[str, object]) -> str:
    assignments = " ".join(f"{name}={value}" for name, value in settings.items())
    return in_mode_sh(f"RESOLVED_USER_NAME=dev CONTAINER_UID=1000 CONTAINER_GID=1000 {assignments}; "
                      "describe_resolved_mode")


def resolved_auth(environment: dict[str, str]) -> str:
    return in_mode_sh("resolved_auth", {"PATH": "/usr/bin:/bin", "ENABLE_JUPYTER": "1", **environment})


@pytest.mark.parametrize(("environment", "auth"), [
    ({}, "token"),
    ({"JUPYTER_PASSWORD_HASH": "argon2:x"}, "password"),
    ({"JUPYTER_AUTH": "platform", "JUPYTER_PLATFORM_AUTH_CHECKED": "1"}, "platform"),
    # A hook set it after start-up's check: jupyter_server_config.py keeps the token, and so does the line.
    ({"JUPYTER_AUTH": "platform"}, "token"),
    ({"JUPYTER_AUTH": "platform", "JUPYTER_PASSWORD_HASH": "argon2:x"}, "password"),
    ({"JUPYTER_AUTH": "hub"}, "hub"),
    ({"ENABLE_JUPYTER": "0", "JUPYTER_AUTH": "platform", "JUPYTER_PLATFORM_AUTH_CHECKED": "1"}, "none"),
])
def test_the_line_names_the_authentication_jupyter_will_use(environment, auth):
    assert resolved_auth(environment) == auth


def table_values() -> list[tuple[str, str]]:
    """(setting, value) for each value in the last column of the page's table of the modes."""
    rows = re.findall(r"^\| ([^|]+?) \|.*\| ([^|]+) \|$", PAGE.read_text(encoding="utf-8"), re.M)
    values = [(setting, value) for setting, column in rows if setting not in ("setting", "---")
              for value in re.findall(r"`([^`]+)`", column)]
    assert len(values) >= 10, f"no table of the modes in {PAGE.name}"
    return values


LINES = [start_line(settings) for settings in CONTAINERS]


def test_the_line_of_a_default_container_reads_as_the_page_shows_it():
    assert LINES[0] == ("services; dev 1000:1000 from root; auth token; ssh on; jupyter on; gpu exporter off; "
                        "own pid namespace; writable root")
    assert f"[start] {LINES[0]}" in PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize(("setting", "value"), table_values())
def test_every_value_of_the_table_of_modes_is_said_in_the_start_line(setting, value):
    said = [line for line in LINES if re.search(rf"(^|; | ){re.escape(value)}(;|$| )", line)]
    assert said, (f"docs/how-it-runs.md says the start line shows `{value}` ({setting}), but "
                  f"describe_resolved_mode never prints it: {LINES}")


def test_the_start_line_has_one_field_per_row_of_the_table():
    settings = {setting for setting, _ in table_values()}
    # The mode's row and its two qualifiers (a hub, a terminal) share the first field.
    assert len(LINES[0].split("; ")) == len(settings) - 2, (LINES[0], sorted(settings))
