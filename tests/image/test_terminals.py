"""The container at a terminal. `docker run -it IMAGE CMD` runs CMD in the terminal's foreground, so
Ctrl-C and job control stay its own, while the supervisor stays beside it (with the GPU exporter when
asked for) and stops the work in order on `docker stop`: a trainer typed at an interactive shell's
prompt saves. And an interactive shell whose terminal is held outside the container (`docker exec -it
... bash`), which ignores SIGTERM, does not hold up `docker stop`: step 3 hangs it up.

    make test-image PYTEST_ARGS=tests/image/test_terminals.py
"""
from __future__ import annotations

import time

import pytest

from tests.support.containers import docker, run_container_to_completion
from tests.support.stopping import GRACE_PERIOD_S, endless_flags, read_file, saved_checkpoints, wait_until_trained
from tests.support.training import trainer_command
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

NO_SERVICES = ["--env", "ENABLE_JUPYTER=0", "--env", "OMP_NUM_THREADS=1"]


def test_a_command_at_a_terminal_is_the_terminals_foreground_beside_the_supervisor_and_the_exporter(image):
    # $PPID is the command's parent, the supervisor (python), which stays (not tini, which it would be had the
    # command taken the supervisor's place); the command's process group is the
    # terminal's foreground (ps's tpgid), so Ctrl-C reaches it and not the supervisor.
    # The services write to the same terminal, at their own pace: the command waits until the exporter
    # answers, and tags its lines. (The pattern is anchored: this bash's own command line names the
    # exporter too.)
    script = ("for _ in $(seq 300); do curl -sf -o /dev/null localhost:9400/metrics && break; sleep 0.1; done; "
              "echo \"parent=$(ps -o comm= -p $PPID)\"; "
              "[ \"$(ps -o tpgid= -p $$)\" -eq \"$(ps -o pgid= -p $$)\" ] && echo in=foreground; "
              "pgrep -f '^python3 /opt/scripts/gpu_exporter' >/dev/null && echo exporter=running")
    result = run_container_to_completion(image, command=["bash", "-c", script],
                                         options=["-t", "--env", "ENABLE_GPU_EXPORTER=1"])
    lines = result.stdout.replace("\r", "").splitlines()
    assert result.returncode == 0 and "in=foreground" in lines and "exporter=running" in lines, result.stdout[-3000:]
    assert any(line.startswith("parent=python") for line in lines), result.stdout[-3000:]
    assert "GPU exporter: /metrics on port 9400" in result.stdout, result.stdout[-3000:]


def typed_at_a_prompt(name: str) -> list[str]:
    """An interactive shell at the container's terminal, running the endless trainer NAME as a job typed
    at its prompt (job control: a process group of its own), then `echo after`."""
    return ["bash", "-ic", f"{trainer_command(endless_flags(name), nproc=None, timeout_s=None)} "
                           f"> /tmp/{name}.log 2>&1; echo after"]


def test_docker_stop_saves_a_trainer_typed_at_an_interactive_shell_at_the_terminal(containers, tmp_path):
    """`docker run -it IMAGE bash`: the shell ignores SIGTERM and the job is in a group of its own, so the
    trainer used to be SIGKILLed at the grace period (exit 137) with no stop line."""
    container = containers(command=typed_at_a_prompt("typed"), options=["-i", "-t", *NO_SERVICES])
    wait_until_trained(container, "typed")
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()
    assert "stopped by SIGTERM at step" in read_file(container, "/tmp/typed.log", tmp_path), logs[-3000:]
    assert saved_checkpoints(container, "typed", tmp_path), logs[-3000:]
    assert container.state()["ExitCode"] == 0 and "stopped cleanly" in logs, logs[-3000:]


def test_ctrl_c_at_the_terminal_reaches_the_job_not_the_supervisor(containers, tmp_path):
    container = containers(command=typed_at_a_prompt("interrupted"), options=["-i", "-t", *NO_SERVICES])
    wait_until_trained(container, "interrupted")
    # What Ctrl-C does: SIGINT to the terminal's foreground process group (PID 1's tpgid).
    container.run("kill -INT -- -$(ps -o tpgid= -p 1 | tr -d ' ')", user=None)
    wait_until(lambda: container.state()["Status"] == "exited", SETTLES_S, failure=lambda: container.logs()[-3000:])
    logs = container.logs()
    assert "stopped by SIGINT at step" in read_file(container, "/tmp/interrupted.log", tmp_path), logs[-3000:]
    # The supervisor is not in the terminal's foreground: it got no SIGINT, to stop on or to ignore.
    assert "stopping:" not in logs and "ignored SIGINT" not in logs, logs[-3000:]
    assert container.state()["ExitCode"] == 0, logs[-3000:]


def test_an_interactive_shell_with_its_terminal_outside_does_not_hold_up_the_stop(containers):
    container = containers(options=["--env", "ENABLE_JUPYTER=0"])
    container.wait_until_started()
    docker("exec", "--detach", "--tty", "--user", "dev", container.name, "bash", "-i")
    wait_until(lambda: "bash -i" in container.run("ps -eo args", user=None).stdout, SETTLES_S)
    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took, logs = time.monotonic() - started, container.logs()
    # Held up, it took STOP_TIMEOUT (25 s); the margin is for a busy machine.
    assert took < GRACE_PERIOD_S / 2 and "stopped cleanly" in logs, (took, logs[-3000:])
    assert container.state()["ExitCode"] == 0, logs[-3000:]
