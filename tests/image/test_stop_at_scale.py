"""The stop path keeps up with thousands of processes and survives a full PID table: it forks nothing
between `docker stop` and the trainer's SIGTERM (docker/rootfs/usr/local/lib/container/supervisor/supervisor.py).
Durations are measured in BENCHMARKS.md (tools/bench_stop.sh), not asserted here beyond the grace period.

    make test-image PYTEST_ARGS=tests/image/test_stop_at_scale.py
"""
from __future__ import annotations

import time

import pytest

from tests.support.containers import docker
from tests.support.stopping import GRACE_PERIOD_S, endless_run_command, read_file, saved_checkpoints, wait_until_trained
from tests.support.waiting import wait_until
from tests.support import SETTLES_S, STARTS_S

pytestmark = pytest.mark.tier("landing")

# Idle processes beside the trainer, as DataLoader workers, tmux panes and shells add up on an 8-GPU box:
# main's stop path, forking several times per process, took longer than the grace period with 3,800.
IDLE_PROCESSES = 4000
PIDS_LIMIT = 200


def process_count(container) -> int:
    """Processes in CONTAINER, counted from the host (docker top), which works when its PID table is full."""
    return len(docker("top", container.name, "-e", "-o", "pid").stdout.splitlines()) - 1


@pytest.mark.tier("full")
def test_docker_stop_saves_a_trainer_beside_thousands_of_idle_processes(containers, tmp_path):
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", "ENABLE_SSH=0"])
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c", endless_run_command("crowd", 1))
    wait_until_trained(container, "crowd")
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c",
           f"for _ in $(seq {IDLE_PROCESSES}); do tail -f /dev/null & done; wait")
    wait_until(lambda: process_count(container) >= IDLE_PROCESSES, STARTS_S, interval=2,
               failure=lambda: f"only {process_count(container)} processes started")

    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started
    log = read_file(container, "/tmp/crowd.log", tmp_path)
    assert container.state()["ExitCode"] == 0 and took < GRACE_PERIOD_S, (took, container.logs()[-2000:])
    assert "stopped by SIGTERM at step" in log and saved_checkpoints(container, "crowd", tmp_path), log[-3000:]


def test_docker_stop_with_a_full_pid_table_exits_0_without_forking(containers):
    """A bounded fork bomb fills --pids-limit; the stop path still signals, waits and exits 0."""
    container = containers(options=["--pids-limit", str(PIDS_LIMIT), "--env", "ENABLE_JUPYTER=0"])
    docker("exec", "--detach", container.name, "bash", "-c", "while :; do sleep infinity & done")
    wait_until(lambda: process_count(container) >= PIDS_LIMIT - 10, SETTLES_S, interval=1,
               failure=lambda: f"only {process_count(container)} processes started")

    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started
    logs = container.logs()
    assert container.state()["ExitCode"] == 0 and took < GRACE_PERIOD_S / 2, (took, logs[-2000:])
    assert "fork" not in logs and "stopped cleanly" in logs, logs[-2000:]
