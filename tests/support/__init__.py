"""Helpers the test suites share: containers, SSH, waiting, tiny training runs, host tools."""
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# One HTTP request to a server under test. Generous, because on a CI machine busy with builds and training
# a healthy server can take seconds to answer; the limit only keeps a hung server from hanging the suite.
HTTP_TIMEOUT_S = 60

# How long a test waits for a condition (a log line, a file, a process, a port that answers) before the
# wait fails. Waits return as soon as the condition holds, so only a hung server ever reaches a limit:
# they are generous, and set here rather than as numbers at each wait (a busy CI machine once failed
# tests whose waits were typed as 10 and 30 s).
SETTLES_S = 120  # what follows at once: a process shows up, a log line, a port opens, a server answers
STARTS_S = 300   # what starts up: a container's services, a hub's spawn, a trainer's first steps
