"""make build's engine check (tools/check_build_engine.sh): an engine before 25, whose builder stops at
HEALTHCHECK --start-interval, is told so in one line before any build starts."""
from __future__ import annotations

import subprocess

import pytest

from tests.support import REPO_ROOT

CHECK = REPO_ROOT / "tools" / "check_build_engine.sh"


def check(version: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK), version], capture_output=True, text=True, timeout=30, check=False)


# Debian 12's and Ubuntu 22.04's docker.io, Ubuntu 24.04's, Docker 24 from docker.com, and a broken answer.
@pytest.mark.parametrize("version", ["20.10.24+dfsg1", "24.0.7", "24.0.9-1", "unknown"])
def test_an_engine_before_25_is_refused_in_one_line_naming_both_versions(version):
    result = check(version)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"Docker Engine {version} cannot build" in lines[0] and "25 or later" in lines[0]


@pytest.mark.parametrize("version", ["25.0.0", "26.1.5+dfsg1", "28.5.1"])
def test_an_engine_of_25_or_later_builds(version):
    result = check(version)
    assert (result.returncode, result.stderr) == (0, "")


def test_make_build_checks_the_engine_before_it_builds():
    steps = subprocess.run(["make", "-n", "build", "FLAVOR=cpu"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=60, check=True).stdout.splitlines()
    build = next(index for index, step in enumerate(steps) if step.startswith("docker build"))
    assert "tools/check_build_engine.sh" in steps[:build], steps[:build]
