"""WHEELHOUSE reaches each build as a named build context (the Dockerfiles' `wheelhouse` stage): nothing is
copied into the checkout, so a build without WHEELHOUSE, or with another, started beside one that reads its
wheels, cannot delete or change them (it used to: both synced one `.wheelhouse/` folder of the checkout)."""
from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import REPO_ROOT

DOCKERFILES = [REPO_ROOT / "Dockerfile", REPO_ROOT / "tests" / "ngc_standin" / "Dockerfile"]


def build_steps(target: str, *variables: str) -> list[str]:
    """What `make TARGET` would run, as `make -n` prints it."""
    return subprocess.run(["make", "-n", target, "FLAVOR=cpu", *variables], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=True).stdout.splitlines()


@pytest.mark.parametrize("target", ["build", "lock", "ngc-standin"])
def test_each_build_mounts_its_own_wheelhouse_and_copies_none_into_the_checkout(target, tmp_path):
    # make lock's arm64 leg on an amd64 host takes the arm64 wheelhouse of arm64-prerequisites, where it is.
    one_platform = ["LOCK_PLATFORMS=linux/amd64"] if target == "lock" else []
    with_wheels = build_steps(target, f"WHEELHOUSE={tmp_path}", *one_platform)
    without = build_steps(target, "WHEELHOUSE=", *one_platform)
    builds = [step for step in with_wheels if step.startswith("docker build")]
    assert builds and all(f'--build-context wheelhouse="{tmp_path}"' in step for step in builds), builds
    assert not any("--build-context" in step for step in without if step.startswith("docker build")), without
    for steps in (with_wheels, without):
        assert not any(".wheelhouse" in step for step in steps), steps


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_wheelhouse_mount_is_the_empty_stage_a_build_may_replace(dockerfile):
    text = dockerfile.read_text()
    mounts = re.findall(r"--mount=type=bind,\S*target=/wheelhouse\b", text)
    assert mounts and set(mounts) == {"--mount=type=bind,from=wheelhouse,target=/wheelhouse"}, mounts
    stage = re.search(r"^FROM scratch AS wheelhouse$", text, re.M)
    assert stage and stage.start() < text.index(mounts[0]), "the wheelhouse stage must come before its mounts"


def test_a_wheelhouse_that_is_not_a_folder_is_refused_in_one_line(tmp_path):
    wheel = tmp_path / "torch.whl"
    wheel.write_bytes(b"")
    result = subprocess.run([str(REPO_ROOT / "tools" / "check_wheelhouse.sh"), str(wheel)], capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"WHEELHOUSE={wheel} is not a folder; point it at a folder of .whl files"], result.stderr
