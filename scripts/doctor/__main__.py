"""`doctor`, `python -m doctor`, or `python scripts/doctor` from a checkout (a folder Python runs)."""
import os
import sys

if not __package__:  # run as a folder: Python put this folder on sys.path; the package needs its parent
    sys.path[0] = os.path.dirname(os.path.abspath(sys.path[0]))

from doctor.cli import main  # noqa: E402
from doctor.report import EXIT_CODES, FAIL  # noqa: E402

if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()  # inside the try: a closed pipe shows up here, not in the interpreter's exit
        sys.exit(status)
    except BrokenPipeError:
        # `doctor | head` closed the pipe: the reader has what it wanted, so end quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_CODES[FAIL])
