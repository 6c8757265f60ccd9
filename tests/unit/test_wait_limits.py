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


# The suites' waits, and where each one's limit may sit among its positional arguments (a container's
# wait_for_log takes it second, a multinode job's third). Playwright's wait_for, in milliseconds, is not
# among them.
LIMIT_POSITIONS = {"wait_until": (1,), "wait_for_log": (1, 2), "wait_until_healthy": (0,),
                   "wait_until_started": (0,), "wait_for_exit": (1,), "wait_for_text": (2,),
                   "wait_for_job_state": (2,)}


def is_number(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def typed_wait_limits(path: Path) -> list[str]:
    """The lines of PATH whose wait takes its timeout as a number."""
    found = []
    for name, call in named_calls(path):
        if name not in LIMIT_POSITIONS:
            continue
        keyword = next((keyword.value for keyword in call.keywords if keyword.arg == "timeout"), None)
        positional = [call.args[position] for position in LIMIT_POSITIONS[name] if position < len(call.args)]
        if any(is_number(limit) for limit in [keyword, *positional]):
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
                      "container.wait_until_started(timeout=STARTS_S)\njob.wait_for_log('node0', 'saved', 90)\n"
                      "slurm.wait_for_job_state(job, {'PENDING'}, timeout=60)\n")
    assert len(typed_wait_limits(sample)) == 6
