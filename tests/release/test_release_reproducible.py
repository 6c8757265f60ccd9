"""A release build of this commit, made again: with no layer taken from the build cache it has a
`pip freeze` equal to the image under test's, and (CPU flavor) RELEASE=1 builds it FROM the base pinned
by the digest a registry gave it, which its label records; a digest the registry does not hold fails.

    make test PYTEST_ARGS="tests/release/test_release_reproducible.py"

The second build runs exactly the commands `make build` would (`make -n build` with the variables
`make test` was given), with `docker build --no-cache`. Download caches (BuildKit cache mounts) are kept:
what must not differ is what the resolver picks, and that is what the lock file pins. One full build
serves both claims (about 2 minutes on 2 cores). The CPU flavor's base goes through the local registry
(tests/support/local_registry.py) to get a registry digest; the GPU flavor's, NGC's, cannot here, so its
second build is a plain one.
"""
from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.containers import docker
from tests.support.local_registry import local_registry
from tests.support.release import REPO_ROOT, build_variables, environment_without_make, make, split_image_ref

pytestmark = pytest.mark.tier("full")

SECOND_BUILD_TIMEOUT_S = 1200
PUSH_TIMEOUT_S = 900
FREEZE = ["python", "-m", "pip", "freeze", "--all"]
CPU_BASE = "debian:bookworm-slim"
BASE_DIGEST_LABEL = "dev.pytorch-dev.base-digest"


@dataclass
class SecondBuild:
    image: str
    release_variables: list[str]  # RELEASE=1 and the registry's base, or nothing (GPU flavor)
    base_digest: str | None       # the digest RELEASE=1 pinned, or None


def pip_freeze(image: str) -> list[str]:
    result = docker("run", "--rm", "--network=none", "--entrypoint=", image, *FREEZE, timeout=120)
    return sorted(result.stdout.splitlines())


def release_variables_through(registry: str) -> tuple[list[str], str]:
    """RELEASE=1 with the CPU base pushed to REGISTRY (which gives it a registry digest), and that digest."""
    base = f"{registry}/{CPU_BASE}"
    docker("tag", CPU_BASE, base)
    docker("push", base, timeout=PUSH_TIMEOUT_S)
    digest = docker("image", "inspect", "--format", "{{index .RepoDigests 0}}", base).stdout.strip().split("@")[1]
    return ["RELEASE=1", f"CPU_BASE_IMAGE={base}"], digest


@pytest.fixture(scope="module")
def second_build(image: str, flavor: str, tmp_path_factory) -> Iterator[SecondBuild]:
    """The same checkout built again under another tag, without the layer cache; removed after. Its SBOM
    and provenance go to a temporary folder, not beside the image under test's in .build."""
    name, _ = split_image_ref(image)
    tag = f"{flavor}-repro-{uuid.uuid4().hex[:8]}"
    with local_registry(tmp_path_factory.mktemp("registry")) as registry:
        variables, digest = release_variables_through(registry) if flavor == "cpu" else ([], None)
        commands = subprocess.run(["make", "-n", "-s", "--no-print-directory", "build", f"IMAGE={name}", f"TAG={tag}",
                                   f"FLAVOR={flavor}", f"RELEASE_DIR={tmp_path_factory.mktemp('release')}",
                                   *variables, *build_variables()],
                                  cwd=REPO_ROOT, env=environment_without_make(),
                                  capture_output=True, text=True, timeout=60, check=True).stdout
        assert "docker build " in commands, commands
        # Without the `make sbom` line: replayed outside make, that sub-make would write the SBOM of the
        # image under test (its default IMAGE) into .build; the sbom.py line after it is the second build's.
        script = "\n".join(line for line in commands.splitlines() if not line.startswith("make "))
        script = script.replace("docker build ", "docker build --no-cache ", 1)
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=SECOND_BUILD_TIMEOUT_S, check=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        try:
            yield SecondBuild(f"{name}:{tag}", variables, digest)
        finally:
            docker("image", "rm", f"{name}:{tag}", *([variables[1].split("=", 1)[1]] if variables else []), check=False)


def test_two_builds_of_one_commit_have_equal_pip_freeze(image, second_build):
    first, second = pip_freeze(image), pip_freeze(second_build.image)
    assert first, "pip freeze printed nothing"
    only_first, only_second = sorted(set(first) - set(second)), sorted(set(second) - set(first))
    assert first == second, f"only in {image}: {only_first}; only in the second build: {only_second}"


def test_a_release_build_pins_its_base_by_the_registrys_digest(second_build, flavor):
    if flavor != "cpu":
        pytest.skip("the registry here can hold only the CPU flavor's base; the GPU base is NGC's")
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", second_build.image).stdout)
    assert labels[BASE_DIGEST_LABEL] == second_build.base_digest, labels


def test_a_release_build_of_a_digest_the_registry_lacks_fails_naming_it(second_build, flavor, tmp_path):
    if flavor != "cpu":
        pytest.skip("the registry here can hold only the CPU flavor's base; the GPU base is NGC's")
    missing = f"sha256:{'0' * 64}"
    wrong = make("build", f"pt-release-digest-test:{uuid.uuid4().hex[:8]}", "cpu", *second_build.release_variables,
                 f"RELEASE_DIR={tmp_path}", f"BASE_DIGEST={missing}", *build_variables())
    assert wrong.returncode != 0 and missing in wrong.stdout + wrong.stderr, wrong.stdout[-2000:] + wrong.stderr[-2000:]
