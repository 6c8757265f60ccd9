"""The argument parser of the trainer and the benchmarks: a bad flag is one line, not a usage dump."""
from __future__ import annotations

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad flag as one line that names it and points at --help, instead of the usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
