"""JupyterLab in a real browser: the token URL opens the sample notebook, which runs to the end and
plots the trainer's metrics; without the token the browser lands on the login page.

Chromium is Debian's (/usr/bin/chromium), driven by Playwright. Screenshots go to test-artifacts/.
    make test PYTEST_ARGS="tests/browser/test_browser.py"
"""
from __future__ import annotations

import re

import pytest

from tests.support.browser import chromium, screenshot

pytestmark = pytest.mark.tier("landing")

TOKEN = "browser-test-token-5e0b7a"
NOTEBOOK_RUN_TIMEOUT_MS = 300_000


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
        # The environment cell answers first; read it while it is on screen (JupyterLab stops rendering
        # cells that scroll far out of view, so it may be gone from the page once the run's output is long).
        environment = page.locator(".jp-OutputArea-output", has_text="CUDA").first
        environment.wait_for(timeout=120_000)
        assert "torch" in environment.inner_text(), "the environment cell printed nothing"
        # The last cell's output (its source holds the same words, so look in outputs only).
        page.locator(".jp-OutputArea-output", has_text="loss went from").wait_for(timeout=NOTEBOOK_RUN_TIMEOUT_MS)
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        first_loss, last_loss = map(float, re.search(r"loss went from ([\d.]+) to ([\d.]+)", "\n".join(outputs)).groups())
        assert last_loss < first_loss, "the notebook's run did not learn"
        assert not any("Traceback" in text for text in outputs), "\n".join(outputs)
        assert page.locator(".jp-RenderedImage img").count() >= 1, "the metrics plot is missing"
    finally:
        screenshot(page, "jupyterlab-sample-notebook.png")
        page.close()


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
