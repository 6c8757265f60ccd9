"""Helpers the test suites share: containers, SSH, waiting, tiny training runs, host tools."""
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
