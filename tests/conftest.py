"""Fixtures shared by every test: the image under test, real containers started from it, and the
place where torch-side tests run.

The image is the one `make build` made; its name comes from IMAGE_UNDER_TEST (the Makefile sets it).
Torch-side tests (trainer, doctor, benchmarks) run inside a training-only container of that image.
TORCH_TESTS_ON_HOST=1 runs them on this machine instead, which is how the trainer is developed with a
local CPU torch before any image exists.
"""
from __future__ import annotations

import os
import pathlib

import pytest
import testinfra

from tests.containers import Container, start_container

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
IN_IMAGE_SCRIPTS_DIR = "/opt/scripts"
CONTAINER_USER = "dev"


def torch_tests_run_on_host() -> bool:
    return os.environ.get("TORCH_TESTS_ON_HOST") == "1"


@pytest.fixture(scope="session")
def image() -> str:
    name = os.environ.get("IMAGE_UNDER_TEST")
    if not name:
        pytest.exit("IMAGE_UNDER_TEST is not set: run the tests with `make test`, which builds the image "
                    "and sets it", returncode=2)
    return name


@pytest.fixture(scope="module")
def training_container(image: str):
    """A container with no services, as a training-only job runs it; removed after the module."""
    container = start_container(image, command=["sleep", "infinity"])
    yield container
    container.remove()


@pytest.fixture(scope="module")
def torch_host(request: pytest.FixtureRequest) -> testinfra.host.Host:
    """A testinfra host with torch and our scripts: the container user's shell, or this machine."""
    if torch_tests_run_on_host():
        return testinfra.get_host("local://")
    container: Container = request.getfixturevalue("training_container")
    return container.host(user=CONTAINER_USER)


@pytest.fixture(scope="module")
def scripts_dir() -> str:
    """Where scripts/ lives on the torch host: baked into the image, or this checkout."""
    return str(REPO_ROOT / "scripts") if torch_tests_run_on_host() else IN_IMAGE_SCRIPTS_DIR
