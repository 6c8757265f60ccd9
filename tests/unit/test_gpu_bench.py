"""The GPU benchmark's table and JSON (scripts/gpu_bench.py), built from recorded runs: the trainer's metrics
lines and the bare loop's windows as they write them, and NVML samples as the sampler takes them. On a host
without a GPU the benchmark refuses in one line.

    make test-unit PYTEST_ARGS=tests/unit/test_gpu_bench.py
"""
from __future__ import annotations

import json
import subprocess
import sys

import gpu_bench
from tests.support import REPO_ROOT

FLOPS_PER_TOKEN = 6 * 124_000_000
H200_PEAK = 989e12

# The trainer's metrics lines every 50 steps after 50 of warm-up, with its data-wait share; the bare loop's
# windows carry tokens/s only. The last trainer window is slower, as a GPU that throttles makes it.
TRAINER_LINES = [{"step": 50, "tokens_per_sec": 100_000.0, "data_wait_share": 0.5},
                 *({"step": step, "tokens_per_sec": rate, "data_wait_share": 0.01}
                   for step, rate in [(100, 380_000.0), (150, 382_000.0), (200, 379_000.0), (250, 320_000.0)])]
BARE_LINES = [{"step": step, "tokens_per_sec": rate} for step, rate in [(100, 390_000.0), (150, 392_000.0),
                                                                        (200, 388_000.0), (250, 391_000.0)]]
SAMPLES = [{"utilization_pct": 100.0, "power_w": 690.0, "sm_clock_mhz": 1980.0},
           {"utilization_pct": 99.0, "power_w": 698.0, "sm_clock_mhz": 1755.0},
           {"utilization_pct": 100.0, "power_w": 695.0, "sm_clock_mhz": 1980.0}]


def rows() -> list[dict]:
    def row(loop: str, parallel: str, batch: int, lines: list[dict], samples: list[dict]) -> dict:
        return gpu_bench.summarize_run(loop, parallel, batch, gpu_bench.measured_windows(lines, 50), samples,
                                       flops_per_token=FLOPS_PER_TOKEN, peak_flops=H200_PEAK, gpus=1)
    half = [{**line, "tokens_per_sec": line["tokens_per_sec"] / 2} for line in TRAINER_LINES]
    return [row("trainer", "ddp", 16, TRAINER_LINES, SAMPLES), row("bare", "ddp", 16, BARE_LINES, SAMPLES),
            row("trainer", "fsdp", 16, half, []), row("bare", "fsdp", 16, BARE_LINES, [])]


def test_a_run_is_its_median_window_after_the_warm_up_with_the_spread_and_the_nvml_medians():
    trainer = rows()[0]
    assert trainer["windows"] == 4  # step 50 is the warm-up's window
    assert trainer["tokens_per_sec"] == (379_000 + 380_000) / 2
    assert (trainer["tokens_per_sec_min"], trainer["tokens_per_sec_max"]) == (320_000, 382_000)
    assert trainer["mfu"] == trainer["tokens_per_sec"] * FLOPS_PER_TOKEN / H200_PEAK
    assert trainer["data_wait_share"] == 0.01
    assert (trainer["utilization_pct"], trainer["power_w"], trainer["sm_clock_mhz"]) == (100.0, 695.0, 1980.0)
    assert trainer["sm_clock_mhz_min"] == 1755.0


def test_the_table_has_a_row_per_run_the_trainer_against_its_bare_loop_and_fsdp_against_ddp():
    table = gpu_bench.markdown_table(rows(), "1 x NVIDIA H200")
    lines = table.splitlines()
    runs = [line for line in lines if line.startswith("| trainer") or line.startswith("| bare")]
    assert len(runs) == 4
    ddp_trainer = runs[0].split(" | ")
    assert ddp_trainer[3] == "379,500" and ddp_trainer[4] == "320,000..382,000"
    assert ddp_trainer[6] == f"{379_500 / 390_500:.3f}"  # against the bare DDP loop's median
    assert ddp_trainer[7] == "1.0%" and ddp_trainer[-1] == "1980 (1755) |"
    assert "| bare | fsdp | 16 |" in table and "n/a |" in runs[3]  # no NVML samples: n/a, not 0
    assert lines[-1] == "trainer FSDP / trainer DDP, tokens/s: batch 16: 0.500"


def test_the_json_report_holds_every_run_and_the_settings(tmp_path):
    args = gpu_bench.parse_args(["--steps", "200", "--warmup", "50", "--window", "50"])
    report = gpu_bench.report(rows(), {"gpu": "NVIDIA H200", "gpus": 1}, args)
    again = json.loads(json.dumps(report))
    assert again["measured_steps"] == 200 and again["window_steps"] == 50 and again["model"] == "gpt2-small"
    assert [(run["loop"], run["parallel"]) for run in again["runs"]] == [
        ("trainer", "ddp"), ("bare", "ddp"), ("trainer", "fsdp"), ("bare", "fsdp")]


def test_a_host_without_a_gpu_is_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_bench.py"),
                             "--json-file", str(tmp_path / "out.json")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu_bench.py: error: torch sees no CUDA GPU on this host; run it on a GPU machine"], result.stderr
    assert not (tmp_path / "out.json").exists()


def test_windows_that_would_hold_the_warm_up_are_refused():
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_bench.py"), "--warmup", "30"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "whole numbers of --window steps" in result.stderr
