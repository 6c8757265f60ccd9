"""The two holes an attack found in the stop (issue 26). `docker stop` reaches a trainer below a launcher
that does not pass SIGTERM on: `flock`, or a sweep script running each trial with subprocess.run, dies of
the signal and leaves its trainer running; before, nothing signalled that trainer until the services
stopped, and it was killed without a checkpoint. And a trainer renamed like a session holder (`bash`,
`sleep`, `tmux: server`, as setproctitle does) is work: before, it was skipped as a holder, killed at
the end, and the log still said "stopped cleanly".

    make test-image PYTEST_ARGS=tests/image/test_stop_launchers.py
"""
from __future__ import annotations

import shlex

import pytest

from tests.support.containers import Container, docker
from tests.support.stopping import (GRACE_PERIOD_S, read_file, saved_checkpoints, trainer_arguments,
                                    wait_until_it_ignores_sigterm, wait_until_trained)

pytestmark = pytest.mark.tier("full")

STOP_TIMEOUT_S = 10


def sweep(argv: list[str]) -> list[str]:
    """A sweep that runs its trial with subprocess.run and dies of SIGTERM without passing it on."""
    return ["python", "-c", f"import subprocess; subprocess.run({argv!r})"]


LAUNCHERS = {"flock": lambda argv: ["flock", "/tmp/trial.lock", *argv], "sweep": sweep}


def train_then_stop(containers, tmp_path, name: str, argv: list[str]) -> tuple[Container, str]:
    """Runs ARGV, the trainer NAME (/tmp/NAME.log), with `docker exec` until it trained a step, then
    `docker stop`s the container; asserts the trainer saved on its SIGTERM; returns the container and
    its log."""
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", f"STOP_TIMEOUT={STOP_TIMEOUT_S}"])
    container.wait_until_started()
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c",
           f"OMP_NUM_THREADS=1 {shlex.join(argv)} > /tmp/{name}.log 2>&1")
    wait_until_trained(container, name)
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    log, logs = read_file(container, f"/tmp/{name}.log", tmp_path), container.logs()
    assert "stopped by SIGTERM at step" in log and saved_checkpoints(container, name, tmp_path), \
        log[-3000:] + logs[-3000:]
    return container, logs


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_trainer_below_a_launcher_that_does_not_pass_sigterm_on_saves(containers, tmp_path, launcher):
    container, logs = train_then_stop(containers, tmp_path, launcher,
                                      LAUNCHERS[launcher](trainer_arguments(launcher, nproc=None)))
    # Signalled once its launcher was gone, not when STOP_TIMEOUT ran out (the log, not a clock, says so:
    # on a loaded machine the stop's own seconds vary).
    assert "SIGTERM to work whose launcher exited" in logs, logs[-3000:]
    assert "still running after" not in logs and "stopped cleanly" in logs, logs[-3000:]
    assert container.state()["ExitCode"] == 0, logs[-3000:]


def renamed(name: str, argv: list[str]) -> list[str]:
    """ARGV's Python program, renamed NAME first (prctl PR_SET_NAME, what setproctitle does)."""
    code = (f"import ctypes, os, runpy, sys; ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0); "
            f"sys.argv = {argv[1:]!r}; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    return ["python", "-c", code]


@pytest.mark.parametrize("name", ["bash", "sleep", "tmux: server"])
def test_a_trainer_named_like_a_session_holder_is_signalled_as_work(containers, tmp_path, name):
    label = name.replace(":", "").replace(" ", "-")
    _, logs = train_then_stop(containers, tmp_path, label, renamed(name, trainer_arguments(label, nproc=None)))
    assert "your processes have exited" in logs and "stopped cleanly" in logs, logs[-3000:]


def test_stopped_cleanly_is_not_said_when_renamed_work_ignored_its_sigterm(containers):
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", "STOP_TIMEOUT=2"])
    container.wait_until_started()
    stubborn = ("import ctypes, signal, time; ctypes.CDLL(None).prctl(15, b'sleep', 0, 0, 0); "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)")
    docker("exec", "--detach", "--user", "dev", container.name, "python", "-c", stubborn)
    wait_until_it_ignores_sigterm(container, "SIG_IGN")
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()
    assert "still running after 2 s" in logs and "stopped cleanly" not in logs, logs[-3000:]
