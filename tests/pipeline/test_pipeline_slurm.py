"""The pipeline teams copy, for real: an image pushed to a local registry is resolved to its digest,
passes the regression gate (one PASS line per check, a JSON report and a PNG) and is submitted to a real Slurm (tools/pipeline/gate_and_submit.sh, the
step the example workflows run); the node pulls it by digest, trains, is requeued, checkpoints, resumes
and completes. A drifted image fails the gate and nothing is submitted; so does a reference the
registry does not hold, and a submission Slurm rejects ends in one line.

    make test FLAVOR=cpu PYTEST_ARGS="tests/pipeline/test_pipeline_slurm.py"
"""
from __future__ import annotations

import json
import os
import pathlib
import shlex
import struct
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT, SETTLES_S
from tests.support.containers import docker, free_port
from tests.support.local_registry import local_registry
from tests.pipeline.helpers.pipeline import GATE_TIMEOUT_S, build_drifted_image, push, run_tool
from tests.support.slurm_cluster import SlurmCluster, running_cluster
from tests.support.training import TINY_MODEL
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

PIPELINE = REPO_ROOT / "tools" / "pipeline" / "gate_and_submit.sh"
BASELINE = REPO_ROOT / "tools" / "regression" / "baselines" / "cpu-cpu.json"
# Long enough that the requeue, sent once step 10 is in the job's output, lands mid-run: on a quiet
# machine the tiny model takes about 35 ms a step, and 30 steps were over before the requeue arrived.
STEPS = 300
TRAINING = shlex.split(f"{TINY_MODEL} --batch-size 8 --num-workers 0 --device cpu --log-every 10 --save-every 0 "
                       f"--max-steps {STEPS}")
CONTAINER_USER_ID = 1000  # the image's user dev, whom a job submitted by root runs as


@pytest.fixture(scope="module")
def cpu_image(image, flavor) -> str:
    if flavor != "cpu":
        pytest.skip("the CPU gate's baseline is the CPU flavor's")
    return image


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> str:
    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[SlurmCluster]:
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def checkpoint_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    # Named as runs often are, with a comma: Slurm's --export list splits values at commas.
    folder = tmp_path / "run,lr=3e-4"
    folder.mkdir()
    os.chown(folder, CONTAINER_USER_ID, CONTAINER_USER_ID)
    return folder


def start_pipeline(slurm: SlurmCluster, reference: str, ckpt: pathlib.Path, output: pathlib.Path,
                   report_dir: pathlib.Path | None = None) -> subprocess.Popen:
    """gate_and_submit.sh for REFERENCE; the gate writes its report into REPORT_DIR (`make regression`'s
    REGRESSION_DIR), else where make puts it."""
    env = {**slurm.env, "CKPT_DIR": str(ckpt), "NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1",
           **({"REGRESSION_DIR": str(report_dir)} if report_dir else {}),
           "SBATCH_OPTIONS": f"--output={output}", "COSIGN_PUB": "",
           "RDZV_PORT": str(free_port())}  # not 29500: another suite's job may rendezvous there
    env.pop("MAKEFLAGS", None)
    return subprocess.Popen([str(PIPELINE), reference, "--", *TRAINING], cwd=REPO_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def gate_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("PASS ", "FAIL "))]


def jobs(slurm: SlurmCluster) -> list[str]:
    return slurm.run("squeue", "--noheader", "--all", "--format=%i").stdout.split()


def test_a_pushed_image_is_gated_submitted_by_digest_and_completes_after_a_requeue(cpu_image, registry, slurm, tmp_path):
    digest_reference = push(cpu_image, f"{registry}/pytorch-dev-pipeline:candidate")
    docker("image", "rm", digest_reference, check=False)  # the node must pull it by digest itself
    output = tmp_path / "job.out"
    pipeline = start_pipeline(slurm, f"{registry}/pytorch-dev-pipeline:candidate", checkpoint_dir(tmp_path), output,
                              report_dir=tmp_path / "report")
    try:
        # The pipeline ending early (a failed gate or submission) ends the wait too, with its own words.
        wait_until(lambda: pipeline.poll() is not None or (output.exists() and f"step 10/{STEPS}" in output.read_text()),
                   GATE_TIMEOUT_S, interval=0.2,
                   failure=lambda: f"the job never reached step 10: {output.read_text() if output.exists() else ''}")
        assert pipeline.poll() is None, f"the pipeline ended before the job reached step 10: {pipeline.communicate()}"
        job = jobs(slurm)[0]
        slurm.run("scontrol", "requeue", job)  # what preemption with PreemptMode=REQUEUE does
        slurm.wait_for_job_state(job, {"PENDING"}, timeout=SETTLES_S)
        slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        stdout, stderr = pipeline.communicate(timeout=900)
    finally:
        pipeline.kill()
        docker("image", "rm", digest_reference, check=False)
    assert pipeline.returncode == 0, stdout + stderr[-4000:] + output.read_text()[-4000:]
    assert "regression: PASSED" in stdout + stderr, stdout + stderr[-4000:]
    baseline = json.loads(BASELINE.read_text())
    lines = gate_lines(stdout)
    assert len(lines) == 3 * len(baseline["runs"]) and all(line.startswith("PASS ") for line in lines), stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["passed"] and report["environment"]["torch"] == baseline["recorded"]["torch"], report
    png = (tmp_path / "report" / "loss-curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", png[16:24]) == (320 * len(baseline["runs"]), 200)
    assert f"submitted Slurm job {job}: {digest_reference}, docker mode" in stdout
    assert f"Slurm job {job} COMPLETED; final metrics: step {STEPS}" in stdout
    text = output.read_text()
    assert f"running {digest_reference} with docker" in text, text[-4000:]
    first_run, _, second_run = text.partition(f"job {job} (restart 1)")
    assert "stopped by SIGTERM at step" in first_run, first_run[-4000:]
    assert "resumed from" in second_run and f"done: {STEPS} steps" in second_run, second_run[-4000:]


@pytest.mark.tier("full")
def test_a_drifted_image_fails_the_gate_and_nothing_is_submitted(cpu_image, registry, slurm, tmp_path):
    drifted = build_drifted_image(cpu_image, tmp_path)
    try:
        push(drifted, f"{registry}/pytorch-dev-pipeline:drifted")
    finally:
        docker("image", "rm", drifted, check=False)
    pipeline = start_pipeline(slurm, f"{registry}/pytorch-dev-pipeline:drifted", checkpoint_dir(tmp_path),
                              tmp_path / "job.out", report_dir=tmp_path / "report")
    stdout, stderr = pipeline.communicate(timeout=GATE_TIMEOUT_S)
    assert pipeline.returncode != 0
    # make exits 2 whenever its recipe fails; the gate's own status 1 (a check failed, not bad input) is in
    # make's line.
    assert "regression] Error 1" in stderr, stdout + stderr[-4000:]
    assert "FAIL cnn-ddp loss: largest relative deviation" in stdout and "FAILED: cnn-ddp loss" in stdout, stdout
    assert not json.loads((tmp_path / "report" / "report.json").read_text())["passed"]
    assert "4/4 submitting" not in stderr and not jobs(slurm)


def test_a_reference_the_registry_lacks_ends_in_one_line_and_nothing_is_submitted(cpu_image, registry, slurm, tmp_path):
    pipeline = start_pipeline(slurm, f"{registry}/pytorch-dev-pipeline:never-pushed", checkpoint_dir(tmp_path),
                              tmp_path / "job.out")
    _, stderr = pipeline.communicate(timeout=300)
    assert pipeline.returncode == 2
    failure = [line for line in stderr.splitlines() if not line.startswith("[pipeline]")]
    assert len(failure) == 1 and "never-pushed cannot be resolved" in failure[0], stderr
    assert not jobs(slurm)


def test_a_submission_slurm_rejects_ends_in_one_line(slurm, tmp_path):
    digest = f"127.0.0.1:5000/pytorch-dev@sha256:{'a' * 64}"
    result = run_tool("python3", "tools/pipeline/submit_slurm.py", digest, "--ckpt-dir", str(tmp_path),
                      "--sbatch-option=--partition=no-such-partition", env=slurm.env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Slurm rejected the job" in result.stderr, result.stderr
    assert not jobs(slurm)
