"""The GPU flavor builds on arm64 (GH200, Grace) as it does on amd64: no step of the Dockerfile, and no
build script a step runs, is tied to one architecture (issue 29, GH200 readiness).

    make test-unit PYTEST_ARGS=tests/unit/test_arm64_ready.py

No arm64 machine runs in CI: docs/building.md ("arm64") says what this cannot prove.
"""
from __future__ import annotations

import re

from tests.support import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
# Names of one architecture, as download URLs, wheel tags, package names and platform flags spell them.
ONE_ARCHITECTURE = re.compile(r"amd64|x86_64|x86-64|\bx64\b|i386|aarch64|arm64|--platform")


def code_lines(text: str) -> list[str]:
    """Lines that run, without comments (a comment may name an architecture)."""
    return [line for line in (raw.split(" #")[0] for raw in text.splitlines()) if not line.lstrip().startswith("#")]


def scripts_the_build_runs() -> list[str]:
    """docker/build/ scripts the Dockerfile runs (mounted at /build), and the scripts they source."""
    names = set(re.findall(r"/build/([\w.-]+\.sh)", DOCKERFILE.read_text()))
    for name in list(names):
        names |= set(re.findall(r"source \S*?([\w.-]+\.sh)", (REPO_ROOT / "docker" / "build" / name).read_text()))
    return sorted(names)


def test_the_build_runs_scripts_that_exist():
    scripts = scripts_the_build_runs()
    assert "pip-install-environment.sh" in scripts and "apt-install.sh" in scripts, scripts
    for name in scripts:
        assert (REPO_ROOT / "docker" / "build" / name).is_file(), name


def test_no_step_of_the_dockerfile_names_an_architecture():
    tied = [line for line in code_lines(DOCKERFILE.read_text()) if ONE_ARCHITECTURE.search(line)]
    assert not tied, f"a build step tied to one architecture (the GPU flavor must build on arm64 too): {tied}"


def test_no_build_script_names_an_architecture():
    for name in scripts_the_build_runs():
        tied = [line for line in code_lines((REPO_ROOT / "docker" / "build" / name).read_text())
                if ONE_ARCHITECTURE.search(line)]
        assert not tied, f"docker/build/{name} is tied to one architecture: {tied}"


def test_the_packages_we_add_name_no_architecture():
    requirements = (REPO_ROOT / "docker" / "python" / "requirements.txt").read_text()
    tied = [line for line in code_lines(requirements) if ONE_ARCHITECTURE.search(line)
            or "platform_machine" in line]
    assert not tied, tied
