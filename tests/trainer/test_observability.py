"""What rank 0 reports: JSON metrics lines with the documented fields, and TensorBoard scalars.

    make test PYTEST_ARGS="tests/trainer/test_observability.py"
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_observability.py
"""
from __future__ import annotations

import pytest

from tests.support.training import TINY_RUN, make_workdir, python_json, read_metrics, trainer_command

pytestmark = pytest.mark.tier("full")


def test_metrics_lines_and_tensorboard_scalars_cover_every_logged_step(torch_host, scripts_dir):
    if torch_host.run("timeout 60 python -c 'import tensorboard'").rc != 0:
        pytest.skip("tensorboard is not installed on this torch host (the image has it)")
    workdir = make_workdir(torch_host)
    result = torch_host.run(trainer_command(scripts_dir=scripts_dir) + f" {TINY_RUN} --max-steps 6 "
                            f"--log-every 2 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/metrics.jsonl "
                            f"--tensorboard-dir {workdir}/tb")
    assert result.rc == 0, result.stdout + result.stderr

    records = read_metrics(torch_host, f"{workdir}/metrics.jsonl")
    assert [record["step"] for record in records] == [2, 4, 6]
    for record in records:
        assert {"step", "loss", "lr", "samples_per_sec", "restart_count", "data_wait_share"} <= record.keys()
        assert record["samples_per_sec"] > 0 and record["restart_count"] == 0
        assert 0 <= record["data_wait_share"] <= 1
    assert "| data wait " in result.stdout, result.stdout

    scalars = python_json(torch_host, (
        "import json; from tensorboard.backend.event_processing.event_accumulator import EventAccumulator; "
        f"events = EventAccumulator('{workdir}/tb'); events.Reload(); "
        "print(json.dumps({tag: [event.step for event in events.Scalars(tag)] for tag in events.Tags()['scalars']}))"))
    assert scalars["train/loss"] == [2, 4, 6]
    assert scalars["train/samples_per_sec"] == [2, 4, 6]
