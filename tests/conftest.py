"""Fixtures shared by every test: the image under test, real containers started from it, and the
place where torch-side tests run.

The image is the one `make build` made; its name comes from IMAGE_UNDER_TEST (the Makefile sets it).
Torch-side tests (trainer, doctor, benchmarks) run inside a training-only container of that image.
TORCH_TESTS_ON_HOST=1 runs them on this machine instead, which is how the trainer is developed with a
local torch before any image exists, and how the GPU checks run on a GPU machine without Docker.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

import pytest
import testinfra

from tests.support import REPO_ROOT
from tests.support.containers import LIVE_CONTAINERS, Container, docker, running_container, start_container
from tests.support.tiers import FILE_TIERS, TIERS, parse_rotation, selected

IN_IMAGE_SCRIPTS_DIR = "/opt/scripts"


def torch_tests_run_on_host() -> bool:
    return os.environ.get("TORCH_TESTS_ON_HOST") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=TIERS, default="full",
                     help="landing: what `make test` runs; full: every test; flavor: the landing tests of "
                          "what the GPU flavor's base changes (tests/support/tiers.py)")
    parser.addoption("--rotation", default=None, metavar="K/N",
                     help="also run share K of N of the tests the tier leaves out (docs/testing.md)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keeps the tests of --tier (and of --rotation's share); a test without a tier is an error."""
    tier = config.getoption("--tier")
    rotation_text = config.getoption("--rotation")
    try:
        rotation = parse_rotation(rotation_text) if rotation_text else None
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    kept, left_out = [], []
    for item in items:
        path = item.path.relative_to(REPO_ROOT).as_posix()
        if path.startswith("tests/unit/"):
            kept.append(item)  # the unit tier is whole in every run
            continue
        mark = item.get_closest_marker("tier")
        if mark is None or mark.args[0] not in FILE_TIERS:
            raise pytest.UsageError(f"{item.nodeid} has no tier: put pytestmark = pytest.mark.tier(\"landing\") "
                                    f"or (\"full\") at the top of {path} (docs/contributing.md)")
        wanted = selected(tier, mark.args[0], item.get_closest_marker("flavor_difference") is not None,
                                path, rotation)
        (kept if wanted else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing test shows the logs of every container alive at that moment."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for container in list(LIVE_CONTAINERS.values()):
            report.sections.append((f"logs of container {container.name}", container.logs()[-6000:]))


@pytest.fixture(scope="session")
def image() -> str:
    name = os.environ.get("IMAGE_UNDER_TEST")
    if not name:
        pytest.exit("IMAGE_UNDER_TEST is not set: run the tests with `make test`, which builds the image "
                    "and sets it", returncode=2)
    return name


@pytest.fixture(scope="session")
def labels(image: str) -> dict[str, str]:
    """The image's labels: OCI metadata and the versions it was built from."""
    return json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout)


@pytest.fixture(scope="session")
def flavor(labels: dict[str, str]) -> str:
    """gpu or cpu: what `make test` built (IMAGE_FLAVOR), else what the image says it is (a pulled one)."""
    return os.environ.get("IMAGE_FLAVOR") or labels["dev.pytorch-dev.flavor"]


@pytest.fixture
def containers(image: str) -> Iterator[Callable[..., Container]]:
    """Starts containers of the image for one test (start(command=..., options=...)); removes them after."""
    started: list[Container] = []

    def start(command: list[str] | None = None, options: list[str] | None = None, **kwargs) -> Container:
        container = start_container(image, command=command, options=options, **kwargs)
        started.append(container)
        return container

    yield start
    for container in started:
        container.remove()


@pytest.fixture(scope="module")
def training_container(image: str) -> Iterator[Container]:
    """A container with no services, as a training-only job runs it; removed after the module."""
    with running_container(image, command=["sleep", "infinity"], healthy=False) as container:
        yield container


@pytest.fixture(scope="module")
def torch_host(request: pytest.FixtureRequest) -> testinfra.host.Host:
    """A testinfra host with torch and our scripts: the container user's shell, or this machine."""
    if torch_tests_run_on_host():
        return testinfra.get_host("local://")
    container: Container = request.getfixturevalue("training_container")
    return container.host()


@pytest.fixture(scope="module")
def scripts_dir() -> str:
    """Where scripts/ lives on the torch host: baked into the image, or this checkout."""
    return str(REPO_ROOT / "scripts") if torch_tests_run_on_host() else IN_IMAGE_SCRIPTS_DIR


@pytest.fixture(scope="module")
def cuda_devices(torch_host: testinfra.host.Host) -> int:
    """How many CUDA devices torch sees on the torch host; GPU tests skip, with the reason, at 0."""
    result = torch_host.run("timeout 60 python -c 'import torch; print(torch.cuda.device_count())'")
    assert result.rc == 0, result.stderr
    count = int(result.stdout.strip())
    if count == 0:
        pytest.skip("no GPU visible to torch on this host (CPU-only machine, or started without --gpus)")
    return count
