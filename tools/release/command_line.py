"""What every release tool shares: the one error a user can cause, and the command-line shell that turns
it into one `error:` line and exit code 2."""
from __future__ import annotations

import sys
from collections.abc import Callable


class ReleaseError(Exception):
    """A user error, reported as one line that says what is wrong and what to do."""


def run_command(argv: list[str], usage: str, action: Callable[..., object]) -> int:
    """The command-line shell of every release tool: checks the argument count against USAGE, runs
    ACTION on the arguments and turns a ReleaseError into one `error:` line and exit code 2."""
    expected = len(usage.split("   ")[0].split()) - 1
    if len(argv) - 1 != expected:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    try:
        action(*argv[1:])
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
