"""A real SSH client (paramiko) for the tests: key generation, login, commands with a timeout."""
from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import paramiko

SSH_TIMEOUT_S = 20


def generate_key() -> paramiko.Ed25519Key:
    """A fresh ed25519 key pair (paramiko cannot generate ed25519, so ssh-keygen's format is parsed)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem.decode()))


def public_line(key: paramiko.PKey, comment: str = "test@host") -> str:
    return f"{key.get_name()} {key.get_base64()} {comment}"


@contextlib.contextmanager
def ssh_session(port: int, user: str = "dev", key: paramiko.PKey | None = None,
                password: str | None = None) -> Iterator[paramiko.SSHClient]:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect("127.0.0.1", port=port, username=user, pkey=key, password=password, timeout=SSH_TIMEOUT_S,
                   banner_timeout=SSH_TIMEOUT_S, auth_timeout=SSH_TIMEOUT_S, allow_agent=False,
                   look_for_keys=False)
    try:
        yield client
    finally:
        client.close()


def run(client: paramiko.SSHClient, command: str, timeout: float = 120) -> tuple[int, str, str]:
    """Runs COMMAND in the session; returns (exit status, stdout, stderr)."""
    _, stdout, stderr = client.exec_command(command, timeout=timeout)
    status = stdout.channel.recv_exit_status()
    return status, stdout.read().decode(), stderr.read().decode()


def host_key_fingerprint(port: int) -> str:
    transport = paramiko.Transport(("127.0.0.1", port))
    transport.banner_timeout = SSH_TIMEOUT_S  # as ssh_session's; paramiko's own default is 15 s
    try:
        transport.start_client(timeout=SSH_TIMEOUT_S)
        return transport.get_remote_server_key().fingerprint
    finally:
        transport.close()
