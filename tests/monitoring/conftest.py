"""Fixtures of the monitoring tests: the Prometheus test image, built once per test process."""
from __future__ import annotations

import fcntl

import pytest

from tests.support.prometheus_server import build_prometheus_image


@pytest.fixture(scope="session")
def prometheus_image(tmp_path_factory) -> str:
    # One build at a time: pytest-xdist runs the monitoring files in parallel processes, and two builds
    # exporting one tag at once can fail. The lock file sits in the run's temp folder, which all share.
    with open(tmp_path_factory.getbasetemp().parent / "prometheus-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build_prometheus_image()
