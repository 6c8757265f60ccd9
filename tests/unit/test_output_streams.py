"""The trainer's output streams survive a closed pipe and a full disk (trainer/output.py, issue 27 item 1):
the first failed write is noted once on whatever still works, later lines are dropped, and the program
goes on and exits as it would have.

    make test-unit PYTEST_ARGS=tests/unit/test_output_streams.py

tests/trainer/test_lost_output.py does the same to a real training run under torchrun, then stops it.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

# Prints 2,000 lines (far more than a pipe holds), then exits 0 if it got there.
PROGRAM = """
import sys
sys.path.insert(0, sys.argv[1])
from trainer import output
if sys.argv[2] == "survive":
    output.keep_going_without_output("program")
    output.also_note_to(open(sys.argv[3], "a", buffering=1))
for line in range(2000):
    print(f"progress line {line}", flush=True)
print("an error line", file=sys.stderr, flush=True)
open(sys.argv[3], "a").write("reached the end\\n")
"""


def run(mode: str, tmp_path, *, stdout: object, stderr: object) -> subprocess.CompletedProcess:
    notes = tmp_path / "metrics.jsonl"
    process = subprocess.Popen([sys.executable, "-c", PROGRAM, str(REPO_ROOT / "scripts"), mode, str(notes)],
                               stdout=stdout, stderr=stderr)
    if stdout == subprocess.PIPE:
        process.stdout.close()  # the reader is gone before the first line: `| head -c 0`
    process.wait(60)
    return process


@pytest.mark.parametrize("mode, status", [("survive", 0), ("as python does", 120)])
def test_a_closed_pipe_on_stdout_is_noted_once_on_stderr(tmp_path, mode, status):
    errors = tmp_path / "stderr"
    with open(errors, "w") as stderr:
        process = run(mode, tmp_path, stdout=subprocess.PIPE, stderr=stderr)
    notes = [line for line in errors.read_text().splitlines() if "warning" in line]
    if mode == "survive":
        assert process.returncode == 0 and notes == [
            "program: warning: stdout is gone (Broken pipe); its lines are dropped from here on and training goes on"]
        assert errors.read_text().endswith("an error line\n")  # stderr itself still works
        assert (tmp_path / "metrics.jsonl").read_text() == "reached the end\n"
    else:  # the control: plain Python dies of the first line it cannot write
        assert process.returncode != 0


def test_a_full_disk_on_both_streams_is_noted_in_the_metrics_file(tmp_path):
    with open("/dev/full", "w") as full:
        process = run("survive", tmp_path, stdout=full, stderr=full)
    assert process.returncode == 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines[-1] == "reached the end"
    assert [json.loads(line) for line in lines[:-1]] == [
        {"note": "program: warning: stdout is gone (No space left on device); its lines are dropped from here on "
                 "and training goes on"},
        {"note": "program: warning: stderr is gone (No space left on device); its lines are dropped from here on "
                 "and training goes on"}]
