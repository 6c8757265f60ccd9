"""Inside JupyterLab: TensorBoard through jupyter-server-proxy behind Jupyter's token (a real request and
Chromium), refused without it; NVIDIA's GPU dashboards behind the same token; nvitop installed.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_jupyter_proxy.py
"""
from __future__ import annotations

import shutil

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.containers import host_has_nvidia_runtime, running_container
from tests.support.host_tools import skip_where_missing
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

TOKEN = "proxy-test-token-3b9e51"
RUN_NAME = "demo-run"
# A TensorBoard log the way the trainer's --tensorboard-dir writes it, in the folder TensorBoard reads.
WRITE_EVENTS = ("python -c \"from torch.utils.tensorboard import SummaryWriter; "
                f"w = SummaryWriter('/workspace/runs/{RUN_NAME}'); "
                "[w.add_scalar('train/loss', 2.0 / (step + 1), step) for step in range(20)]; w.close()\"")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def jupyter(image):
    """A container with JupyterLab (no SSH) and a TensorBoard log in its workspace; its base URL."""
    with running_container(image, options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                           "--env", f"JUPYTER_TOKEN={TOKEN}"], healthy=False) as container:
        written = container.run(WRITE_EVENTS)
        assert written.rc == 0, written.stderr
        url = f"http://127.0.0.1:{container.published_port(8888)}"
        assert get_with_token(f"{url}/api").status_code == 200, container.logs()[-2000:]
        yield container, url


def get_with_token(url: str, timeout: float = 90) -> requests.Response:
    """GET with the token until it answers 200 or TIMEOUT passes: JupyterLab takes a while to start, and
    the proxy starts TensorBoard on its first request."""
    last: list[requests.Response | Exception] = []

    def answered() -> requests.Response | None:
        try:
            response = requests.get(url, headers={"Authorization": f"token {TOKEN}"}, timeout=HTTP_TIMEOUT_S)
        except (requests.ConnectionError, requests.Timeout) as error:  # not up yet, or too busy to answer
            last[:] = [error]
            return None
        last[:] = [response]
        return response if response.status_code == 200 else None
    try:
        return wait_until(answered, timeout, interval=1, failure=lambda: f"{url} did not answer: {last}")
    except AssertionError:
        if last and isinstance(last[0], requests.Response):
            return last[0]  # the caller asserts on the status it got
        raise


def test_tensorboard_answers_through_jupyter_with_the_token_and_reads_the_workspace(jupyter):
    _, url = jupyter
    page = get_with_token(f"{url}/tensorboard/")
    assert page.status_code == 200 and "<tb-webapp>" in page.text, page.text[:500]
    # TensorBoard scans its folder in the background after it starts: the first list may still be empty.
    def runs_listed() -> requests.Response | None:
        runs = get_with_token(f"{url}/tensorboard/data/runs")
        assert runs.status_code == 200, runs.text[:500]
        return runs if f"runs/{RUN_NAME}" in runs.json() else None
    wait_until(runs_listed, SETTLES_S, failure=lambda: get_with_token(f"{url}/tensorboard/data/runs").text[:500])


@pytest.mark.parametrize("path", ["/tensorboard/", "/tensorboard/data/runs"])
def test_tensorboard_is_refused_without_the_token(jupyter, path):
    _, url = jupyter
    get_with_token(f"{url}/tensorboard/")  # started, so a refusal is the token's doing
    response = requests.get(f"{url}{path}", allow_redirects=False, timeout=HTTP_TIMEOUT_S)
    assert response.status_code in (302, 403), response.status_code
    if response.status_code == 302:
        assert response.headers["Location"].startswith("/login"), response.headers["Location"]
    wrong = requests.get(f"{url}{path}", headers={"Authorization": "token not-the-token"}, allow_redirects=False,
                         timeout=HTTP_TIMEOUT_S)
    assert wrong.status_code in (302, 403), wrong.status_code


@pytest.mark.tier("full")
def test_chromium_shows_the_tensorboard_run_through_jupyter(jupyter):
    chromium = shutil.which("chromium")
    if not chromium:
        skip_where_missing("no Chromium on this host: apt-get install chromium")
    _, url = jupyter
    get_with_token(f"{url}/tensorboard/")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/tensorboard/?token={TOKEN}")
            page.get_by_text(RUN_NAME).first.wait_for(timeout=60_000)
            page.get_by_text("train/loss").first.wait_for(timeout=30_000)  # the run's scalar card
            assert "/login" not in page.url
        finally:
            (REPO_ROOT / "test-artifacts").mkdir(exist_ok=True)
            page.screenshot(path=str(REPO_ROOT / "test-artifacts" / "tensorboard-through-jupyter.png"))
            browser.close()


def test_the_gpu_dashboards_answer_behind_the_token_and_nvitop_is_installed(jupyter):
    container, url = jupyter
    # The dashboards' server side reports what NVML sees (no GPU here); the lab page loads their frontend.
    status = get_with_token(f"{url}/nvdashboard/accelerators/check")
    assert status.status_code == 200, status.text[:300]
    ngpus = status.json()["ngpus"]
    assert ngpus >= 1 if host_has_nvidia_runtime() else ngpus == 0, status.text
    refused = requests.get(f"{url}/nvdashboard/accelerators/check", allow_redirects=False, timeout=HTTP_TIMEOUT_S)
    assert refused.status_code in (302, 403), refused.status_code
    lab = get_with_token(f"{url}/lab")
    assert '"jupyterlab-nvdashboard"' in lab.text and '"@jupyterhub/jupyter-server-proxy"' in lab.text
    assert container.run("nvitop --version").rc == 0
