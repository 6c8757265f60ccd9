"""`--user` with the uid of another account of the image (Debian's sshd is uid 100, nobody 65534), as a
runtime that picks ids by number may: that uid is the container user, and every line start-up prints is
about it and what it can write, never about the image's user (uid 1000) or a read-only root it does not have.

    make test-image PYTEST_ARGS=tests/runtimes/test_image_account_uid.py
"""
from __future__ import annotations

import re

import pytest

from tests.support.containers import run_container_to_completion

pytestmark = pytest.mark.tier("full")

ACCOUNTS = {"sshd": "100:65534", "nobody": "65534:65534"}


@pytest.mark.parametrize("account", ACCOUNTS)
def test_another_accounts_uid_gets_lines_about_itself_only(image, account):
    user = ACCOUNTS[account]
    result = run_container_to_completion(image, options=["--user", user], command=["true"])
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not re.search(r"uid 1000\b|read-only", "\n".join(lines)), result.stderr
    uid = user.split(":")[0]
    home = [line for line in lines if "HOME=" in line]
    assert len(home) == 1 and f"uid {uid}:" in home[0] and f"/tmp/home-{uid}" in home[0], result.stderr
    workspace = [line for line in lines if "/workspace" in line]
    assert len(workspace) == 1 and f"uid {user};" in workspace[0], result.stderr
