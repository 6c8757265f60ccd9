"""SSH into the container as a user would: key login, tmux and torchrun; everything else refused.

    make test PYTEST_ARGS="tests/image/test_ssh.py"
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import paramiko
import pytest

from tests.support.containers import docker, run_container_to_completion, running_container
from tests.support.ssh_client import SSH_TIMEOUT_S, generate_key, host_key_fingerprint, public_line, run, ssh_session
from tests.support.training import RUN_TIMEOUT_S, TINY_MODEL, trainer_command
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

PUBLISH_SSH = ["--publish", "127.0.0.1::2222"]
NO_JUPYTER = ["--env", "ENABLE_JUPYTER=0"]
# Variables a training job is configured with; SSH sessions must see them.
CONTAINER_ENV = ["--env", "NCCL_SOCKET_IFNAME=eth0", "--env", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                 "--env", "LD_LIBRARY_PATH=/opt/example/lib"]


@pytest.fixture(scope="module")
def user_key() -> paramiko.PKey:
    return generate_key()


@pytest.fixture(scope="module")
def ssh_container(image, user_key):
    with running_container(image, options=[*PUBLISH_SSH, *NO_JUPYTER, *CONTAINER_ENV,
                                           "--env", f"SSH_AUTHORIZED_KEYS={public_line(user_key)}"]) as container:
        yield container


@pytest.fixture(scope="module")
def ssh_port(ssh_container) -> int:
    return ssh_container.published_port(2222)


@pytest.mark.flavor_difference
def test_key_login_sees_the_container_environment(ssh_port, user_key):
    with ssh_session(ssh_port, key=user_key) as client:
        status, out, _ = run(client, "id -un; command -v torchrun; python -c 'import torch; print(torch.__version__)'; "
                                     "echo $NCCL_SOCKET_IFNAME $CUDA_DEVICE_ORDER $LD_LIBRARY_PATH")
    assert status == 0
    user, torchrun, torch_version, *variables = out.split()
    assert user == "dev"
    assert torchrun.endswith("/torchrun")
    assert torch_version
    assert variables == ["eth0", "PCI_BUS_ID", "/opt/example/lib"]


@pytest.mark.flavor_difference
def test_an_interactive_login_shell_keeps_the_environment_and_shows_the_motd(ssh_port, user_key):
    with ssh_session(ssh_port, key=user_key) as client:
        channel = client.invoke_shell()
        channel.settimeout(30)
        channel.send(b"echo MARK $NCCL_SOCKET_IFNAME $(command -v torchrun); exit\n")
        output = b""
        while not channel.exit_status_ready() or channel.recv_ready():
            chunk = channel.recv(65536)
            if not chunk:
                break
            output += chunk
    text = output.decode(errors="replace")
    assert "doctor" in text, "the motd names the tools"
    assert re.search(r"MARK eth0 \S+/torchrun", text), text


def test_torchrun_in_tmux_started_over_ssh_keeps_running_after_logout(ssh_port, user_key):
    training = trainer_command(f"{TINY_MODEL} --max-steps 3 --batch-size 4 --log-every 1 --ckpt-dir /tmp/tmux-ckpt "
                               "--metrics-file /tmp/tmux-metrics.jsonl")
    command = f"tmux new-session -d -s train {shlex.quote(f'{training} > /tmp/tmux-train.log 2>&1; touch /tmp/tmux-done')}"
    with ssh_session(ssh_port, key=user_key) as client:
        status, _, err = run(client, command)
        assert status == 0, err
        status, out, _ = run(client, "tmux list-sessions -F '#S'")
        assert "train" in out.split()
    # The session logged out; the run goes on inside tmux and finishes.
    with ssh_session(ssh_port, key=user_key) as client:
        wait_until(lambda: run(client, "test -e /tmp/tmux-done")[0] == 0, RUN_TIMEOUT_S, interval=1,
                   failure=lambda: "the run in tmux did not finish:\n" + run(client, "cat /tmp/tmux-train.log")[1])
        status, out, _ = run(client, "wc -l < /tmp/tmux-metrics.jsonl")
    assert status == 0 and out.strip() == "3", out


def test_password_login_is_refused(ssh_port):
    with pytest.raises(paramiko.AuthenticationException):
        with ssh_session(ssh_port, password="dev"):
            pass


def test_root_login_is_refused_even_with_the_users_key(ssh_port, user_key):
    with pytest.raises(paramiko.AuthenticationException):
        with ssh_session(ssh_port, user="root", key=user_key):
            pass


def test_an_unknown_key_is_refused(ssh_port):
    with pytest.raises(paramiko.AuthenticationException):
        with ssh_session(ssh_port, key=generate_key()):
            pass


def test_only_publickey_authentication_is_offered(ssh_port):
    transport = paramiko.Transport(("127.0.0.1", ssh_port))
    transport.banner_timeout = SSH_TIMEOUT_S  # paramiko's own default is 15 s
    try:
        transport.start_client(timeout=SSH_TIMEOUT_S)
        with pytest.raises(paramiko.BadAuthenticationType) as refused:
            transport.auth_none("dev")
        assert refused.value.allowed_types == ["publickey"]
    finally:
        transport.close()


@pytest.mark.tier("full")
def test_two_containers_have_different_host_keys_and_one_keeps_its_key_across_a_restart(containers, user_key):
    options = [*PUBLISH_SSH, *NO_JUPYTER, "--env", f"SSH_AUTHORIZED_KEYS={public_line(user_key)}"]
    first, second = containers(options=options), containers(options=options)
    first.wait_until_healthy()
    second.wait_until_healthy()
    first_key = host_key_fingerprint(first.published_port(2222))
    assert first_key != host_key_fingerprint(second.published_port(2222))

    docker("restart", "--time", "20", first.name)
    first.wait_until_healthy()
    assert host_key_fingerprint(first.published_port(2222)) == first_key


def test_a_key_file_mounted_read_only_is_accepted(containers, tmp_path):
    key = generate_key()
    key_file = tmp_path / "authorized_keys"
    key_file.write_text(public_line(key) + "\n")
    key_file.chmod(0o644)
    container = containers(options=[*PUBLISH_SSH, *NO_JUPYTER, "--volume", f"{key_file}:/run/keys/authorized_keys:ro",
                                    "--env", "SSH_AUTHORIZED_KEYS_FILE=/run/keys/authorized_keys"])
    container.wait_until_healthy()
    with ssh_session(container.published_port(2222), key=key) as client:
        assert run(client, "true")[0] == 0


@pytest.mark.tier("full")
def test_a_home_mounted_from_the_host_keeps_its_mode(containers, tmp_path, user_key):
    """The host's folder is the host's: start-up must not chmod a home that is a mount point."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o775)
    os.chown(home, 1000, 1000)
    container = containers(options=[*PUBLISH_SSH, *NO_JUPYTER, "--volume", f"{home}:/home/dev",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(user_key)}"])
    container.wait_until_healthy()
    assert oct(home.stat().st_mode & 0o777) == oct(0o775)


@pytest.mark.parametrize("options, message", [
    (["--env", "SSH_AUTHORIZED_KEYS=ssh-ed25519 not-base64 someone"],
     "SSH_AUTHORIZED_KEYS line 1 is not an SSH public key"),
    (["--env", "SSH_AUTHORIZED_KEYS=hello world"],
     "SSH_AUTHORIZED_KEYS line 1 is not an SSH public key"),
    (["--env", "SSH_AUTHORIZED_KEYS_FILE=/nonexistent/authorized_keys"],
     "SSH_AUTHORIZED_KEYS_FILE=/nonexistent/authorized_keys cannot be read"),
])
@pytest.mark.tier("full")
def test_bad_key_input_stops_the_start_with_one_clear_line(image, options, message):
    result = run_container_to_completion(image, options=[*NO_JUPYTER, *options])
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr



def dsa_public_line() -> str:
    """A DSA public key: valid, yet refused by OpenSSH 9's sshd at every login."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import dsa

    public = dsa.generate_private_key(key_size=1024).public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.mark.filterwarnings("ignore:SSH DSA key support is deprecated")
@pytest.mark.tier("full")
def test_a_key_of_a_type_sshd_refuses_stops_the_start_with_one_line(image):
    result = run_container_to_completion(image, options=[*NO_JUPYTER, "--env", f"SSH_AUTHORIZED_KEYS={dsa_public_line()}"])
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "is a 1024-bit DSA key, which sshd refuses" in errors[0], result.stderr


@pytest.mark.tier("full")
def test_a_read_only_host_key_volume_without_keys_stops_the_start_with_one_line(image, tmp_path):
    result = run_container_to_completion(image, options=[*NO_JUPYTER, "--volume", f"{tmp_path}:/etc/ssh/host_keys:ro"])
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "cannot write the SSH host key into /etc/ssh/host_keys" in errors[0], result.stderr


def test_ssh_audit_finds_no_failure(ssh_port):
    # ssh-audit's verdict on the algorithms sshd offers, recorded: before the KexAlgorithms/MACs lines it
    # failed 5 (hmac-sha1*, the NIST-curve ecdh kex), and warned about more.
    result = subprocess.run([sys.executable, "-m", "ssh_audit", "--json", "--port", str(ssh_port), "127.0.0.1"],
                            capture_output=True, text=True, timeout=60, check=False)
    report = json.loads(result.stdout)
    failures = [entry for kind in ("kex", "key", "enc", "mac") for entry in report.get(kind, [])
                if entry.get("notes", {}).get("fail")]
    assert failures == [], json.dumps(failures, indent=1)
    assert {entry["algorithm"] for entry in report["mac"]} <= {
        "hmac-sha2-512-etm@openssh.com", "hmac-sha2-256-etm@openssh.com", "umac-128-etm@openssh.com"}
    # One host key, ed25519: an RSA one cost seconds of each first start and no client here needs it.
    assert [entry["algorithm"] for entry in report["key"]] == ["ssh-ed25519"], report["key"]
    # No finite-field Diffie-Hellman, which a flood of connections makes a denial of service (DHEat): what
    # ssh-audit's rate heuristic warns of, and what no rate limit this sshd has (OpenSSH 9.2) would stop.
    assert not [entry["algorithm"] for entry in report["kex"] if entry["algorithm"].startswith("diffie-hellman")]


@pytest.mark.flavor_difference
def test_the_session_environment_hides_secrets_and_is_readable_by_the_user_only(image, user_key):
    with running_container(image, options=[*PUBLISH_SSH, *NO_JUPYTER, "--env", "HF_TOKEN=hf_secret_value_123",
                                           "--env", "WANDB_API_KEY=wandb-secret-456", "--env", "NCCL_DEBUG=INFO",
                                           "--env", f"SSH_AUTHORIZED_KEYS={public_line(user_key)}"]) as container:
        listing = container.run("stat -c '%a %U %G' /etc/container/session-env.sh", user=None).stdout.split()
        assert listing == ["640", "root", "dev"], listing
        with ssh_session(container.published_port(2222), key=user_key) as client:
            _, out, _ = run(client, "echo NCCL=$NCCL_DEBUG HF=${HF_TOKEN:-unset} WANDB=${WANDB_API_KEY:-unset}")
        assert out.split() == ["NCCL=INFO", "HF=unset", "WANDB=unset"]
        contents = container.run("cat /etc/container/session-env.sh", user=None).stdout
        assert "hf_secret_value_123" not in contents and "wandb-secret-456" not in contents


@pytest.mark.tier("full")
def test_health_probes_leave_nothing_in_the_log(ssh_container):
    # Each probe used to leave sshd's "Connection closed ... [preauth]" lines. Docker keeps the last five
    # probes in Health.Log; wait for three new ones to have ended (the image probes every 5 s).
    def probe_ends() -> set[str]:
        return {probe["End"] for probe in ssh_container.state()["Health"]["Log"]}
    before, earlier_probes = ssh_container.logs(), probe_ends()
    wait_until(lambda: len(probe_ends() - earlier_probes) >= 3, SETTLES_S, interval=1,
               failure="the health check did not run three times in 60 s")
    added = ssh_container.logs()[len(before):]
    assert ssh_container.state()["Health"]["Status"] == "healthy"
    assert "preauth" not in added and "Connection" not in added, added


def test_an_ssh_session_compiles_into_the_users_cache(ssh_port, user_key):
    """torch.compile's caches in ~/.cache, which compose keeps (tests/image/test_compile_cache.py: the
    other ways in)."""
    where = ("from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir; "
             "print(cache_dir(), triton_cache_dir(0))")
    with ssh_session(ssh_port, key=user_key) as client:
        status, out, err = run(client, f"python -c {shlex.quote(where)}")
    assert status == 0 and out.split()[-2:] == ["/home/dev/.cache/torchinductor", "/home/dev/.cache/triton"], out + err
