"""A read-only root filesystem (docker run --read-only, Kubernetes readOnlyRootFilesystem) started as root:
start-up names the tmpfs mounts it needs in one line, and with them the services and a job work.

    make test-image PYTEST_ARGS=tests/runtimes/test_read_only_root.py
"""
from __future__ import annotations

import re

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import run_container_to_completion
from tests.support.runtime_rules import TOKEN, TRAIN, checkpoints
from tests.support.ssh_client import generate_key, public_line, run, ssh_session

pytestmark = pytest.mark.tier("full")

# What the one line asks for when SSH is on (docs/runtimes.md lists the same).
SERVICE_TMPFS = ["/run", "/etc/ssh/authorized_keys", "/etc/container", "/etc/ssh/host_keys"]


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
