"""JupyterLab under /gpu/ behind Debian's real nginx, with TLS and websockets: the example of
docs/reverse-proxy.md, run as it stands (only its addresses and certificate paths are replaced).

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_reverse_proxy.py"
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, STARTS_S
from tests.support.containers import running_container
from tests.support.jupyter_websockets import JupyterAccess, run_in_kernel, run_in_terminal
from tests.support.reverse_proxy import PREFIX, nginx_in_front_of
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")


@pytest.fixture(scope="module")
def jupyter_under_a_prefix(image):
    with running_container(image, options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                           "--env", f"JUPYTER_BASE_URL={PREFIX}"]) as container:
        yield container


@pytest.fixture(scope="module")
def nginx(jupyter_under_a_prefix) -> Iterator[tuple[str, str]]:
    """nginx serving https://127.0.0.1:PORT/gpu/ in front of the container; yields (base URL, its certificate)."""
    with nginx_in_front_of(jupyter_under_a_prefix.published_port(8888)) as proxy:
        yield proxy


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
