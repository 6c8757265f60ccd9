"""ENABLE_GPU_EXPORTER=1 starts the in-container GPU exporter beside the services or a command; on a
host without GPUs it serves zero GPUs and the container carries on.

    make test-image PYTEST_ARGS=tests/monitoring/test_gpu_exporter_service.py
"""
from __future__ import annotations

import pytest

from tests.support.containers import host_has_nvidia_runtime
from tests.support.waiting import wait_until

SCRAPE = "curl --fail --silent --max-time 5 http://127.0.0.1:${GPU_EXPORTER_PORT}/metrics"


@pytest.mark.parametrize("command", [None, ["sleep", "infinity"]], ids=["services", "command"])
def test_the_exporter_serves_once_switched_on(containers, command):
    if host_has_nvidia_runtime():
        pytest.skip("this host has GPUs: the exporter's GPU series are checked by the gpu-marked tests")
    container = containers(command=command, options=["--env", "ENABLE_GPU_EXPORTER=1", "--env", "ENABLE_JUPYTER=0"])
    metrics = wait_until(lambda: container.run(SCRAPE).stdout, 60, failure=lambda: container.logs())
    assert "gpu_exporter_gpus 0.0" in metrics, metrics
    assert "GPU exporter: /metrics on port 9400" in container.logs()


def test_the_exporter_is_off_unless_asked(containers):
    container = containers(command=["sleep", "infinity"])
    assert container.run(SCRAPE).rc != 0
