"""The container at a terminal. `docker run -t IMAGE CMD` runs CMD in the supervisor's place, so Ctrl-C
and job control stay its own, with the GPU exporter beside it when asked for. And an interactive shell
whose terminal is held outside the container (`docker exec -it ... bash`), which ignores SIGTERM, does not
hold up `docker stop`: step 3 hangs it up.

    make test-image PYTEST_ARGS=tests/image/test_terminals.py
"""
from __future__ import annotations

import time

import pytest

from tests.support.containers import docker, run_container_to_completion
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")


def test_a_command_at_a_terminal_takes_the_supervisors_place_with_the_exporter_beside_it(image):
    # $PPID is the command's parent: tini when it took the supervisor's place, the supervisor if not.
    # (The pattern is anchored: this bash's own command line names the exporter too.)
    script = "sleep 1; ps -o comm= -p $PPID; pgrep -f '^python3 /opt/scripts/gpu_exporter' >/dev/null && echo exporter"
    result = run_container_to_completion(image, command=["bash", "-c", script],
                                         options=["-t", "--env", "ENABLE_GPU_EXPORTER=1"])
    lines = result.stdout.replace("\r", "").splitlines()
    assert result.returncode == 0 and lines[-2:] == ["tini", "exporter"], result.stdout[-3000:]
    assert "GPU exporter: /metrics on port 9400" in result.stdout, result.stdout[-3000:]


def test_an_interactive_shell_with_its_terminal_outside_does_not_hold_up_the_stop(containers):
    container = containers(options=["--env", "ENABLE_JUPYTER=0"])
    container.wait_until_started()
    docker("exec", "--detach", "--tty", "--user", "dev", container.name, "bash", "-i")
    wait_until(lambda: "bash -i" in container.run("ps -eo args", user=None).stdout, 30)
    started = time.monotonic()
    docker("stop", "--time", "30", container.name, timeout=60)
    took, logs = time.monotonic() - started, container.logs()
    assert took < 8 and "stopped cleanly" in logs, (took, logs[-3000:])
    assert container.state()["ExitCode"] == 0, logs[-3000:]
