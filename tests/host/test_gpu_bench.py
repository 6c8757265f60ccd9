"""The GPU benchmark (scripts/gpu_bench.py) keeps what it measured: its table and JSON from recorded runs,
every run standing alone under a fake launcher (one that fails, one that hangs with children, one that
measures nothing), NVML counted only over the measured steps with a fake pynvml, and the MFU peaks of
each H100 and H200 part. On a host without a GPU the benchmark refuses in one line.

    make test PYTEST_ARGS=tests/host/test_gpu_bench.py
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

import gpu_bench
from gpu_bench import Run
from tests.support import REPO_ROOT, SETTLES_S
from tests.support.waiting import wait_until
from trainer.metrics import known_peak

pytestmark = pytest.mark.tier("landing")

SAMPLER_S = 10  # the sampler thread asks NVML every 10 ms: a dozen answers take a tenth of a second

FLOPS_PER_TOKEN = 6 * 124_000_000
H200_PEAK = 989e12

# The trainer's metrics lines every 50 steps after 50 of warm-up, with its data-wait share; the bare loop's
# windows carry tokens/s only. The last trainer window is slower, as a GPU that throttles makes it.
TRAINER_LINES = [{"step": 50, "tokens_per_sec": 100_000.0, "data_wait_share": 0.5},
                 *({"step": step, "tokens_per_sec": rate, "data_wait_share": 0.01}
                   for step, rate in [(100, 380_000.0), (150, 382_000.0), (200, 379_000.0), (250, 320_000.0)])]
BARE_LINES = [{"step": step, "tokens_per_sec": rate} for step, rate in [(100, 390_000.0), (150, 392_000.0),
                                                                        (200, 388_000.0), (250, 391_000.0)]]
SAMPLES = [{"t": 1.0, "utilization_pct": 100.0, "power_w": 690.0, "sm_clock_mhz": 1980.0},
           {"t": 2.0, "utilization_pct": 99.0, "power_w": 698.0, "sm_clock_mhz": 1755.0},
           {"t": 3.0, "utilization_pct": 100.0, "power_w": 695.0, "sm_clock_mhz": 1980.0}]


def summarize(run: Run, lines: list[dict], samples: list[dict]) -> dict:
    return gpu_bench.summarize_run(run, gpu_bench.measured_windows(lines, 50), samples,
                                   flops_per_token=FLOPS_PER_TOKEN, peak_flops=H200_PEAK, gpus=1)


def rows() -> list[dict]:
    half = [{**line, "tokens_per_sec": line["tokens_per_sec"] / 2} for line in TRAINER_LINES]
    return [summarize(Run("trainer", "ddp", 16), TRAINER_LINES, SAMPLES),
            summarize(Run("bare", "ddp", 16), BARE_LINES, SAMPLES),
            summarize(Run("trainer", "fsdp", 16), half, []), summarize(Run("bare", "fsdp", 16), BARE_LINES, [])]


def test_a_run_is_its_median_window_after_the_warm_up_with_the_spread_and_the_nvml_medians():
    trainer = rows()[0]
    assert trainer["windows"] == 4  # step 50 is the warm-up's window
    assert trainer["tokens_per_sec"] == (379_000 + 380_000) / 2
    assert (trainer["tokens_per_sec_min"], trainer["tokens_per_sec_max"]) == (320_000, 382_000)
    assert trainer["mfu"] == trainer["tokens_per_sec"] * FLOPS_PER_TOKEN / H200_PEAK
    assert trainer["data_wait_share"] == 0.01
    assert (trainer["utilization_pct"], trainer["power_w"], trainer["sm_clock_mhz"]) == (100.0, 695.0, 1980.0)
    assert trainer["sm_clock_mhz_min"] == 1755.0 and trainer["nvml_samples"] == 3


def test_the_table_has_a_row_per_run_the_trainer_against_its_bare_loop_and_fsdp_against_ddp():
    table = gpu_bench.markdown_table(rows(), "1 x NVIDIA H200")
    lines = table.splitlines()
    runs = [line for line in lines if line.startswith("| trainer") or line.startswith("| bare")]
    assert len(runs) == 4
    ddp_trainer = runs[0].split(" | ")
    assert ddp_trainer[3] == "379,500" and ddp_trainer[4] == "320,000..382,000"
    assert ddp_trainer[6] == f"{379_500 / 390_500:.3f}"  # against the bare DDP loop's median
    assert ddp_trainer[7] == "1.0%" and ddp_trainer[-1] == "1980 (1755) |"
    assert runs[3].endswith("|  |  |  |  |")  # no NVML samples: empty cells, neither 0 nor "n/a%"
    assert "n/a" not in table and " % |" not in table
    assert lines[-1] == "trainer FSDP / trainer DDP, tokens/s: batch 16: 0.500"


def test_a_metrics_note_and_a_run_without_a_measured_window_are_not_windows():
    lines = [*TRAINER_LINES[:1], {"note": "train_ddp.py: warning: stdout is gone"}]
    row = summarize(Run("trainer", "ddp", 16), lines, SAMPLES)
    assert row["error"] == "no measured window" and row["windows"] == 0
    table = gpu_bench.markdown_table([row, *rows()[1:2]], "title")
    assert "| trainer | ddp | 16 | no measured window |" in table


def test_each_pair_of_loops_takes_turns_going_first_and_batch_16_comes_first():
    runs = gpu_bench.plan()
    assert len(set(runs)) == 8
    firsts = [runs[index].loop for index in range(0, 8, 2)]
    assert firsts == ["trainer", "bare", "trainer", "bare"]
    assert {run.batch_size for run in runs[:4]} == {16}


@pytest.mark.parametrize("name, part, tflops", [
    ("NVIDIA H100 PCIe", "H100 PCIe", 756), ("NVIDIA H100 NVL", "H100 NVL", 835),
    ("NVIDIA H200 NVL", "H200 NVL", 835), ("NVIDIA H100 80GB HBM3", "H100", 989), ("NVIDIA H200", "H200", 989),
    ("NVIDIA A100-SXM4-80GB", "A100", 312), ("NVIDIA A10", "A10", 125), ("NVIDIA L40S", "L40S", 362)])
def test_the_peak_table_knows_each_part_and_says_which_it_matched(name, part, tflops):
    assert known_peak(name) == (part, tflops * 1e12)


def test_an_unknown_gpu_has_no_peak():
    assert known_peak("NVIDIA GeForce GTX 1080") is None


# ---- NVML over the measured steps only, with a fake pynvml ----------------------------------------

class FakeNvml(types.ModuleType):
    """pynvml's calls the sampler makes. The GPU is busy (100 %, 700 W, 1980 MHz) while `busy` is set,
    idle (0 %, 80 W, 345 MHz) otherwise; every `fail_every`-th query raises, as a card that does not
    answer one does."""

    NVML_CLOCK_SM = 1

    def __init__(self, fail_every: int = 0) -> None:
        super().__init__("pynvml")
        self.busy, self.fail_every, self.queries, self.asked_for = False, fail_every, 0, []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.asked_for.append(uuid)
        return uuid

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        self.queries += 1
        if self.fail_every and self.queries % self.fail_every == 0:
            raise RuntimeError("NVMLError_NotSupported")
        return types.SimpleNamespace(gpu=100 if self.busy else 0)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 700_000 if self.busy else 80_000

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 1980 if self.busy else 345


def append(path: pathlib.Path, record: dict) -> None:
    with path.open("a") as file:
        file.write(json.dumps(record) + "\n")


def test_only_samples_taken_while_the_measured_steps_went_count(tmp_path, monkeypatch):
    """Idle before the warm-up's last line, busy over the measured windows, idle through the final
    checkpoint and teardown: the medians and the minimum clock are the busy ones."""
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    lines = tmp_path / "run.jsonl"
    with gpu_bench.GpuSampler(["GPU-1234"], lines, every_s=0.02, watch_every_s=0.01) as sampler:
        time.sleep(0.3)                                    # start-up, compile: idle
        nvml.busy = True                                   # busy before the warm-up's line marks the start
        append(lines, {"step": 50, "tokens_per_sec": 1.0})  # the warm-up ends
        time.sleep(0.15)
        append(lines, {"step": 100, "tokens_per_sec": 2.0})
        time.sleep(0.15)
        append(lines, {"step": 150, "tokens_per_sec": 2.0})  # the last measured window
        deadline = time.monotonic() + 10                   # the watcher has seen it (late on a busy machine)
        while 150 not in sampler.first_seen:
            assert time.monotonic() < deadline, sampler.first_seen
            time.sleep(0.005)
        nvml.busy = False
        time.sleep(0.4)                                    # the last checkpoint, teardown: idle
    assert nvml.asked_for == ["GPU-1234"]
    counted = gpu_bench.samples_within(sampler.samples, gpu_bench.measured_span(sampler.first_seen, 50))
    assert 5 <= len(counted) < len(sampler.samples) / 2, (len(counted), len(sampler.samples))
    row = summarize(Run("trainer", "ddp", 16), read(lines), counted)
    assert (row["utilization_pct"], row["power_w"], row["sm_clock_mhz"]) == (100.0, 700.0, 1980.0), counted
    assert row["sm_clock_mhz_min"] == 1980.0


def read(path: pathlib.Path) -> list[dict]:
    return gpu_bench.read_lines(path)


def test_an_nvml_error_in_one_sample_is_counted_and_the_sampler_goes_on(tmp_path, monkeypatch):
    nvml = FakeNvml(fail_every=3)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with gpu_bench.GpuSampler(["GPU-1234"], tmp_path / "run.jsonl", every_s=0.01, watch_every_s=0.01) as sampler:
        wait_until(lambda: nvml.queries >= 12, SAMPLER_S, interval=0.01)
    assert sampler.errors >= 4 and len(sampler.samples) >= 8
    assert sampler.errors + len(sampler.samples) == nvml.queries


# ---- every run stands alone: the whole benchmark under a fake launcher -----------------------------

# Stands in for `python -m torch.distributed.run ... SCRIPT ARGS`: finds the run's lines file and acts
# as FAKE_RUNS (JSON: "loop-parallel-batch" -> what to do) says; a run it does not name trains normally.
FAKE_LAUNCHER = textwrap.dedent("""\
    #!{python}
    import json, os, subprocess, sys, time
    args = sys.argv[1:]
    flag = "--metrics-file" if "--metrics-file" in args else "--windows-file"
    lines = args[args.index(flag) + 1]
    run = os.path.basename(lines).removesuffix(".jsonl")
    what = json.loads(os.environ["FAKE_RUNS"]).get(run, "trains")
    def write(step, rate):
        with open(lines, "a") as file:
            file.write(json.dumps({{"step": step, "tokens_per_sec": rate}}) + "\\n")
    if what == "fails":
        print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
        sys.exit(1)
    if what == "hangs":
        # A worker in a session of its own, as torchrun starts them, that outlives its launcher's SIGTERM.
        worker = subprocess.Popen([sys.executable, "-c",
                                   "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
                                  start_new_session=True)
        with open(os.environ["FAKE_WORKERS"], "a") as file:
            file.write(f"{{worker.pid}}\\n")
        write(30, 1.0)
        time.sleep(600)
    write(30, 1.0)
    if what == "trains":
        for step in (60, 90, 120):
            write(step, 1000.0 + step)
    """)


@pytest.fixture
def fake_launcher(tmp_path) -> pathlib.Path:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_LAUNCHER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def benchmark(tmp_path, launcher: pathlib.Path, runs: dict[str, str], monkeypatch, *extra: str) -> dict:
    monkeypatch.setenv("FAKE_RUNS", json.dumps(runs))
    monkeypatch.setenv("FAKE_WORKERS", str(tmp_path / "workers"))
    monkeypatch.setattr(gpu_bench, "RUN_START_S", 3.0)
    monkeypatch.setattr(gpu_bench, "SLOWEST_STEP_S", 0.0)
    monkeypatch.setattr(gpu_bench, "MIN_RUN_S", 1.0)
    monkeypatch.setattr(gpu_bench, "GRACE_S", 1.0)
    args = gpu_bench.parse_args(["--out", str(tmp_path / "out"), "--python", str(launcher), *extra])
    return gpu_bench.run_benchmark(args, gpus=1, uuids=[], machine={"gpu": "NVIDIA H200"},
                                   flops_per_token=FLOPS_PER_TOKEN, peak=("H200", H200_PEAK))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_failed_a_hung_and_an_empty_run_each_leave_the_other_runs_rows(tmp_path, fake_launcher, monkeypatch):
    runs = {"trainer-ddp-16": "fails", "bare-ddp-16": "hangs", "bare-fsdp-16": "measures nothing"}
    benchmark(tmp_path, fake_launcher, runs, monkeypatch)
    result = json.loads((tmp_path / "out" / "gpu_bench.json").read_text())
    table = (tmp_path / "out" / "gpu_bench.md").read_text()
    by_run = {f"{row['loop']}-{row['parallel']}-{row['batch_size']}": row for row in result["runs"]}
    assert len(by_run) == 8
    assert by_run["trainer-ddp-16"]["error"] == "exit status 1"
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in by_run["trainer-ddp-16"]["last_lines"]
    assert by_run["bare-ddp-16"]["error"].startswith("timed out after ")
    assert by_run["bare-fsdp-16"]["error"] == "no measured window"
    measured = [name for name, row in by_run.items() if "error" not in row]
    assert sorted(measured) == ["bare-ddp-32", "bare-fsdp-32", "trainer-ddp-32", "trainer-fsdp-16", "trainer-fsdp-32"]
    assert by_run["trainer-fsdp-32"]["tokens_per_sec"] == 1090.0
    assert "| trainer | fsdp | 32 | 1,090 |" in table and "| bare | ddp | 16 | timed out after " in table
    assert result["peak_tflops"] == 989 and result["peak_from"] == "H200"
    assert result["flops_per_token"] == FLOPS_PER_TOKEN and result["machine"]["wall_s"] > 0

    # The hung run's worker, in a session of its own and deaf to SIGTERM, ended with its launcher.
    (worker,) = map(int, (tmp_path / "workers").read_text().split())
    wait_until(lambda: not alive(worker), SETTLES_S, interval=0.1)


def test_the_results_are_written_after_every_run_and_runs_past_the_budget_are_skipped(tmp_path, fake_launcher,
                                                                                       monkeypatch):
    written = []
    write_results = gpu_bench.write_results

    def counting(out, result, table):
        write_results(out, result, table)
        written.append(len(json.loads((out / "gpu_bench.json").read_text())["runs"]))
    monkeypatch.setattr(gpu_bench, "write_results", counting)
    benchmark(tmp_path, fake_launcher, {"bare-ddp-16": "hangs"}, monkeypatch, "--budget-s", "4")
    assert written == list(range(1, 9))
    rows = json.loads((tmp_path / "out" / "gpu_bench.json").read_text())["runs"]
    assert "tokens_per_sec" in rows[0] and rows[1]["error"].startswith("timed out after ")
    assert all(row["error"].startswith("skipped: ") for row in rows[2:]), rows


# The benchmark in a process of its own, under the fake launcher, as a loan's command runs it.
STOPPABLE = textwrap.dedent("""\
    import json, sys
    sys.path[:0] = [{scripts!r}, {repo!r}]
    import gpu_bench
    gpu_bench.RUN_START_S, gpu_bench.SLOWEST_STEP_S, gpu_bench.GRACE_S = 300.0, 0.0, 1.0
    args = gpu_bench.parse_args(["--out", sys.argv[1], "--python", sys.argv[2]])
    gpu_bench.run_benchmark(args, gpus=1, uuids=[], machine={{"gpu": "NVIDIA H200"}}, flops_per_token=1, peak=None)
    """)


def test_a_stopped_benchmark_ends_the_run_in_flight_and_keeps_the_rows_before_it(tmp_path, fake_launcher):
    """A loan's command killed at its limit (SIGTERM): the hung run's worker, in a session of its own, does
    not keep the GPU busy for the next command, and the rows measured so far stay in --out."""
    code = STOPPABLE.format(scripts=str(REPO_ROOT / "scripts"), repo=str(REPO_ROOT))
    env = {**os.environ, "FAKE_RUNS": json.dumps({"bare-ddp-16": "hangs"}), "FAKE_WORKERS": str(tmp_path / "workers")}
    benchmark = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "out"), str(fake_launcher)], env=env)
    try:
        wait_until(lambda: (tmp_path / "workers").exists(), SETTLES_S, interval=0.1)
        benchmark.send_signal(signal.SIGTERM)
        assert benchmark.wait(timeout=30) == 0
    finally:
        benchmark.kill()  # whatever failed above, no benchmark is left running beside the other tests
        benchmark.wait(timeout=10)
    rows = json.loads((tmp_path / "out" / "gpu_bench.json").read_text())["runs"]
    assert [row.get("error") for row in rows] == [None, "stopped by SIGTERM"], rows
    (worker,) = map(int, (tmp_path / "workers").read_text().split())
    wait_until(lambda: not alive(worker), SETTLES_S, interval=0.1)


def test_a_host_without_a_gpu_is_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_bench.py"), "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu_bench.py: error: torch sees no CUDA GPU on this host; run it on a GPU machine"], result.stderr
    assert not (tmp_path / "gpu_bench.json").exists()


def test_windows_that_would_hold_the_warm_up_are_refused():
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_bench.py"), "--warmup", "20"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "whole numbers of --window steps" in result.stderr
