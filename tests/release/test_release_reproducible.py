"""Two builds of the same commit have the same Python package set: a second build of this checkout,
with no layer taken from the build cache, has a `pip freeze` equal to the image under test's.

    make test PYTEST_ARGS="tests/release/test_release_reproducible.py"

The second build runs exactly the commands `make build` would (`make -n build` with the variables
`make test` was given), with `docker build --no-cache`. Download caches (BuildKit cache mounts) are kept:
what must not differ is what the resolver picks, and that is what the lock file pins. It costs one full
build (about 2 minutes on 2 cores).
"""
from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.support.containers import docker
from tests.support.release import REPO_ROOT, build_variables, environment_without_make, split_image_ref

SECOND_BUILD_TIMEOUT_S = 1200
FREEZE = ["python", "-m", "pip", "freeze", "--all"]


def pip_freeze(image: str) -> list[str]:
    result = docker("run", "--rm", "--network=none", "--entrypoint=", image, *FREEZE, timeout=120)
    return sorted(result.stdout.splitlines())


@pytest.fixture(scope="module")
def second_build(image: str, flavor: str, tmp_path_factory) -> Iterator[str]:
    """The same checkout built again under another tag, without the layer cache; removed after. Its SBOM
    goes to a temporary folder, not beside the image under test's in .build."""
    name, _ = split_image_ref(image)
    tag = f"{flavor}-repro-{uuid.uuid4().hex[:8]}"
    commands = subprocess.run(["make", "-n", "-s", "--no-print-directory", "build", f"IMAGE={name}", f"TAG={tag}",
                               f"FLAVOR={flavor}", f"RELEASE_DIR={tmp_path_factory.mktemp('release')}",
                               *build_variables()],
                              cwd=REPO_ROOT, env=environment_without_make(),
                              capture_output=True, text=True, timeout=60, check=True).stdout
    assert "docker build " in commands, commands
    # Without the `make sbom` line: replayed outside make, that sub-make would write the SBOM of the image
    # under test (its default IMAGE) into .build; the sbom.py line after it is the second build's own.
    script = "\n".join(line for line in commands.splitlines() if not line.startswith("make "))
    script = script.replace("docker build ", "docker build --no-cache ", 1)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=SECOND_BUILD_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield f"{name}:{tag}"
    docker("image", "rm", f"{name}:{tag}", check=False)


def test_two_builds_of_one_commit_have_equal_pip_freeze(image, second_build):
    first, second = pip_freeze(image), pip_freeze(second_build)
    assert first, "pip freeze printed nothing"
    only_first, only_second = sorted(set(first) - set(second)), sorted(set(second) - set(first))
    assert first == second, f"only in {image}: {only_first}; only in the second build: {only_second}"
