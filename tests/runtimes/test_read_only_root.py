"""A read-only root filesystem (docker run --read-only, Kubernetes readOnlyRootFilesystem) started as root:
start-up names the tmpfs mounts it needs in one line, and with them the services and a job work.

    make test-image PYTEST_ARGS=tests/runtimes/test_read_only_root.py
"""
from __future__ import annotations

import re
import subprocess

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import docker, run_container_to_completion
from tests.support.runtime_rules import TOKEN, TRAIN, checkpoints
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.training import TINY_RUN, trainer_command

pytestmark = pytest.mark.tier("full")

# What the one line asks for when SSH is on (docs/runtimes.md lists the same).
SERVICE_TMPFS = ["/run", "/etc/ssh/authorized_keys", "/etc/container", "/etc/ssh/host_keys"]
ONE_RANK_COMPILED = trainer_command(f"{TINY_RUN} --max-steps 2 --compile", nproc=None, timeout_s=150)


def test_docker_read_only_root_stops_with_one_line_naming_each_tmpfs_to_add(image):
    result = run_container_to_completion(image, options=["--read-only"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("[start]") for line in lines), result.stderr  # no raw touch/install errors
    (error,) = [line for line in lines if "ERROR" in line]
    # /tmp too: the home /home/dev is on the read-only root, and the one that replaces it lies in /tmp.
    assert all(f"--tmpfs {path}" in error for path in [*SERVICE_TMPFS, "/tmp"]), error


def test_docker_read_only_root_with_a_tmpfs_on_run_names_every_other_mount_the_first_time(containers, image):
    """The mounts the one line names are all start-up needs: following it once, the services start."""
    result = run_container_to_completion(image, options=["--read-only", "--tmpfs", "/run"])
    assert result.returncode == 2, result.stderr
    (error,) = [line for line in result.stderr.splitlines() if "ERROR" in line]
    named = re.findall(r"--tmpfs (\S+)", error)
    assert sorted(named) == sorted({*SERVICE_TMPFS, "/tmp"} - {"/run"}), error
    container = containers(options=["--read-only", "--tmpfs", "/run", *(f"--tmpfs={path}" for path in named),
                                    "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    assert "ERROR" not in container.logs(), container.logs()


def test_docker_read_only_root_with_the_named_tmpfs_serves_jupyter_and_ssh(containers, tmp_path):
    key = generate_key()
    # /tmp and the home too, as docs/runtimes.md says: without them start-up warns and uses a home in /tmp.
    tmpfs = [flag for path in ["/tmp", "/home/dev:uid=1000,gid=1000", *SERVICE_TMPFS] for flag in ("--tmpfs", path)]
    container = containers(options=["--read-only", *tmpfs, "--volume", f"{tmp_path}:/workspace",
                                    "--publish", "127.0.0.1::8888", "--publish",
                                    "127.0.0.1::2222", "--env", f"JUPYTER_TOKEN={TOKEN}",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"])
    container.wait_until_healthy()
    assert "WARNING" not in container.logs() and "Read-only" not in container.logs(), container.logs()
    url = f"http://127.0.0.1:{container.published_port(8888)}/api/status"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200
    with ssh_session(container.published_port(2222), key=key) as client:
        status, out, _ = run(client, "id -un; test -w \"$HOME\" && echo writable-home")
    assert (status, out.split()) == (0, ["dev", "writable-home"])


def test_docker_read_only_root_with_a_tmpfs_on_run_trains_into_a_mounted_folder(image, tmp_path):
    # The attack that found it: with --tmpfs /run, /run/container did not exist and start-up failed.
    result = run_container_to_completion(
        image, options=["--shm-size=1g", "--read-only", "--tmpfs", "/run", "--tmpfs", "/tmp",
                        "--volume", f"{tmp_path}:/workspace"],
        command=["bash", "-c", f"cd /workspace && {TRAIN}"], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert checkpoints(tmp_path / "checkpoints"), result.stdout[-2000:]


@pytest.fixture(scope="module")
def image_with_a_compiler(image):
    """The image under test with g++ and Python's headers, which NGC's image has and torch.compile on CPU
    needs; the CPU flavor gets them as a team's derived image would (without, it refuses --compile)."""
    if run_container_to_completion(image, command=["sh", "-c", "command -v g++"]).returncode == 0:
        yield image
        return
    derived = f"{image.rpartition(':')[0]}-with-gxx:test"
    subprocess.run(["docker", "build", "--quiet", "--tag", derived, "-"], capture_output=True, text=True,
                   timeout=600, check=True,
                   input=f"FROM {image}\nRUN apt-get update -qq && apt-get install -y -qq --no-install-recommends g++ "
                         f"python3-dev && rm -rf /var/lib/apt/lists/*\n")
    yield derived
    docker("image", "rm", derived, check=False)


def test_compile_with_a_tmpfs_that_runs_no_code_stops_with_one_line_before_any_work(image_with_a_compiler, tmp_path):
    """Docker's --tmpfs is noexec: the read-only root's home and torch's default cache both lie on it, so
    the kernels torch.compile builds cannot load (before: a traceback from deep in the compiler)."""
    options = ["--shm-size=1g", "--read-only", "--tmpfs", "/run", "--volume", f"{tmp_path}:/workspace"]
    command = ["bash", "-c", f"cd /workspace && {ONE_RANK_COMPILED}"]
    result = run_container_to_completion(image_with_a_compiler, options=[*options, "--tmpfs", "/tmp"],
                                         command=command, timeout=240)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "runs no code (noexec)" in errors[0] and "--tmpfs /tmp:exec" in errors[0], errors
    assert not (tmp_path / "checkpoints").exists() or not checkpoints(tmp_path / "checkpoints")
    # What the line advises: the same run compiles, loads its kernels and trains.
    result = run_container_to_completion(image_with_a_compiler, options=[*options, "--tmpfs", "/tmp:exec"],
                                         command=command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
