"""The image's Python writes its output a whole line at a time, and at once: a log many processes share
(torchrun's ranks, the container's services) keeps every line whole, and a line shows the moment it ends.

    make test PYTEST_ARGS="tests/image/test_python_output.py"
"""
from __future__ import annotations

import collections
import re

import pytest

pytestmark = pytest.mark.tier("full")

LINES_PER_RANK = 5000
PRINTS = r'''
import os, sys
stream = sys.stderr if os.environ["STREAM"] == "stderr" else sys.stdout
for line in range(LINES):
    print(f"rank{os.environ['RANK']} line {line:05d} " + "x" * 60, file=stream)
'''.replace("LINES", str(LINES_PER_RANK))
WHOLE_LINE = re.compile(r"^(rank[01]) line \d{5} x{60}$", re.MULTILINE)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_two_ranks_printing_into_one_pipe_leave_every_line_whole(training_container, stream):
    """torchrun starts every worker with `python -u`. Before, unbuffered output (that, and the image's
    PYTHONUNBUFFERED=1) wrote each print as two writes, its text and its newline, and the other rank's
    line landed between them: about 250 of the 10,000 lines broken on a 2-core machine."""
    script = "/tmp/prints.py"
    assert training_container.run(f"cat > {script} <<'PY'\n{PRINTS}\nPY").rc == 0
    result = training_container.run(
        f"STREAM={stream} OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 {script} 2>&1")
    assert result.rc == 0, result.stdout[-3000:]
    whole = collections.Counter(WHOLE_LINE.findall(result.stdout))
    broken = [line for line in result.stdout.splitlines() if "rank" in line and not WHOLE_LINE.match(line)]
    assert whole == {"rank0": LINES_PER_RANK, "rank1": LINES_PER_RANK}, (whole, broken[:5])


def test_a_line_a_python_command_prints_is_in_the_log_at_once(containers):
    """Line buffering, not block buffering: the line is in `docker logs` while the process still runs."""
    container = containers(command=["python3", "-c", "print('the first line'); import time; time.sleep(600)"])
    container.wait_for_log("the first line")
