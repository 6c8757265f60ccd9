"""Fixtures of the monitoring tests: the Prometheus test image, built once per test process."""
from __future__ import annotations

import pytest

from tests.monitoring.prometheus_server import build_prometheus_image


@pytest.fixture(scope="session")
def prometheus_image() -> str:
    return build_prometheus_image()
