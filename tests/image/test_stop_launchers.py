"""`docker stop` reaches a trainer below a launcher that does not pass SIGTERM on (issue 26): `flock`, or a
sweep script running each trial with subprocess.run, dies of the signal and leaves its trainer running.
Before, nothing signalled that trainer until the services stopped, and it was killed without a checkpoint.

    make test-image PYTEST_ARGS=tests/image/test_stop_launchers.py
"""
from __future__ import annotations

import shlex
import time

import pytest

from tests.support.containers import docker
from tests.support.stopping import GRACE_PERIOD_S, read_file, saved_checkpoints, trainer_arguments, wait_until_trained

STOP_TIMEOUT_S = 10


def sweep(argv: list[str]) -> list[str]:
    """A sweep that runs its trial with subprocess.run and dies of SIGTERM without passing it on."""
    return ["python", "-c", f"import subprocess; subprocess.run({argv!r})"]


LAUNCHERS = {"flock": lambda argv: ["flock", "/tmp/trial.lock", *argv], "sweep": sweep}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_trainer_below_a_launcher_that_does_not_pass_sigterm_on_saves(containers, tmp_path, launcher):
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", f"STOP_TIMEOUT={STOP_TIMEOUT_S}"])
    container.wait_until_started()
    command = shlex.join(LAUNCHERS[launcher](trainer_arguments(launcher, nproc=None)))
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c",
           f"OMP_NUM_THREADS=1 {command} > /tmp/{launcher}.log 2>&1")
    wait_until_trained(container, launcher)
    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started
    log, logs = read_file(container, f"/tmp/{launcher}.log", tmp_path), container.logs()
    assert "stopped by SIGTERM at step" in log and saved_checkpoints(container, launcher, tmp_path), \
        log[-3000:] + logs[-3000:]
    # Signalled once its launcher was gone, not when STOP_TIMEOUT ran out.
    assert took < STOP_TIMEOUT_S and "stopped cleanly" in logs, (took, logs[-3000:])
    assert "SIGTERM to work whose launcher exited" in logs, logs[-3000:]
    assert container.state()["ExitCode"] == 0, logs[-3000:]
