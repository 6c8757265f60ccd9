"""What the editor and CI tests share: pip's trust of the host's CA inside containers, and a team's tiny
repository for the CI examples to test.

pip inside a container trusts the CA bundle `make test` was given (CA_BUNDLE, a proxy's CA on this
project's machines), mounted read-only and named by PIP_CERT, as docs/building.md describes for builds.
TLS verification stays on.
"""
from __future__ import annotations

import os
import pathlib

import pytest

CONTAINER_CA_PATH = "/etc/ssl/certs/host-ca-bundle.crt"


def pip_trust_options() -> list[str]:
    """docker run/create options that make pip in the container trust CA_BUNDLE, when one is given."""
    bundle = os.environ.get("CA_BUNDLE")
    if not bundle:
        return []
    return ["--volume", f"{os.path.abspath(bundle)}:{CONTAINER_CA_PATH}:ro", "--env", f"PIP_CERT={CONTAINER_CA_PATH}"]


TEAM_TEST = """\
import torch


def test_the_image_torch_adds_up():
    assert torch.ones(3).sum().item() == 3
"""


@pytest.fixture
def team_repository(tmp_path: pathlib.Path) -> pathlib.Path:
    """A team's repository as its CI checks it out: one test file for pytest to run."""
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "tests" / "test_team.py").write_text(TEAM_TEST)
    return checkout
