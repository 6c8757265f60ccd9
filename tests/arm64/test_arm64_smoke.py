"""The arm64 smoke tier: the CPU flavor built for linux/arm64 (a Mac's Docker Desktop, a Grace node's CPU
side) does what a user does first. On an amd64 host every process here runs under QEMU emulation, so the
tier is a few tests of the paths that matter, not the whole suite again.

    make test-arm64           # builds the arm64 image, then runs this folder against it (docs/testing.md)
"""
from __future__ import annotations

import json

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, STARTS_S
from tests.support.containers import docker, run_container_to_completion
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.stopping import saved_checkpoints, trainer_arguments, wait_until_trained
from tests.support.training import TINY_RUN, trainer_command

pytestmark = pytest.mark.tier("full")

TOKEN = "arm64-smoke-token-5a8c2e71d94b"
EMULATED_RUN_S = 900  # two ranks importing torch under QEMU, on 2 shared cores
EMULATED_STOP_S = 90  # the container's STOP_TIMEOUT for a trainer whose steps take tens of seconds


def test_the_image_is_arm64_and_torch_computes_on_aarch64(image):
    assert docker("image", "inspect", "--format", "{{.Architecture}}", image).stdout.strip() == "arm64"
    result = run_container_to_completion(
        image, command=["bash", "-c", "uname -m; python -c 'import torch; print(torch.ones(3, 3).sum().item())'"],
        timeout=EMULATED_RUN_S)
    assert result.returncode == 0 and result.stdout.split() == ["aarch64", "9.0"], result.stdout + result.stderr


def test_two_ranks_of_the_sample_trainer_train_and_save(image):
    command = trainer_command(f"{TINY_RUN} --max-steps 4 --num-workers 0 --ckpt-dir /tmp/ckpt", nproc=2,
                              timeout_s=EMULATED_RUN_S)
    result = run_container_to_completion(image, command=["bash", "-c", f"{command} && ls /tmp/ckpt"],
                                         options=["--shm-size=1g"], timeout=EMULATED_RUN_S + 60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "step_000004.pt" in result.stdout.split(), result.stdout[-3000:]


def test_a_macs_ids_bring_ssh_and_jupyterlab_up_healthy_behind_a_token(containers):
    key = generate_key()
    container = containers(options=["--publish", "127.0.0.1::2222", "--publish", "127.0.0.1::8888",
                                    "--env", "PUID=501", "--env", "PGID=20", "--env", f"JUPYTER_TOKEN={TOKEN}",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"])
    container.wait_until_healthy(timeout=STARTS_S)
    with ssh_session(container.published_port(2222), key=key) as client:
        assert run(client, "id -u; id -g; uname -m")[1].split() == ["501", "20", "aarch64"]
    contents = f"http://127.0.0.1:{container.published_port(8888)}/api/contents"
    assert requests.get(contents, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(contents, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_docker_stop_saves_a_running_trainer(containers, tmp_path):
    # The stop waits for the step in progress: under QEMU, with the release's zstd beside it on the same two
    # cores, one step took 23.6 s, so the stop's default 25 s left torchrun no time to exit after its workers.
    container = containers(command=trainer_arguments("job", 2),
                           options=["--env", "OMP_NUM_THREADS=1", "--env", f"STOP_TIMEOUT={EMULATED_STOP_S}"])
    wait_until_trained(container, "job")
    docker("stop", "--time", str(EMULATED_STOP_S + 10), container.name, timeout=EMULATED_STOP_S + 60)
    logs = container.logs()
    assert container.state()["ExitCode"] == 0, logs[-3000:]
    assert "stopped by SIGTERM at step" in logs and saved_checkpoints(container, "job", tmp_path), logs[-3000:]


def test_doctor_runs_every_check_on_aarch64_without_a_traceback(image):
    result = run_container_to_completion(image, command=["doctor", "--json"], timeout=EMULATED_RUN_S)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    (platform,) = [check for check in report["checks"] if check["name"] == "platform"]
    assert platform["finding"].startswith("aarch64, 4 KiB pages"), platform
