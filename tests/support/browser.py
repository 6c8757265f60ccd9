"""A real browser for the suites: Debian's Chromium (/usr/bin/chromium), driven by Playwright.
Screenshots go to test-artifacts/."""
from __future__ import annotations

import shutil
from collections.abc import Iterator

from tests.support import REPO_ROOT
from tests.support.host_tools import skip_where_missing

# Chromium as root in a sandbox-less CI machine, with nothing that calls out to the internet.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS_DIR = REPO_ROOT / "test-artifacts"


def chromium() -> Iterator:
    """Yields a launched Chromium (a Playwright Browser); skips where Chromium is missing, except in CI."""
    executable = shutil.which("chromium")
    if not executable:
        skip_where_missing("no Chromium on this host: apt-get install chromium")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def screenshot(page, name: str) -> None:
    ARTIFACTS_DIR.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS_DIR / name), full_page=True)
