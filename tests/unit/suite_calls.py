"""The calls the suites make, read from their source: what the unit checks of their limits walk
(test_wait_limits.py, test_http_timeouts.py)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO_ROOT

# Every file of the suites that run against images and containers; the unit tier makes no waits.
SUITE_FILES = sorted(path for path in (REPO_ROOT / "tests").rglob("*.py") if "unit" not in path.parts)


def named_calls(path: Path) -> Iterator[tuple[str, ast.Call]]:
    """Each call in the Python file PATH, with the name it calls: `f` for f(...), and `f` for x.f(...)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")), node


def suite_file_id(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()
