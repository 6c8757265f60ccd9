"""Helpers the test suites share: containers, SSH, waiting, tiny training runs, host tools."""
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# One HTTP request to a server under test. Generous, because on a CI machine busy with builds and training
# a healthy server can take seconds to answer; the limit only keeps a hung server from hanging the suite.
HTTP_TIMEOUT_S = 60
