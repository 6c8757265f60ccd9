"""The trainer outlives its output (issue 27, item 1): with its output into a pipe whose reader exited
(`| head -c 300`) or onto a full device (/dev/full), a 2-rank torchrun job trains on, and SIGTERM to
its workers still saves and ends it with exit status 0.

    make test PYTEST_ARGS=tests/trainer/test_lost_output.py
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_lost_output.py
"""
from __future__ import annotations

import re
import shlex

import pytest

from tests.support.training import TINY_RUN, interrupt_when_step_logged, make_workdir, read_metrics, trainer_command

pytestmark = pytest.mark.tier("full")

# Far past what 300 bytes of output hold (the start line and a progress line or two).
STOP_AFTER_STEP = 25
# $pid is `bash -c`, whose child is coreutils timeout (trainer_command), whose child is torchrun; or
# timeout itself, where bash execs the last command of its script: signal torchrun's workers, as docker
# stop does.
SIGTERM_TO_THE_WORKERS = "pkill -TERM -P $(pgrep -P $(pgrep -x -P $pid timeout || echo $pid))"
OUTPUTS = {
    "a pipe whose reader exited": "set -o pipefail; {trainer} 2>&1 | head -c 300",
    "a full device": "exec > /dev/full 2>&1; {trainer}",
}
REASONS = {"a pipe whose reader exited": "Broken pipe", "a full device": "No space left on device"}


@pytest.fixture
def workdir(torch_host):
    path = make_workdir(torch_host)
    yield path
    torch_host.run(f"rm -rf {path}")


@pytest.mark.parametrize("output", OUTPUTS)
def test_training_goes_on_and_sigterm_still_saves_and_exits_0(torch_host, scripts_dir, workdir, output):
    trainer = (f"{trainer_command(scripts_dir=scripts_dir)} {TINY_RUN} --max-steps 2000 --save-every 0 "
               f"--num-workers 0 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/run.jsonl")
    command = f"bash -c {shlex.quote(OUTPUTS[output].format(trainer=trainer))}"
    status, _, log = interrupt_when_step_logged(torch_host, command, workdir, "run", STOP_AFTER_STEP,
                                                SIGTERM_TO_THE_WORKERS)
    assert status == 0, log
    assert len(log.encode()) <= 300  # all the output there was room for
    records = read_metrics(torch_host, f"{workdir}/run.jsonl")
    steps = [record["step"] for record in records if "step" in record]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= STOP_AFTER_STEP  # trained on, every step
    notes = [record["note"] for record in records if "note" in record]
    # Both streams went to the lost output, so the notes went to the metrics file: one per stream at most,
    # stdout's among them (a line of stderr's lost before the file was open is noted nowhere).
    expected = [f"train_ddp.py: warning: {stream} is gone ({REASONS[output]}); its lines are dropped from "
                f"here on and training goes on" for stream in ("stdout", "stderr")]
    assert notes in (expected, expected[:1]), notes
    checkpoints = torch_host.check_output(f"ls {workdir}/ckpt")
    assert re.fullmatch(r"step_\d{6}\.pt", checkpoints), checkpoints
    assert int(checkpoints[5:11]) == steps[-1] >= STOP_AFTER_STEP  # saved where it stopped
