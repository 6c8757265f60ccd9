"""The CI examples teams copy verify the image's signature, by digest, before anything runs in it:
examples/github-actions (a job of its own that the test job needs, since a job container starts before its
steps) and examples/gitlab-ci (a stage before the tests). How the jobs then run is tests/editor's.

    make test PYTEST_ARGS="tests/release/test_release_examples.py"
"""
from __future__ import annotations

import re

import pytest
import yaml

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

GITHUB = REPO_ROOT / "examples" / "github-actions" / ".github" / "workflows" / "tests.yml"
GITLAB = REPO_ROOT / "examples" / "gitlab-ci" / ".gitlab-ci.yml"
BY_DIGEST = re.compile(r"[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}")
COSIGN_VERIFY = re.compile(r"cosign verify \"?\$(IMAGE|PYTORCH_DEV_IMAGE)\"?")


def test_github_actions_verifies_the_digest_the_test_job_runs_before_it_starts():
    jobs = yaml.safe_load(GITHUB.read_text())["jobs"]
    image = jobs["test"]["container"]["image"]
    assert BY_DIGEST.fullmatch(image), f"{image} is not pinned by digest"
    assert jobs["test"]["needs"] == "verify-image"
    verify = next(step for step in jobs["verify-image"]["steps"] if "cosign verify" in step.get("run", ""))
    assert verify["env"]["IMAGE"] == image and COSIGN_VERIFY.search(verify["run"]), verify
    installer = next(step for step in jobs["verify-image"]["steps"] if "cosign-installer" in step.get("uses", ""))
    assert installer["with"]["cosign-release"].startswith("v2."), "sign and verify with one cosign major"


def test_gitlab_verifies_the_digest_the_test_job_runs_in_an_earlier_stage():
    pipeline = yaml.safe_load(GITLAB.read_text())
    image = pipeline["test"]["image"]
    assert BY_DIGEST.fullmatch(image) and pipeline["variables"]["PYTORCH_DEV_IMAGE"] == image
    assert pipeline["test"]["needs"] == ["verify-image"]
    assert pipeline["stages"].index(pipeline["verify-image"]["stage"]) < pipeline["stages"].index(pipeline["test"]["stage"])
    script = " ".join(pipeline["verify-image"]["script"])
    assert COSIGN_VERIFY.search(script) and "'cosign<3'" in script, script
