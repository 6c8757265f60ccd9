"""A team's image FROM this one (examples/derived-image) builds, keeps the base's torch, runs its hook,
and passes the image tests that concern its extension points.

    make test-image PYTEST_ARGS=tests/editor/test_derived_image.py

The example is built with the image under test as its base (BASE_IMAGE), and with the CA bundle of
`make test` as the build's `ca_bundle` secret, as a team behind a proxy builds it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import docker, run_container_to_completion

pytestmark = pytest.mark.tier("landing")

EXAMPLE = REPO_ROOT / "examples" / "derived-image"
HOOK = "/etc/container/start.d/50-team-data.sh"
# The image tests of start-up and contents, less the one that wants start.d empty: the derived image's
# whole point is a hook there.
IMAGE_TESTS = ["tests/image/test_image.py", "tests/image/test_start_hooks.py",
               "--deselect", "tests/image/test_start_hooks.py::test_the_image_ships_the_hook_folder_empty"]


@pytest.fixture(scope="module")
def derived_image(image: str) -> Iterator[str]:
    tag = f"pytorch-dev-derived-example:{uuid.uuid4().hex[:8]}"
    secret = ["--secret", f"id=ca_bundle,src={os.environ['CA_BUNDLE']}"] if os.environ.get("CA_BUNDLE") else []
    build = docker("build", "--quiet", "--tag", tag, "--build-arg", f"BASE_IMAGE={image}", *secret, str(EXAMPLE),
                   timeout=600, check=False)
    assert build.returncode == 0, build.stderr
    yield tag
    docker("image", "rm", "--force", tag, check=False)


def test_it_adds_the_package_and_keeps_the_base_torch(image, derived_image):
    code = "import importlib.metadata as m, tabulate; print(m.version('torch'))"
    base = run_container_to_completion(image, command=["python", "-c", "import importlib.metadata as m; "
                                                                       "print(m.version('torch'))"])
    derived = run_container_to_completion(derived_image, command=["python", "-c", code])
    assert derived.returncode == 0, derived.stderr
    assert derived.stdout.strip() == base.stdout.strip()


def test_its_hook_runs_at_start_and_exports_for_the_command(derived_image):
    result = run_container_to_completion(derived_image, command=["bash", "-c", "echo $TEAM_DATA_DIR"],
                                         options=["--shm-size=1g"])
    assert result.stdout.strip() == "/workspace/data", result.stderr
    assert f"running start-up hook {HOOK}" in result.stderr


@pytest.mark.tier("full")
def test_the_image_tests_pass_on_it(derived_image):
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--numprocesses=2",
                             "--dist=loadfile", *IMAGE_TESTS],
                            cwd=REPO_ROOT, env={**env, "IMAGE_UNDER_TEST": derived_image},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and " passed" in result.stdout, result.stdout[-4000:]
