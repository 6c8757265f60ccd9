"""`make ssh-config` gives ssh, sftp, rsync and VS Code Remote-SSH one name for the container, and the
image has what VS Code's server needs: tar, gzip, curl or wget, a writable home, TCP forwarding.

    make test-image PYTEST_ARGS=tests/editor/test_remote_ssh.py

The client is OpenSSH on this machine, configured by nothing but the printed Host block (plus the test's
own key and known_hosts file). rsync runs from a container of the image, which carries the rsync and
ssh clients, on the host's network: this machine may have no rsync of its own.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.containers import docker, free_port, running_container
from tests.support.host_tools import skip_where_missing
from tests.support.release import environment_without_make
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

ALIAS = "pytorch-dev-test"
TOKEN = "remote-ssh-test-token-5be1c0"
SSH_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def ssh_client_setup(image, tmp_path_factory):
    """One container with SSH and JupyterLab for the module, and an ssh config: the test's key, then the
    block `make ssh-config` prints."""
    if not shutil.which("ssh") or not shutil.which("sftp"):
        skip_where_missing("the OpenSSH client is not installed: apt-get install openssh-client")
    client_dir = tmp_path_factory.mktemp("ssh-client")
    key = client_dir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    with running_container(image, options=[
            "--publish", "127.0.0.1::2222", "--env", f"JUPYTER_TOKEN={TOKEN}",
            "--env", f"SSH_AUTHORIZED_KEYS={key.with_suffix('.pub').read_text()}"]) as container:
        forwards = {"JUPYTER_LOCAL_PORT": free_port(), "TENSORBOARD_LOCAL_PORT": free_port()}
        block = subprocess.run(
            ["make", "-s", "--no-print-directory", "ssh-config", f"SSH_ALIAS={ALIAS}",
             f"SSH_PORT={container.published_port(2222)}", *(f"{name}={port}" for name, port in forwards.items())],
            cwd=REPO_ROOT, env=environment_without_make(), capture_output=True, text=True, timeout=30,
            check=True).stdout
        config = client_dir / "ssh_config"
        config.write_text(f"IdentityFile {key}\nIdentitiesOnly yes\nBatchMode yes\nStrictHostKeyChecking accept-new\n"
                          f"UserKnownHostsFile {client_dir / 'known_hosts'}\n{block}")
        yield container, config, forwards


def ssh(config: pathlib.Path, *args: str, timeout: float = SSH_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", str(config), *args], capture_output=True, text=True, timeout=timeout)


def test_the_host_block_logs_in_and_has_what_vscode_server_needs(ssh_client_setup):
    _, config, _ = ssh_client_setup
    needs = ("tar --version && gzip --version && (command -v curl || command -v wget) && "
             "mkdir -p ~/.vscode-server/bin && test -w ~/.vscode-server/bin && id -un")
    result = ssh(config, ALIAS, needs)
    assert result.returncode == 0 and result.stdout.split()[-1] == "dev", result.stdout + result.stderr
    known_hosts = config.parent / "known_hosts"
    assert known_hosts.read_text().startswith(f"{ALIAS} "), "the host key is kept under the alias"


def test_the_forwards_bring_jupyter_and_tensorboard_here(ssh_client_setup):
    container, config, forwards = ssh_client_setup
    # A stand-in for TensorBoard on its port, as the container user.
    docker("exec", "--detach", "--user", "dev", container.name, "python", "-m", "http.server", "6006",
           "--bind", "127.0.0.1", "--directory", "/opt/scripts")
    tunnel = subprocess.Popen(["ssh", "-F", str(config), "-N", ALIAS], stderr=subprocess.PIPE, text=True)
    try:
        def answers(port: int, path: str) -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}{path}", timeout=HTTP_TIMEOUT_S).status_code == 200
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
                assert tunnel.poll() is None, tunnel.stderr.read() if tunnel.stderr else "ssh exited"
                return False
        wait_until(lambda: answers(forwards["JUPYTER_LOCAL_PORT"], f"/api/contents?token={TOKEN}"), SETTLES_S,
                   failure="JupyterLab did not answer through the forward")
        wait_until(lambda: answers(forwards["TENSORBOARD_LOCAL_PORT"], "/train_ddp.py"), SETTLES_S,
                   failure="port 6006 did not answer through the forward")
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def write_tree(root: pathlib.Path) -> dict[str, str]:
    files = {"a.txt": "alpha\n", "sub/b.txt": "beta\n", "sub/deeper/c.py": "print('c')\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return files


def tree_in_container(container, folder: str) -> dict[str, str]:
    listing = container.run(f"cd {folder} && find . -type f | sort | while read -r f; do echo \"$f=$(cat \"$f\")\"; done")
    return {line.split("=", 1)[0][2:]: line.split("=", 1)[1] + "\n" for line in listing.stdout.splitlines()}


def tree_here(root: pathlib.Path) -> dict[str, str]:
    return {str(path.relative_to(root)): path.read_text() for path in root.rglob("*") if path.is_file()}


def test_sftp_copies_a_folder_each_way(ssh_client_setup, tmp_path):
    container, config, _ = ssh_client_setup
    files = write_tree(tmp_path / "up")
    batch = tmp_path / "batch"
    batch.write_text(f"put -r {tmp_path / 'up'} /workspace/up-sftp\nget -r /workspace/up-sftp {tmp_path / 'down'}\n")
    result = subprocess.run(["sftp", "-F", str(config), "-b", str(batch), ALIAS], capture_output=True, text=True,
                            timeout=SSH_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert tree_in_container(container, "/workspace/up-sftp") == files
    assert tree_here(tmp_path / "down") == files


@pytest.mark.tier("full")
def test_rsync_copies_a_folder_each_way(ssh_client_setup, image, tmp_path):
    container, config, _ = ssh_client_setup
    files = write_tree(tmp_path / "up")
    rsync = f"rsync -a -e 'ssh -F {config}'"
    script = (f"{rsync} {tmp_path / 'up'}/ {ALIAS}:/workspace/up-rsync/ && "
              f"{rsync} {ALIAS}:/workspace/up-rsync/ {tmp_path / 'down'}/")
    result = docker("run", "--rm", "--network", "host", "--user", "0", "--entrypoint", "bash",
                    "--volume", f"{tmp_path}:{tmp_path}", "--volume", f"{config.parent}:{config.parent}:ro",
                    image, "-c", script, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert tree_in_container(container, "/workspace/up-rsync") == files
    assert tree_here(tmp_path / "down") == files
