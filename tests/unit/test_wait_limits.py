"""A busy machine must not fail a test: every wait for a condition (tests/support/waiting.py) is limited by
SETTLES_S or STARTS_S (tests/support/__init__.py), or by a named limit of what it waits for (a grace
period, a culler's interval), never by a number typed at the call: waits typed as 10 and 30 s once failed
under CI's own load.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.suite_calls import SUITE_FILES, named_calls, suite_file_id


def typed_wait_limits(path: Path) -> list[str]:
    """The lines of PATH whose wait_until takes its timeout as a number."""
    found = []
    for name, call in named_calls(path):
        limit = call.args[1] if len(call.args) > 1 else next(
            (keyword.value for keyword in call.keywords if keyword.arg == "timeout"), None)
        if name == "wait_until" and isinstance(limit, ast.Constant):
            found.append(f"{path.name}:{call.lineno}")
    return found


@pytest.mark.parametrize("path", SUITE_FILES, ids=suite_file_id)
def test_every_wait_is_limited_by_a_named_limit(path: Path) -> None:
    typed = typed_wait_limits(path)
    assert not typed, f"waits with a limit typed as a number: {typed}; use SETTLES_S or STARTS_S (from " \
                      "tests.support), or a named limit of what the wait is for"


def test_the_check_finds_a_typed_limit(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("wait_until(ready, 30)\nwait_until(ready, timeout=5.0)\nwait_until(ready, SETTLES_S)\n"
                      "wait_until(ready, GRACE_PERIOD_S + 30)\n")
    assert len(typed_wait_limits(sample)) == 2
