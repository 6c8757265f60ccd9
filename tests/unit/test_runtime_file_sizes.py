"""The runtime's files stay small enough to read whole: no file over 350 lines, no line over 110 characters.

The runtime is docker/rootfs/usr/local/lib/container/ (docs/how-it-runs.md): the supervisor, the Jupyter
extensions, the hooks in every user's Python and the start-up steps. A .pth file counts too: Python runs
its import lines one line each, so a long one hides the hook's logic where nothing can wrap it.
"""
from __future__ import annotations

import pytest

from tests.support import REPO_ROOT

RUNTIME = REPO_ROOT / "docker/rootfs/usr/local/lib/container"
MOST_LINES = 350
WIDEST_LINE = 110


def runtime_files() -> list:
    return sorted(path for path in RUNTIME.rglob("*") if path.is_file())


def test_the_runtime_folder_holds_files_to_check() -> None:
    names = {path.name for path in runtime_files()}
    assert {"supervisor.py", "stop_policy.py", "line-buffered-output.pth", "jupyter_work_first.py"} <= names


@pytest.mark.parametrize("path", runtime_files(), ids=lambda path: str(path.relative_to(RUNTIME)))
def test_no_runtime_file_is_too_long_or_too_wide(path) -> None:
    lines = path.read_text().splitlines()
    wide = [number for number, line in enumerate(lines, 1) if len(line) > WIDEST_LINE]
    assert len(lines) <= MOST_LINES, f"{len(lines)} lines: split it by job (docs/contributing.md)"
    assert not wide, f"lines over {WIDEST_LINE} characters: {wide}"

