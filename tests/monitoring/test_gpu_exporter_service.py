"""ENABLE_GPU_EXPORTER=1 starts the in-container GPU exporter beside the services or a command; on a
host without GPUs it serves zero GPUs and the container carries on.

    make test-image PYTEST_ARGS=tests/monitoring/test_gpu_exporter_service.py
"""
from __future__ import annotations

import pytest

from tests.support.containers import host_has_nvidia_runtime
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

SCRAPE = "curl --fail --silent --max-time 5 http://127.0.0.1:${GPU_EXPORTER_PORT}/metrics"


@pytest.mark.parametrize("command", [None, ["sleep", "infinity"]], ids=["services", "command"])
def test_the_exporter_serves_once_switched_on(containers, command):
    if host_has_nvidia_runtime():
        pytest.skip("this host has GPUs: the exporter's GPU series are checked by the gpu-marked tests")
    container = containers(command=command, options=["--env", "ENABLE_GPU_EXPORTER=1", "--env", "ENABLE_JUPYTER=0"])
    metrics = wait_until(lambda: container.run(SCRAPE).stdout, SETTLES_S, failure=lambda: container.logs())
    assert "gpu_exporter_gpus 0.0" in metrics, metrics
    assert "GPU exporter: /metrics on port 9400" in container.logs()


@pytest.mark.tier("full")
def test_the_exporter_is_off_unless_asked(containers):
    container = containers(command=["sleep", "infinity"])
    assert container.run(SCRAPE).rc != 0


# 300 clients connect and send nothing; a scrape must still answer, and the exporter must drop an idle
# client after its read timeout (10 s) instead of holding a thread for it as long as the client likes.
IDLE_CLIENTS = """
import socket, time, urllib.request
idle = [socket.create_connection(("127.0.0.1", 9400)) for _ in range(300)]
page = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10).read().decode()
idle[-1].settimeout(30)
try:
    dropped = idle[-1].recv(1) == b""
except TimeoutError:
    dropped = False
print("answered" if "gpu_exporter_gpus" in page else "silent", "dropped" if dropped else "held")
"""


@pytest.mark.tier("full")
def test_the_exporter_answers_beside_idle_clients_and_drops_them(containers):
    container = containers(command=["sleep", "infinity"], options=["--env", "ENABLE_GPU_EXPORTER=1"])
    wait_until(lambda: container.run(SCRAPE).rc == 0, SETTLES_S, failure=lambda: container.logs())
    result = container.run(f"python3 -c '{IDLE_CLIENTS}'", timeout=90)
    assert result.stdout.split() == ["answered", "dropped"], result.stdout + result.stderr
    assert "Traceback" not in container.logs(), container.logs()


@pytest.mark.tier("full")
def test_the_exporter_listens_only_where_gpu_exporter_address_says(containers):
    container = containers(command=["sleep", "infinity"],
                           options=["--env", "ENABLE_GPU_EXPORTER=1", "--env", "GPU_EXPORTER_ADDRESS=127.0.0.1"])
    wait_until(lambda: container.run(SCRAPE).rc == 0, SETTLES_S, failure=lambda: container.logs())
    outside = container.run('curl --silent --max-time 5 "http://$(hostname -i | cut -d" " -f1):9400/metrics"')
    assert outside.rc != 0, outside.stdout
