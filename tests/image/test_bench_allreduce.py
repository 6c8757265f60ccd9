"""bench_allreduce.py: the nccl-tests style table, the bus bandwidth it computes, and its one-line errors.

    make test-image PYTEST_ARGS="tests/image/test_bench_allreduce.py"           # in the image
    TORCH_TESTS_ON_HOST=1 .venv-test/bin/python -m pytest tests/image/test_bench_allreduce.py   # with a torch on this machine
"""
from __future__ import annotations

import json
import uuid

import pytest
import testinfra

pytestmark = pytest.mark.tier("full")

BENCH_TIMEOUT_S = 180
ROW_COLUMNS = ["size", "count", "type", "redop", "time", "algbw", "busbw", "wrong"]


def run_bench(torch_host: testinfra.host.Host, scripts_dir: str, ranks: int, flags: str) -> tuple[str, dict]:
    """(stdout, JSON report) of a torchrun of the benchmark with RANKS processes; asserts it succeeded."""
    report_path = f"/tmp/bench-allreduce-{uuid.uuid4().hex}.json"
    try:
        result = torch_host.run(f"timeout {BENCH_TIMEOUT_S} torchrun --standalone --nproc-per-node={ranks} "
                                f"{scripts_dir}/bench_allreduce.py {flags} --json-file {report_path}")
        assert result.rc == 0, result.stdout + result.stderr
        return result.stdout, json.loads(torch_host.file(report_path).content_string)
    finally:
        torch_host.run(f"rm -f {report_path}")


def table_rows(stdout: str) -> list[dict[str, str]]:
    """The data rows of the printed table, by column name; comment lines start with '#'."""
    return [dict(zip(ROW_COLUMNS, line.split())) for line in stdout.splitlines()
            if line.strip() and not line.startswith("#")]


def test_two_gloo_ranks_print_sane_validated_rows(torch_host: testinfra.host.Host, scripts_dir: str) -> None:
    stdout, report = run_bench(torch_host, scripts_dir, 2,
                               "--backend gloo --min-bytes 1K --max-bytes 1M --factor 4 --warmup 1 --iters 3")
    rows = table_rows(stdout)
    assert [int(row["size"]) for row in rows] == [1024, 4096, 16384, 65536, 262144, 1048576]
    for row in rows:
        assert int(row["count"]) == int(row["size"]) // 4 and row["type"] == "float32" and row["redop"] == "sum"
        assert float(row["time"]) > 0 and float(row["algbw"]) >= 0
        assert row["busbw"] == row["algbw"]  # 2(n-1)/n is 1 for two ranks
        assert row["wrong"] == "0"
    assert "# Out of bounds values : 0 OK" in stdout
    assert report["backend"] == "gloo" and report["world_size"] == 2 and report["correct"] is True
    # The table rounds a slow CPU's smallest messages to 0.000 GB/s; the JSON keeps every digit.
    assert [row["size_bytes"] for row in report["rows"]] == [int(row["size"]) for row in rows]
    assert all(row["busbw_gbps"] > 0 and row["wrong"] == 0 for row in report["rows"])


def test_bus_bandwidth_follows_nccl_tests_definition(torch_host: testinfra.host.Host, scripts_dir: str) -> None:
    _, report = run_bench(torch_host, scripts_dir, 3,
                          "--backend gloo --min-bytes 64K --max-bytes 64K --warmup 1 --iters 3")
    (row,) = report["rows"]
    assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (3 - 1) / 3)
    assert report["correct"] is True and row["wrong"] == 0


@pytest.mark.parametrize("flags, named", [
    ("--min-bytes 2M --max-bytes 1M", "--min-bytes"),
    ("--min-bytes 12Q", "--min-bytes"),
    ("--min-bytes 1", "--min-bytes"),
    ("--factor 1", "--factor"),
    ("--iters 0", "--iters"),
    ("--backend mpi", "--backend"),
])
def test_bad_flag_is_one_clear_line(torch_host: testinfra.host.Host, scripts_dir: str, flags: str, named: str) -> None:
    result = torch_host.run(f"timeout 60 python {scripts_dir}/bench_allreduce.py {flags}")
    assert result.rc == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("bench_allreduce.py: error:") and named in result.stderr


def test_without_torchrun_says_how_to_launch(torch_host: testinfra.host.Host, scripts_dir: str) -> None:
    result = torch_host.run(f"timeout 60 python {scripts_dir}/bench_allreduce.py")
    assert result.rc == 1
    assert result.stderr.strip().splitlines() == [
        "bench_allreduce.py: error: not started by torchrun; run it as "
        "`torchrun --nproc-per-node=N bench_allreduce.py [flags]`"]


def test_nccl_without_gpu_is_one_clear_line(torch_host: testinfra.host.Host, scripts_dir: str,
                                            without_gpu: None) -> None:
    # The variables torchrun would set, so the check on the backend is reached without a process group.
    result = torch_host.run(f"RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 timeout 60 python {scripts_dir}/bench_allreduce.py "
                            "--backend nccl")
    assert result.rc == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "--backend gloo" in result.stderr


@pytest.mark.gpu
@pytest.mark.tier("landing")
def test_nccl_on_every_gpu(torch_host: testinfra.host.Host, scripts_dir: str, cuda_devices: int) -> None:
    stdout, report = run_bench(torch_host, scripts_dir, cuda_devices, "--min-bytes 1M --max-bytes 64M --factor 4")
    assert report["backend"] == "nccl" and report["world_size"] == cuda_devices and report["correct"] is True
    assert len(table_rows(stdout)) == 4
    assert all(row["algbw_gbps"] > 0 and row["wrong"] == 0 for row in report["rows"])
    if cuda_devices > 1:  # with one rank 2(n-1)/n is 0, so only algbw says anything
        assert all(row["busbw_gbps"] > 0 for row in report["rows"])
