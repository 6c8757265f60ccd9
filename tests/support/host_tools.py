"""Host tools some tests need beyond Docker and Python (Chromium, docker-registry, Slurm)."""
from __future__ import annotations

import os

import pytest


def skip_where_missing(reason: str) -> None:
    """Skips the test, saying what is missing and how to install it; in CI (CI=true), whose .ci/run
    installs every such tool, a missing one is a failure instead, so CI never passes by skipping."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run should have installed it)")
    pytest.skip(reason)
