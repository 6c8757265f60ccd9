"""A check's verdict and the words findings are written in: the statuses, the Result each check returns,
how the worst one becomes doctor's exit code, and the short lines the container's start-up relays."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
SEVERITY = [SKIP, PASS, WARN, FAIL]
EXIT_CODES = {PASS: 0, WARN: 1, FAIL: 2}


@dataclasses.dataclass(frozen=True)
class Result:
    """One check's verdict: a one-line finding, and for warn or fail a one-line fix."""
    name: str
    status: str
    finding: str
    fix: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=SEVERITY.index, default=PASS)


def overall_status(results: list[Result]) -> str:
    """The worst status of all checks; skipped checks count as passed."""
    return max(worst(result.status for result in results), PASS, key=SEVERITY.index)


def brief_lines(results: list[Result]) -> list[str]:
    """What warned or failed, one line each with its fix (the container's start-up relays these)."""
    return [f"{result.finding}; fix: {result.fix}" if result.fix else result.finding
            for result in results if result.status in (WARN, FAIL)]


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.0f} TiB"


def read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
