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


# Each wait of the suites, and where its limit sits among its positional arguments.
LIMIT_POSITION = {"wait_until": 1, "wait_for_log": 1, "wait_until_healthy": 0, "wait_until_started": 0}


def typed_wait_limits(path: Path) -> list[str]:
    """The lines of PATH whose wait takes its timeout as a number."""
    found = []
    for name, call in named_calls(path):
        if name not in LIMIT_POSITION:
            continue
        position = LIMIT_POSITION[name]
        limit = next((keyword.value for keyword in call.keywords if keyword.arg == "timeout"),
                     call.args[position] if len(call.args) > position else None)
        if isinstance(limit, ast.Constant) and type(limit.value) in (int, float):
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
                      "wait_until(ready, GRACE_PERIOD_S + 30)\ncontainer.wait_for_log('saved', 10)\n"
                      "container.wait_for_log('saved')\ncontainer.wait_until_healthy(60)\n"
                      "container.wait_until_started(timeout=STARTS_S)\n")
    assert len(typed_wait_limits(sample)) == 4
