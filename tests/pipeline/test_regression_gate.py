"""The regression gate (tools/regression/gate.py, `make regression`): the image under test passes its
baseline with one line per check, a JSON report and a PNG; a drifted image fails naming the check; bad
input ends in one line.

    make test FLAVOR=cpu PYTEST_ARGS="tests/pipeline/test_regression_gate.py"
"""
from __future__ import annotations

import json
import struct

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import docker, free_port
from tests.support.pipeline import build_drifted_image, make_regression, own_error_lines

BASELINE = REPO_ROOT / "tools" / "regression" / "baselines" / "cpu-cpu.json"


@pytest.fixture(scope="module")
def cpu_image(image, flavor) -> str:
    if flavor != "cpu":
        pytest.skip("the CPU gate's baseline is the CPU flavor's; the GPU flavor's runs on a GPU runner")
    return image


def test_the_image_passes_its_baseline_with_a_report_and_a_plot(cpu_image, tmp_path):
    result = make_regression(cpu_image, f"REGRESSION_DIR={tmp_path}")
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    runs = json.loads(BASELINE.read_text())["runs"]
    assert len(lines) == 3 * len(runs) and all(line.startswith("PASS ") for line in lines), result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["passed"] and report["environment"]["torch"] == json.loads(BASELINE.read_text())["recorded"]["torch"]
    png = (tmp_path / "loss-curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (320 * len(runs), 200)


def test_a_drifted_image_fails_naming_the_loss_check(cpu_image, tmp_path):
    drifted = build_drifted_image(cpu_image, tmp_path)
    try:
        result = make_regression(drifted, f"REGRESSION_DIR={tmp_path / 'report'}")
    finally:
        docker("image", "rm", drifted, check=False)
    # make exits 2 whenever its recipe fails; the gate's own status 1 (a check failed, not bad input) is in
    # make's line.
    assert result.returncode == 2 and "regression] Error 1" in result.stderr, result.stdout + result.stderr[-4000:]
    assert "FAIL cnn-ddp loss: largest relative deviation" in result.stdout, result.stdout
    assert "FAILED: cnn-ddp loss" in result.stdout
    assert not json.loads((tmp_path / "report" / "report.json").read_text())["passed"]


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
