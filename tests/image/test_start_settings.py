"""Settings read only when the container stops or the GPU exporter starts are checked at start-up:
a bad value stops the container with one line, as the README promises; a risky one is warned about.

    make test-image PYTEST_ARGS=tests/image/test_start_settings.py
"""
from __future__ import annotations

import pytest

from tests.support.containers import run_container_to_completion

pytestmark = pytest.mark.tier("full")


@pytest.mark.parametrize("options, message", [
    (["--env", "STOP_TIMEOUT=abc"], "STOP_TIMEOUT='abc' is not a number of seconds"),
    (["--env", "STOP_TIMEOUT=-1"], "STOP_TIMEOUT='-1' is not a number of seconds"),
    (["--env", "ENABLE_GPU_EXPORTER=1", "--env", "GPU_EXPORTER_PORT=abc"], "GPU_EXPORTER_PORT='abc' is not a TCP port"),
    (["--env", "ENABLE_GPU_EXPORTER=1", "--env", "GPU_EXPORTER_PORT=70000"], "GPU_EXPORTER_PORT='70000' is not a TCP port"),
    (["--env", "ENABLE_GPU_EXPORTER=1", "--env", "GPU_EXPORTER_ADDRESS=abc"], "GPU_EXPORTER_ADDRESS='abc' is not an IP address"),
    (["--env", "ENABLE_GPU_EXPORTER=1", "--env", "GPU_EXPORTER_ADDRESS=10.0.0.256"],
     "GPU_EXPORTER_ADDRESS='10.0.0.256' is not an IP address"),
], ids=["timeout-word", "timeout-negative", "port-word", "port-too-high", "address-word", "address-octet"])
def test_a_bad_number_stops_the_start_with_one_line(image, options, message):
    result = run_container_to_completion(image, command=["true"], options=options)
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr


def test_a_stop_timeout_past_compose_grace_period_is_warned_about(image):
    result = run_container_to_completion(image, command=["true"], options=["--env", "STOP_TIMEOUT=30"])
    assert result.returncode == 0, result.stderr
    assert "STOP_TIMEOUT=30 is not below the engine's grace period" in result.stderr, result.stderr


def test_a_stop_timeout_of_0_is_accepted_with_one_warning_line(image):
    """Round 8: accepted without a word, after which every stop said "not cleanly"."""
    result = run_container_to_completion(image, command=["true"], options=["--env", "STOP_TIMEOUT=0"])
    warnings = [line for line in result.stderr.splitlines() if "STOP_TIMEOUT" in line]
    assert result.returncode == 0 and len(warnings) == 1, result.stderr
    assert "STOP_TIMEOUT=0 gives your work no time to save" in warnings[0], result.stderr


@pytest.mark.parametrize("variable, owner", [("PUID", "user 'nobody'"), ("PGID", "group 'nogroup'")])
def test_nobodys_id_is_accepted_with_the_warning_other_system_ids_get(image, variable, owner):
    result = run_container_to_completion(image, command=["id"], options=["--shm-size=1g", "--env", f"{variable}=65534"])
    warnings = [line for line in result.stderr.splitlines() if f"{variable}=65534 is the image's own" in line]
    assert result.returncode == 0 and len(warnings) == 1 and owner in warnings[0], result.stderr


@pytest.mark.parametrize("port, owner", [("8888", "JupyterLab's port (JUPYTER_CONTAINER_PORT)"),
                                         ("2222", "sshd's port (SSH_CONTAINER_PORT)")], ids=["jupyter", "ssh"])
def test_a_port_another_service_listens_on_stops_the_start_with_one_line(image, port, owner):
    """Before, 8888 failed JupyterLab's start with a line blaming a Jupyter config, in a restart loop, and
    2222 left sshd unbound while the container stayed healthy."""
    result = run_container_to_completion(image, options=["--env", "ENABLE_GPU_EXPORTER=1",
                                                         "--env", f"GPU_EXPORTER_PORT={port}"])
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"GPU_EXPORTER_PORT={port} is {owner}; set GPU_EXPORTER_PORT to a free port" in errors[0], errors
