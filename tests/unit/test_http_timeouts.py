"""A busy machine must not fail a test: every HTTP request a suite makes waits HTTP_TIMEOUT_S
(tests/support/__init__.py), the one generous limit that only keeps a hung server from hanging the
suite. A number typed at a call is how a 10 s limit once failed tests under CI's own load.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.suite_calls import SUITE_FILES, named_calls, suite_file_id

HTTP_CALLS = {"get", "post", "put", "patch", "delete", "head", "request", "urlopen"}


def typed_http_timeouts(path: Path) -> list[str]:
    """The lines of PATH whose HTTP call takes a timeout written as a number."""
    return [f"{path.name}:{call.lineno}" for name, call in named_calls(path) if name in HTTP_CALLS and any(
        keyword.arg == "timeout" and isinstance(keyword.value, ast.Constant) for keyword in call.keywords)]


@pytest.mark.parametrize("path", SUITE_FILES, ids=suite_file_id)
def test_every_http_request_waits_the_suites_one_limit(path: Path) -> None:
    typed = typed_http_timeouts(path)
    assert not typed, f"HTTP requests with a timeout typed as a number: {typed}; use timeout=HTTP_TIMEOUT_S " \
                      "(from tests.support), and in a poll count a timeout as 'not yet'"


def test_the_check_finds_a_typed_timeout(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import requests\nrequests.get('http://x', timeout=5)\nsession.post(url, timeout=T)\n")
    assert len(typed_http_timeouts(sample)) == 1
