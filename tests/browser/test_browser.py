"""JupyterLab in a real browser: the token URL opens the sample notebook, which runs to the end and
plots the trainer's metrics; without the token the browser lands on the login page.

Chromium is Debian's (/usr/bin/chromium), driven by Playwright. Screenshots go to test-artifacts/.
    make test PYTEST_ARGS="tests/browser/test_browser.py"
"""
from __future__ import annotations

import re
import time

import pytest

from tests.support.browser import chromium, screenshot

pytestmark = pytest.mark.tier("landing")

TOKEN = "browser-test-token-5e0b7a"
NOTEBOOK_RUN_TIMEOUT_S = 300
SAMPLE_NOTEBOOK = "examples/ddp_quickstart.ipynb"  # in /workspace, JupyterLab's root
SAMPLE_NOTEBOOK_CELLS = 9


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


@pytest.fixture
def jupyter_url(containers) -> str:
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                    "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    return f"http://127.0.0.1:{container.published_port(8888)}"


def test_the_sample_notebook_opens_by_default_and_runs_to_the_end(browser, jupyter_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # The URL the logs print: the server's root, which opens the sample notebook.
        page.goto(f"{jupyter_url}/?token={TOKEN}")
        page.get_by_role("heading", name="Distributed training from a notebook").wait_for(timeout=90_000)
        # Run All before the kernel is up queues nothing on a loaded machine: wait for the idle kernel.
        page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=120_000)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        # The environment cell answers first; read it while it is on screen.
        environment = page.locator(".jp-OutputArea-output", has_text="CUDA").first
        environment.wait_for(timeout=120_000)
        assert "torch" in environment.inner_text(), "the environment cell printed nothing"
        # Run All scrolls to the last cell, and JupyterLab leaves cells far out of view out of the page, so
        # whether the run has ended is read from the notebook as the browser saves it, not from the screen.
        outputs = outputs_when_the_run_ends(page, jupyter_url)
        first_loss, last_loss = map(float, re.search(r"loss went from ([\d.]+) to ([\d.]+)", outputs).groups())
        assert last_loss < first_loss, "the notebook's run did not learn"
        # What a user sees: scrolled back up to the last code cell, its text and its plot are on the page.
        result = page.locator(".jp-OutputArea-output", has_text="loss went from")
        for _ in range(SAMPLE_NOTEBOOK_CELLS):
            if result.is_visible():
                break
            page.keyboard.press("k")  # command mode: select the cell above, which scrolls it into view
        result.wait_for(timeout=10_000)
        result.scroll_into_view_if_needed()  # for the screenshot
        assert page.locator(".jp-RenderedImage img").count() >= 1, "the metrics plot is missing"
    finally:
        screenshot(page, "jupyterlab-sample-notebook.png")
        page.close()


def outputs_when_the_run_ends(page, jupyter_url: str) -> str:
    """The text of every output once the last cell's has its "loss went from" line: saved by the browser
    (Ctrl+S) and read back through the contents API every few seconds. An error output, or no end within
    NOTEBOOK_RUN_TIMEOUT_S, fails with what the cells had printed."""
    deadline = time.monotonic() + NOTEBOOK_RUN_TIMEOUT_S
    page.keyboard.press("Escape")  # command mode, where Ctrl+S saves the notebook
    while True:
        page.keyboard.press("Control+s")
        page.wait_for_timeout(3_000)
        response = page.request.get(f"{jupyter_url}/api/contents/{SAMPLE_NOTEBOOK}",
                                    headers={"Authorization": f"token {TOKEN}"})
        assert response.ok, f"the contents API answered {response.status}: {response.text()[:300]}"
        cells = [cell for cell in response.json()["content"]["cells"] if cell["cell_type"] == "code"]
        text = "\n".join(output_text(output) for cell in cells for output in cell.get("outputs", []))
        errors = [output for cell in cells for output in cell.get("outputs", []) if output["output_type"] == "error"]
        assert not errors, f"a cell failed: {output_text(errors[0])}\n--- the outputs so far:\n{text[-3000:]}"
        if "loss went from" in "".join(map(output_text, cells[-1].get("outputs", []))):
            assert any("image/png" in output.get("data", {}) for output in cells[-1]["outputs"]), \
                "the last cell printed its result but drew no plot"
            return text
        assert time.monotonic() < deadline, (f"the notebook's run did not end in {NOTEBOOK_RUN_TIMEOUT_S} s; its "
                                             f"outputs so far (the end):\n{text[-3000:]}")


def output_text(output: dict) -> str:
    """What an output of a saved notebook shows as text: a stream's, a result's plain text, an error's."""
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}"
    return "".join(output.get("data", {}).get("text/plain", ""))


def test_without_the_token_the_browser_reaches_the_login_page(browser, jupyter_url):
    page = browser.new_page()
    try:
        page.goto(f"{jupyter_url}/lab")
        assert "/login" in page.url
        page.get_by_role("button", name="Log in").first.wait_for(timeout=30_000)
        assert page.locator("input[type='password']").count() >= 1
        screenshot(page, "jupyterlab-login.png")
    finally:
        page.close()
