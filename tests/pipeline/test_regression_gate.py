"""The regression gate (tools/regression/gate.py, `make regression`): bad input ends in one line, and a
trainer that learns nothing (the reference runs at a learning rate of 0) fails its "learns" check.

The gate's two real runs, the image under test passing its baseline with one line per check, a JSON
report and a PNG, and a drifted image failing naming the check, are the gate steps of
tests/pipeline/test_pipeline_slurm.py, which runs them as the example workflows do (a full gate run is
about a minute of both cores, so each runs once per CI run).

    make test FLAVOR=cpu PYTEST_ARGS="tests/pipeline/test_regression_gate.py"
"""
from __future__ import annotations

import json

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import free_port
from tests.support.containers import docker
from tests.pipeline.helpers.pipeline import build_drifted_image, make_regression, own_error_lines

pytestmark = pytest.mark.tier("landing")

BASELINE = REPO_ROOT / "tools" / "regression" / "baselines" / "cpu-cpu.json"


@pytest.fixture(scope="module")
def cpu_image(image, flavor) -> str:
    if flavor != "cpu":
        pytest.skip("the CPU gate's baseline is the CPU flavor's; the GPU flavor's runs on a GPU runner")
    return image


def test_a_baseline_of_another_device_is_refused_in_one_line(cpu_image, tmp_path):
    other = json.loads(BASELINE.read_text()) | {"device": "gpu"}
    (tmp_path / "gpu.json").write_text(json.dumps(other))
    result = make_regression(cpu_image, f"BASELINE={tmp_path / 'gpu.json'}")
    assert result.returncode == 2
    lines = own_error_lines(result.stderr)
    assert len(lines) == 1 and "is for the cpu flavor on gpu, this is the cpu flavor on cpu" in lines[0], result.stderr


@pytest.mark.parametrize(("reference", "message"), [
    ("127.0.0.1:{port}/pytorch-dev:cpu-latest", "registry 127.0.0.1:{port} is unreachable"),
    ("pytorch-dev-no-such-image:never-built", "is not here and names no registry"),
])
def test_an_image_that_cannot_be_resolved_ends_in_one_line(cpu_image, reference, message):
    port = free_port()  # reserved and never served: nothing answers there
    result = make_regression(reference.format(port=port))
    assert result.returncode == 2
    lines = own_error_lines(result.stderr)
    assert len(lines) == 1 and message.format(port=port) in lines[0], result.stderr


def test_a_trainer_that_learns_nothing_fails_the_learns_check(cpu_image, tmp_path):
    """The reference runs at a learning rate of 0: the loss moves only with the batches, and the gate must
    say that nothing was learned, not only that the losses differ."""
    frozen = build_drifted_image(cpu_image, tmp_path, lr="0.0")
    try:
        result = make_regression(frozen, f"REGRESSION_DIR={tmp_path / 'report'}")
    finally:
        docker("image", "rm", frozen, check=False)
    assert result.returncode != 0, result.stdout + result.stderr  # make's 2 for the gate's 1
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    learns = {check["run"]: check["passed"] for check in report["checks"] if check["check"] == "learns"}
    assert learns == {"cnn-ddp": False, "gpt-tiny-fsdp": False}, result.stdout
