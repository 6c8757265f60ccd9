"""Fixtures of the editor and CI tests beyond tests/conftest.py: a team's tiny repository for the CI
examples to test."""
from __future__ import annotations

import pathlib

import pytest

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
