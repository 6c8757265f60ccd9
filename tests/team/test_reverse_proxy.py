"""JupyterLab under /gpu/ behind Debian's real nginx, with TLS and websockets: the example of
docs/reverse-proxy.md, run as it stands (only its addresses and certificate paths are replaced).

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_reverse_proxy.py"
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S, STARTS_S
from tests.support.containers import free_port, running_container
from tests.support.host_tools import skip_where_missing
from tests.support.jupyter_websockets import JupyterAccess, run_in_kernel, run_in_terminal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

NGINX = "/usr/sbin/nginx"
PREFIX = "/gpu/"
EXAMPLE = REPO_ROOT / "docs" / "reverse-proxy.md"


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
        *(f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
        site, "}",
    ])


@pytest.fixture(scope="module")
def jupyter_under_a_prefix(image):
    with running_container(image, options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                           "--env", f"JUPYTER_BASE_URL={PREFIX}"]) as container:
        yield container


@pytest.fixture(scope="module")
def nginx(jupyter_under_a_prefix) -> Iterator[tuple[str, str]]:
    """nginx serving https://127.0.0.1:PORT/gpu/ in front of the container; yields (base URL, its certificate)."""
    if not os.path.exists(NGINX):
        skip_where_missing("nginx is missing: sudo bash .ci/install-nginx.sh")
    folder = tempfile.mkdtemp(prefix="pt-nginx-")
    os.chmod(folder, 0o755)  # nginx's workers run as an unprivileged user and buffer into this folder
    cert, key = make_certificate(folder)
    port = free_port()
    site = (nginx_example()
            .replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
            .replace("/etc/ssl/certs/gpu-box.pem", cert).replace("/etc/ssl/private/gpu-box.key", key)
            .replace("127.0.0.1:8888", f"127.0.0.1:{jupyter_under_a_prefix.published_port(8888)}"))
    with open(f"{folder}/nginx.conf", "w") as config:
        config.write(nginx_config(folder, site))
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
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


def printed_token_path(container) -> str:
    """The path and query of the URL that `make logs` shows."""
    match = re.search(r"JupyterLab: http://127\.0\.0\.1:8888(/\S*\?token=[0-9a-f]{48})", container.logs())
    assert match, container.logs()
    return match[1]


def test_the_printed_url_opens_jupyterlab_through_the_proxy(jupyter_under_a_prefix, nginx):
    base, cert = nginx
    path = printed_token_path(jupyter_under_a_prefix)
    assert path.startswith(PREFIX)
    page = requests.get(base.removesuffix(PREFIX) + path, verify=cert, timeout=HTTP_TIMEOUT_S)
    assert page.status_code == 200 and page.url.startswith(base + "lab"), page.url
    assert "JupyterLab" in page.text


def test_a_kernel_and_a_terminal_work_over_websockets_through_the_proxy(jupyter_under_a_prefix, nginx):
    base, cert = nginx
    token = printed_token_path(jupyter_under_a_prefix).rsplit("=", 1)[1]
    server = JupyterAccess(base, token=token, ca_bundle=cert)
    assert run_in_kernel(server, "import torch; print(torch.ones(2).sum().item())").strip() == "2.0"
    assert "proxied-terminal-ok" in run_in_terminal(server, 'echo "proxied-terminal""-ok"', "proxied-terminal-ok")


@pytest.mark.tier("full")
def test_tensorboard_is_served_under_the_prefix_only_with_authentication(jupyter_under_a_prefix, nginx):
    base, cert = nginx
    token = printed_token_path(jupyter_under_a_prefix).rsplit("=", 1)[1]
    anonymous = requests.get(base + "tensorboard/", verify=cert, timeout=HTTP_TIMEOUT_S, allow_redirects=False)
    assert anonymous.status_code in (302, 403), anonymous.status_code
    if anonymous.status_code == 302:
        assert f"{PREFIX}login" in anonymous.headers["Location"]
    def tensorboard_page() -> requests.Response | None:
        try:  # TensorBoard starts on the first request: its first answers may be slow
            response = requests.get(base + "tensorboard/", params={"token": token}, verify=cert,
                                    timeout=HTTP_TIMEOUT_S)
        except requests.Timeout:
            return None
        return response if response.status_code == 200 else None
    page = wait_until(tensorboard_page, STARTS_S, interval=2, failure="TensorBoard did not answer under the prefix")
    assert "tensorboard" in page.text.lower()


def test_the_container_is_healthy_under_the_prefix(jupyter_under_a_prefix):
    health = jupyter_under_a_prefix.state()["Health"]
    assert health["Status"] == "healthy"
    assert "healthy: jupyter" in health["Log"][-1]["Output"]
