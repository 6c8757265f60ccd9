"""Publishing through a real registry: `make push` to Debian's docker-registry on 127.0.0.1, pull the
image back by tag, and run the image test suite (tests/image/test_image.py, tests/image/test_torchrun.py) on the
pulled reference. (A release build's base pinned by digest is tested with the second build of
tests/release/test_release_reproducible.py, which goes through a registry of its own.)

    make test PYTEST_ARGS="tests/release/test_release_registry.py"

Needs /usr/bin/docker-registry (`make ci-registry` installs it). Without it the test skips, except in CI
(CI=true), where a missing registry is a failure. The image under test keeps its own tag throughout:
only the registry-prefixed references are removed and pulled again, since other tests use it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.containers import docker
from tests.support.local_registry import local_registry, registry_api
from tests.support.release import REPO_ROOT, make, split_image_ref

pytestmark = pytest.mark.tier("landing")

SUITE_ON_PULLED_IMAGE = ["tests/image/test_image.py", "tests/image/test_torchrun.py"]
PUSH_TIMEOUT_S = 900
SUITE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


def image_id(reference: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()


@pytest.mark.tier("full")
def test_push_pull_back_by_tag_and_the_pulled_image_passes_the_image_suite(registry, image, flavor):
    tags = make("tags", image, flavor).stdout.split()
    assert tags, "make tags printed no tag"
    pushed = make("push", image, flavor, f"REGISTRY={registry}", timeout=PUSH_TIMEOUT_S)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    repository = f"{registry}/{split_image_ref(image)[0]}"
    references = pushed.stdout.split()
    assert [ref.split("@")[0] for ref in references] == [f"{repository}:{tag}" for tag in tags], references
    assert all("@sha256:" in ref for ref in references), references
    assert sorted(registry_api(registry, f"/v2/{split_image_ref(image)[0]}/tags/list")["tags"]) == sorted(tags)

    original_id = image_id(image)
    pulled = f"{repository}:{tags[0]}"
    docker("image", "rm", *[ref.split("@")[0] for ref in references])
    assert docker("image", "inspect", pulled, check=False).returncode != 0, "the pushed tag is still here"
    try:
        docker("pull", pulled, timeout=PUSH_TIMEOUT_S)
        assert image_id(pulled) == original_id, "the pulled image is not the one pushed"
        suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITE_ON_PULLED_IMAGE],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False,
                               env=dict(os.environ, IMAGE_UNDER_TEST=pulled))
        assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
        assert " passed" in suite.stdout.splitlines()[-1], suite.stdout[-2000:]
    finally:
        docker("image", "rm", pulled, check=False)


def test_pushed_digest_pulls_the_same_image(registry, image, flavor):
    """Pulling by the digest `make push` printed gives the same image (the reference CI logs record)."""
    pushed = make("push", image, flavor, f"REGISTRY={registry}", timeout=PUSH_TIMEOUT_S)
    assert pushed.returncode == 0, pushed.stderr
    tagged, digest = pushed.stdout.split()[0].split("@")
    digest_ref = f"{tagged.rsplit(':', 1)[0]}@{digest}"
    try:
        docker("image", "rm", *[ref.split("@")[0] for ref in pushed.stdout.split()])
        docker("pull", digest_ref, timeout=PUSH_TIMEOUT_S)
        assert image_id(digest_ref) == image_id(image)
    finally:
        docker("image", "rm", digest_ref, check=False)
