"""The regression gate's checks (tools/regression/compare.py), its PNG (loss_plot.py), the baseline
files it reads and the digest check of the renderer of deploy/kubernetes (tools/deploy/render_image.py)."""
from __future__ import annotations

import json
import struct
import zlib

import pytest
import gate
from compare import baseline_problem, check_learns, check_losses, check_throughput, compare, summarize
from loss_plot import write_loss_plot
from reference_runs import RUNS
from render_image import RenderError, render
from tests.support import REPO_ROOT

BASELINES = sorted((REPO_ROOT / "tools" / "regression" / "baselines").glob("*.json"))


def metrics(*losses: float, throughput: float = 100.0) -> list[dict]:
    return [{"step": 5 * (index + 1), "loss": loss, "samples_per_sec": throughput} for index, loss in enumerate(losses)]


def test_the_first_report_is_left_out_of_the_throughput():
    summary = summarize([{"step": 5, "loss": 2.0, "samples_per_sec": 1.0}, *metrics(1.5, 1.0, throughput=50.0)[1:]])
    assert summary == {"losses": {"5": 2.0, "10": 1.0}, "samples_per_sec": 50.0}


def test_losses_within_the_tolerance_pass_and_a_drift_beyond_it_fails_at_its_step():
    baseline = {"5": 2.0, "10": 1.0}
    assert check_losses("run", {"5": 2.0, "10": 1.0005}, baseline, rtol=1e-3).passed
    failed = check_losses("run", {"5": 2.0, "10": 1.01}, baseline, rtol=1e-3)
    assert not failed.passed and "at step 10" in failed.line() and failed.line().startswith("FAIL run loss:")


def test_other_reported_steps_fail_and_say_to_record_a_baseline():
    result = check_losses("run", {"5": 2.0}, {"5": 2.0, "10": 1.0}, rtol=1e-3)
    assert not result.passed and "make baseline" in result.detail


def test_throughput_below_the_floor_fails():
    assert check_throughput("run", 31.0, 100.0, floor=0.3).passed
    assert not check_throughput("run", 29.0, 100.0, floor=0.3).passed


def test_a_run_learns_when_its_loss_falls_by_half_of_the_baselines_fall_or_more():
    baseline = {"10": 11.0, "60": 3.0}  # a fall of 8
    assert check_learns("run", {"10": 11.0, "60": 6.9}, baseline).passed
    # 10.84 below 11.00 (the GPU reference run's before) is a fall, but no learning.
    failed = check_learns("run", {"10": 11.0, "60": 10.84}, baseline)
    assert not failed.passed and "at least 4.0000 needed" in failed.line(), failed.line()
    assert not check_learns("run", {"10": 11.0, "60": float("nan")}, baseline).passed


def test_a_baseline_whose_loss_does_not_fall_is_refused():
    flat = {"loss_rtol": 1e-3, "throughput_floor": 0.3, "recorded": {},
            "runs": {"a": {"losses": {"5": 2.0, "10": 2.0}, "samples_per_sec": 1.0}}}
    assert "does not fall" in baseline_problem(flat)


def test_a_run_that_reported_nothing_fails():
    baseline = {"loss_rtol": 1e-3, "throughput_floor": 0.3,
                "runs": {"a": {"losses": {"5": 1.0}, "samples_per_sec": 1.0}}}
    assert [(r.check, r.passed) for r in compare({}, baseline)] == [("ran", False)]


@pytest.mark.parametrize("path", BASELINES, ids=lambda path: path.name)
def test_every_baseline_names_its_kind_and_matches_the_reference_runs(path):
    baseline = json.loads(path.read_text())
    assert path.stem == f"{baseline['flavor']}-{baseline['device']}"
    assert {name: run["flags"] for name, run in baseline["runs"].items()} == {
        run.name: run.flags for run in RUNS[baseline["device"]]}, "record it again: make baseline"
    assert baseline["recorded"]["torch"] and baseline["recorded"]["cpu"] and "make baseline" in baseline["how_to_update"]


def test_the_plot_is_a_valid_png_with_a_panel_per_run(tmp_path):
    path = tmp_path / "curves.png"
    write_loss_plot(path, [({"5": 2.0, "10": 1.0}, {"5": 2.0, "10": 1.1}, True), ({}, {"5": 1.0}, False)])
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (640, 200)
    length = struct.unpack(">I", data[33:37])[0]
    pixels = zlib.decompress(data[41:41 + length])
    assert len(pixels) == 200 * (1 + 640 * 3) and bytes((31, 119, 180)) in pixels  # this image's curve, in blue


@pytest.mark.parametrize("reference", ["pytorch-dev:gpu-latest", "pytorch-dev@sha256:abc", "host/x@sha256:" + "A" * 64])
def test_a_reference_without_a_full_digest_is_refused(reference):
    with pytest.raises(RenderError, match="is not a digest reference"):
        render("image: x\n", reference)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_loss_that_is_not_a_number_at_a_middle_step_fails_there(bad):
    # NaN is never the largest deviation (every comparison with it is false), so it must fail on its own.
    result = check_losses("run", {"5": 2.0, "10": bad, "15": 1.0}, {"5": 2.0, "10": 1.5, "15": 1.0}, rtol=1e-3)
    assert not result.passed and "at step 10" in result.detail and "diverged" in result.detail


@pytest.mark.parametrize(("text", "words"), [
    ("{not json", "cannot be read"),
    ("[]", "is malformed: it is not a JSON object"),
    ('{"loss_rtol": "tight"}', "loss_rtol is not a number"),
    ('{"loss_rtol": 0.001, "throughput_floor": 0.05, "recorded": {}, "runs": {"cnn-ddp": {"losses": {"5": NaN}, '
     '"samples_per_sec": 1}}}', "run cnn-ddp has a loss that is not a finite number"),
    ('{"loss_rtol": 0.001, "throughput_floor": 0.05, "recorded": {}, "runs": {"cnn-ddp": {"losses": {"5": 2.0}}}}',
     "run cnn-ddp has no samples_per_sec"),
])
def test_a_malformed_baseline_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    baseline = tmp_path / "cpu-cpu.json"
    baseline.write_text(text)
    status = gate.main(["check", "--host", "--device", "cpu", "--flavor", "cpu", "--baseline", str(baseline),
                        "--report-dir", str(tmp_path / "report")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and words in lines[0] and "record a new one" in lines[0], lines
