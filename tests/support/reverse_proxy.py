"""Debian's real nginx in front of a container, as docs/reverse-proxy.md's example has it: TLS, the /gpu/
prefix and websockets. The example runs as it stands; only its addresses and certificate paths are
replaced."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator

import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.containers import free_port
from tests.support.host_tools import skip_where_missing
from tests.support.waiting import wait_until

NGINX = "/usr/sbin/nginx"
PREFIX = "/gpu/"
EXAMPLE = REPO_ROOT / "docs" / "reverse-proxy.md"
TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_example() -> str:
    """The nginx block of docs/reverse-proxy.md."""
    return re.search(r"```nginx\n(.*?)```", EXAMPLE.read_text(), re.DOTALL)[1]


def make_certificate(folder: str) -> tuple[str, str]:
    cert, key = f"{folder}/proxy.pem", f"{folder}/proxy.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def nginx_config(folder: str, site: str) -> str:
    """A main configuration around SITE that keeps every file in FOLDER (pid, logs, buffers)."""
    return "\n".join([
        "daemon off;", "worker_processes 1;", f"pid {folder}/nginx.pid;", f"error_log {folder}/error.log;",
        "events {}", "http {", "access_log off;",
        *(f"{kind}_temp_path {folder}/{kind};" for kind in TEMP_FOLDERS),
        site, "}",
    ])


@contextlib.contextmanager
def nginx_in_front_of(jupyter_port: int) -> Iterator[tuple[str, str]]:
    """nginx serving https://127.0.0.1:PORT/gpu/ in front of JupyterLab published on JUPYTER_PORT (started
    with JUPYTER_BASE_URL=/gpu/); yields (that base URL, its certificate)."""
    if not os.path.exists(NGINX):
        skip_where_missing("nginx is missing: sudo bash .ci/install-nginx.sh")
    folder = tempfile.mkdtemp(prefix="pt-nginx-")
    os.chmod(folder, 0o755)  # nginx's workers run as an unprivileged user and buffer into this folder
    cert, key = make_certificate(folder)
    port = free_port()
    site = (nginx_example()
            .replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
            .replace("/etc/ssl/certs/gpu-box.pem", cert).replace("/etc/ssl/private/gpu-box.key", key)
            .replace("127.0.0.1:8888", f"127.0.0.1:{jupyter_port}"))
    with open(f"{folder}/nginx.conf", "w") as config:
        config.write(nginx_config(folder, site))
    for kind in TEMP_FOLDERS:
        os.mkdir(f"{folder}/{kind}")
        os.chmod(f"{folder}/{kind}", stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
    server = subprocess.Popen([NGINX, "-p", folder, "-c", f"{folder}/nginx.conf"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"https://127.0.0.1:{port}{PREFIX}"

    def answers() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"nginx exited: {server.stdout.read()}")
        try:
            requests.get(base + "api/status", verify=cert, timeout=HTTP_TIMEOUT_S)
            return True  # nginx answers; what JupyterLab said through it is for the tests to judge
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            return False
    try:
        wait_until(answers, SETTLES_S, failure="nginx did not answer")
        yield base, cert
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
