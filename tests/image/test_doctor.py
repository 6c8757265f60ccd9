"""doctor: what it reports, the fixes it gives and the exit codes it returns, run on the torch host.

    make test-image PYTEST_ARGS="tests/image/test_doctor.py"           # in the image
    TORCH_TESTS_ON_HOST=1 .venv-test/bin/python -m pytest tests/image/test_doctor.py   # with a torch on this machine
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Callable

import pytest
import testinfra

pytestmark = pytest.mark.tier("full")

DOCTOR_TIMEOUT_S = 120
ALL_CHECKS = ["platform", "torch", "gpus", "driver", "arch", "nccl", "allreduce", "network", "topology", "shm",
              "memlock", "stack", "infiniband", "nccl-env", "port"]
GPU_CHECKS = ["driver", "arch", "nccl", "topology"]
EXIT_WARN, EXIT_FAIL = 1, 2
# Leaves out every check that imports torch, for tests of the OS-level checks: each run is then quick.
OS_CHECKS_ONLY = "--skip torch,gpus,driver,arch,nccl,allreduce,network,topology"

Doctor = Callable[..., "testinfra.backend.base.CommandResult"]


@pytest.fixture(scope="module")
def doctor(torch_host: testinfra.host.Host, scripts_dir: str) -> Doctor:
    """Runs doctor with ARGS on the torch host, after an optional shell SETUP (variables, ulimit)."""
    def run(args: str = "", setup: str = "", python: str = "python"):
        return torch_host.run(f"{setup} timeout {DOCTOR_TIMEOUT_S} {python} {scripts_dir}/doctor {args}")
    return run


def checks_of(result) -> dict[str, dict]:
    """The checks of a `doctor --json` run, by name; fails the test if the output is not one JSON object."""
    report = json.loads(result.stdout)
    assert report["exit_code"] == result.rc
    return {check["name"]: check for check in report["checks"]}


@pytest.fixture(scope="module")
def full_report(doctor: Doctor):
    """One complete `doctor --json` run, all-reduce included, shared because it is the slowest."""
    return doctor("--json")


@pytest.mark.tier("landing")
def test_json_reports_every_check_with_a_fix_for_each_problem(full_report) -> None:
    report = json.loads(full_report.stdout)
    assert [check["name"] for check in report["checks"]] == ALL_CHECKS
    statuses = [check["status"] for check in report["checks"]]
    assert set(statuses) <= {"pass", "warn", "fail", "skip"}
    assert all(check["finding"] for check in report["checks"])
    assert all(check["fix"] for check in report["checks"] if check["status"] in ("warn", "fail"))
    worst = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
    assert (report["status"], report["exit_code"]) == (worst, {"pass": 0, "warn": 1, "fail": 2}[worst])
    assert full_report.rc == report["exit_code"]


def test_without_gpu_says_so_plainly_and_warns(doctor: Doctor, without_gpu: None) -> None:
    result = doctor("--skip allreduce")
    assert result.rc == EXIT_WARN, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    gpus = next(index for index, line in enumerate(lines) if line.split()[1:2] == ["gpus"])
    assert lines[gpus].startswith("WARN") and "no GPU visible" in lines[gpus]
    assert "fix:" in lines[gpus + 1] and "--gpus all" in lines[gpus + 1]
    for name in GPU_CHECKS:
        assert any(line.split()[:2] == ["SKIP", name] for line in lines), f"{name} is not skipped"
    assert "overall: WARN" in result.stdout


# A run on two nodes over TCP on a host that has InfiniBand: NCCL's own format strings, filled in by hand
# (tests/unit/test_doctor_nccl_log.py cites them).
FALLBACK_LOG = ("node-a:7:9 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB; OOB ib0:10.1.0.1<0>\n"
                "node-a:7:9 [0] NCCL INFO Using network Socket\n")


def test_without_gpu_the_network_check_needs_gpus_and_a_given_log_is_still_read(doctor: Doctor,
                                                                              without_gpu: None) -> None:
    network = checks_of(doctor("--json --skip allreduce"))["network"]
    assert network["status"] == "skip" and network["finding"].startswith("needs GPUs"), network
    write_log = f"printf {shlex.quote(FALLBACK_LOG)} >/tmp/doctor-nccl.log &&"
    result = doctor("--nccl-log /tmp/doctor-nccl.log", setup=write_log)
    assert result.rc == EXIT_WARN, result.stdout + result.stderr
    assert "TCP sockets in use although the host has InfiniBand/RoCE devices" in result.stdout
    assert doctor("--nccl-log /nonexistent.log").rc == EXIT_FAIL


def test_the_platform_check_names_the_architecture_and_the_page_size(doctor: Doctor) -> None:
    platform = checks_of(doctor("--json --only platform"))["platform"]
    assert platform["status"] == "pass", platform
    assert platform["data"]["arch"] in platform["finding"] and platform["data"]["page_size"] >= 4096


def test_require_gpu_turns_no_gpu_into_a_failure(doctor: Doctor, without_gpu: None) -> None:
    result = doctor("--require-gpu --json --skip allreduce")
    assert result.rc == EXIT_FAIL
    gpus = checks_of(result)["gpus"]
    assert gpus["status"] == "fail" and gpus["finding"].startswith("no GPU visible")


@pytest.mark.tier("landing")
def test_allreduce_runs_on_two_cpu_ranks_without_gpu(full_report, without_gpu: None) -> None:
    allreduce = checks_of(full_report)["allreduce"]
    assert allreduce["status"] == "pass", allreduce
    assert allreduce["data"]["backend"] == "gloo" and allreduce["data"]["ranks"] == 2
    assert allreduce["data"]["correct"] is True and allreduce["data"]["busbw_gbps"] > 0


def test_small_shared_memory_warns_with_the_fix(doctor: Doctor) -> None:
    # The host's /dev/shm cannot be shrunk from a test, so the threshold is raised above any real size.
    result = doctor(f"{OS_CHECKS_ONLY} --min-shm-gib 1000000")
    lines = result.stdout.splitlines()
    shm = next(index for index, line in enumerate(lines) if line.split()[1:2] == ["shm"])
    assert lines[shm].startswith("WARN") and "/dev/shm is" in lines[shm]
    assert "fix:" in lines[shm + 1] and "--shm-size=16g" in lines[shm + 1] and "--ipc=host" in lines[shm + 1]
    assert result.rc >= EXIT_WARN


def test_missing_shared_memory_fails(doctor: Doctor) -> None:
    result = doctor(f"--json {OS_CHECKS_ONLY} --shm-path /nonexistent/shm")
    assert result.rc == EXIT_FAIL
    assert checks_of(result)["shm"]["status"] == "fail"


def test_low_memlock_and_stack_limits_warn_with_their_fixes(doctor: Doctor) -> None:
    result = doctor(f"--json {OS_CHECKS_ONLY}", setup="ulimit -S -l 64 && ulimit -S -s 4096 &&")
    checks = checks_of(result)
    assert checks["memlock"]["status"] == "warn" and "64 KiB" in checks["memlock"]["finding"]
    assert "--ulimit memlock=-1" in checks["memlock"]["fix"]
    assert checks["stack"]["status"] == "warn" and "4 MiB" in checks["stack"]["finding"]
    assert "--ulimit stack=67108864" in checks["stack"]["fix"]


def test_busy_rendezvous_port_is_reported(torch_host: testinfra.host.Host, scripts_dir: str) -> None:
    # The port must be held on the torch host itself, so one Python there holds it while doctor runs.
    hold_port_and_run_doctor = (
        "import socket, subprocess, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
        f"doctor = [sys.executable, '{scripts_dir}/doctor', '--json', '--skip', 'allreduce,torch,gpus', "
        "'--port', str(s.getsockname()[1])]; "
        "sys.exit(subprocess.run(doctor).returncode)")
    result = torch_host.run(f"timeout {DOCTOR_TIMEOUT_S} python -c \"{hold_port_and_run_doctor}\"")
    port = checks_of(result)["port"]
    assert port["status"] == "warn" and "is in use" in port["finding"], port
    assert "--master-port" in port["fix"]


def test_free_port_from_master_port_passes(doctor: Doctor) -> None:
    result = doctor(f"--json {OS_CHECKS_ONLY}", setup="MASTER_PORT=29517")
    port = checks_of(result)["port"]
    assert port["status"] == "pass" and port["data"] == {"port": 29517, "source": "MASTER_PORT"}


def test_nccl_variables_are_listed_and_disabled_transports_warn(doctor: Doctor) -> None:
    result = doctor(f"--json {OS_CHECKS_ONLY}", setup="NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1")
    nccl_env = checks_of(result)["nccl-env"]
    assert "NCCL_DEBUG=INFO" in nccl_env["finding"] and "NCCL_P2P_DISABLE=1" in nccl_env["finding"]
    assert nccl_env["status"] == "warn" and "unset NCCL_P2P_DISABLE" in nccl_env["fix"]


def test_missing_torch_fails_clearly_and_still_checks_the_os(doctor: Doctor) -> None:
    # `python -E -S` ignores PYTHONPATH and site-packages, where torch lives, and nothing else doctor needs.
    result = doctor("--json", python="python -E -S")
    assert result.rc == EXIT_FAIL
    checks = checks_of(result)
    assert checks["torch"]["status"] == "fail" and "pip install torch" in checks["torch"]["fix"]
    assert checks["allreduce"]["status"] == "skip"
    assert all(checks[name]["status"] != "skip" for name in ("shm", "memlock", "stack", "port"))


@pytest.mark.parametrize("flags, named", [
    ("--port 70000", "--port"),
    ("--skip nosuchcheck", "nosuchcheck"),
    ("--min-shm-gib lots", "--min-shm-gib"),
    ("--frobnicate", "--frobnicate"),
])
def test_bad_flag_is_one_clear_line(doctor: Doctor, flags: str, named: str) -> None:
    result = doctor(flags)
    assert result.rc == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("doctor: error:") and named in result.stderr


def test_help_explains_checks_and_exit_codes(doctor: Doctor) -> None:
    result = doctor("--help")
    assert result.rc == 0
    assert "exit codes: 0" in result.stdout and "--require-gpu" in result.stdout
    assert all(name in result.stdout for name in ALL_CHECKS)


def test_runs_as_one_copied_folder_with_only_the_standard_library(torch_host: testinfra.host.Host,
                                                                   scripts_dir: str) -> None:
    # What a user does on a bare GPU host: copy the one folder and run it with the system's python3.
    result = torch_host.run(f"dir=$(mktemp -d) && cp -r {scripts_dir}/doctor $dir/ && cd $dir && "
                            f"timeout 60 python3 -I doctor --json {OS_CHECKS_ONLY}")
    assert result.rc in (0, EXIT_WARN), result.stderr
    assert {"shm", "memlock", "stack", "port"} <= checks_of(result).keys()


def test_a_closed_pipe_ends_quietly(torch_host: testinfra.host.Host, scripts_dir: str) -> None:
    # `doctor | head` once ended in a BrokenPipe traceback. Here the reader is gone before doctor writes
    # (it starts a second later), so every write meets a closed pipe.
    result = torch_host.run(f"{{ sleep 1; timeout 60 python {scripts_dir}/doctor {OS_CHECKS_ONLY}; }} | true")
    assert result.rc == 0
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr


@pytest.mark.gpu
@pytest.mark.tier("landing")
def test_gpu_checks_pass_on_a_gpu_host(full_report, cuda_devices: int) -> None:
    checks = checks_of(full_report)
    assert checks["gpus"]["status"] == "pass" and checks["gpus"]["data"]["count"] == cuda_devices
    for name in ("driver", "arch", "nccl"):
        assert checks[name]["status"] == "pass", checks[name]
    allreduce = checks["allreduce"]
    assert allreduce["status"] == "pass", allreduce
    assert allreduce["data"]["backend"] == "nccl" and allreduce["data"]["ranks"] == cuda_devices
    assert allreduce["data"]["correct"] is True
