"""deploy/slurm/train.sbatch against a real Slurm (Debian's slurmctld + slurmd on this machine, one node),
in bare mode (torchrun from a venv with torch): a requeued job checkpoints on SIGTERM, resumes and finishes.

    .ci/install-slurm.sh    # once, as root: slurmctld, slurmd, munge
    make test FLAVOR=cpu PYTEST_ARGS="tests/deploy/test_slurm.py"
"""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT, SETTLES_S, STARTS_S
from tests.deploy.helpers.multinode_compose import ERROR_MARKERS
from tests.support.slurm_cluster import SlurmCluster, running_cluster
from tests.support.training import TINY_MODEL
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

SBATCH_SCRIPT = REPO_ROOT / "deploy" / "slurm" / "train.sbatch"
# A venv with the same torch as the image: "bare nodes" with torchrun on their PATH. Kept between runs.
BARE_VENV = REPO_ROOT / ".build" / "venv-bare-torch"
TRAINING = shlex.split(f"{TINY_MODEL} --batch-size 8 --num-workers 0 --device cpu --log-every 10 --save-every 0")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[SlurmCluster]:
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def bare_node_path() -> str:
    """PATH with a python that has torch (and so torchrun), as on a bare node with a venv activated."""
    version = os.environ.get("EXPECTED_TORCH_VERSION")
    if not version:
        pytest.fail("EXPECTED_TORCH_VERSION is not set: run this test through `make test`, which sets it")
    python = BARE_VENV / "bin" / "python"
    has_torch = python.exists() and subprocess.run(
        [python, "-c", f"import torch, sys; sys.exit(not torch.__version__.startswith({version!r}))"],
        capture_output=True, timeout=120).returncode == 0
    if not has_torch:
        subprocess.run(["python3", "-m", "venv", "--clear", BARE_VENV], check=True, timeout=120)
        subprocess.run([python, "-m", "pip", "install", "--quiet", f"torch=={version}", "numpy"], check=True,
                       timeout=600, capture_output=True)
    return f"{BARE_VENV / 'bin'}:{os.environ['PATH']}"


def submit(slurm: SlurmCluster, tmp_path: pathlib.Path, path: str, flags: list[str]) -> tuple[str, pathlib.Path]:
    output = tmp_path / "job.out"
    env = {"PATH": path, "CKPT_DIR": str(tmp_path / "ckpt"), "NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1",
           "SCRIPTS_DIR": str(REPO_ROOT / "scripts"), "LAUNCH_MODE": "bare"}
    result = slurm.run("sbatch", "--parsable", "--nodes=1", f"--output={output}", str(SBATCH_SCRIPT), *flags, env=env)
    return result.stdout.strip().split(";")[0], output


def wait_for_text(path: pathlib.Path, text: str, timeout: float) -> None:
    wait_until(lambda: path.exists() and text in path.read_text(), timeout, interval=0.3,
               failure=lambda: f"{text!r} not in {path}:\n{path.read_text() if path.exists() else ''}")


@pytest.mark.tier("full")
def test_a_requeued_job_checkpoints_on_sigterm_resumes_and_finishes_cleanly(slurm, bare_node_path, tmp_path):
    job, output = submit(slurm, tmp_path, bare_node_path, [*TRAINING, "--max-steps", "400"])
    wait_for_text(output, "step 10/400", timeout=STARTS_S)
    slurm.run("scontrol", "requeue", job)  # what preemption with PreemptMode=REQUEUE does
    slurm.wait_for_job_state(job, {"PENDING"}, timeout=SETTLES_S)
    # Slurm holds a requeued job back for a while (Reason=BeginTime); an administrator may start it now.
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    state = slurm.wait_for_job_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=STARTS_S)

    text = output.read_text()
    assert state == "COMPLETED", text[-5000:]
    assert slurm.job_field(job, "Restarts") == "1"
    first_run, _, second_run = text.partition(f"job {job} (restart 1)")
    assert "stopped by SIGTERM at step" in first_run, first_run[-5000:]
    assert f"rendezvous on {slurm.node}:29500" in first_run
    stopped_at = int(first_run.split("stopped by SIGTERM at step ")[1].split("/")[0])
    assert f"resumed from {tmp_path / 'ckpt'}/step_{stopped_at:06d}.pt" in second_run, second_run[-5000:]
    assert "done: 400 steps" in second_run
    found = [marker for marker in ERROR_MARKERS if marker in second_run]
    assert not found, f"the resumed run logged {found}:\n{second_run[-5000:]}"


@pytest.mark.parametrize(("env", "message"), [
    ({}, "run me with sbatch"),
    ({"SLURM_JOB_ID": "7"}, "set CKPT_DIR"),
    ({"SLURM_JOB_ID": "7", "CKPT_DIR": "/tmp", "LAUNCH_MODE": "enroot"}, "LAUNCH_MODE=enroot is not a mode"),
    ({"SLURM_JOB_ID": "7", "CKPT_DIR": "/tmp", "LAUNCH_MODE": "docker", "CONTAINER_IMAGE": "pytorch-dev:gpu-latest"},
     "docker mode: set CONTAINER_IMAGE to a digest"),
    ({"SLURM_JOB_ID": "7", "CKPT_DIR": "/tmp", "LAUNCH_MODE": "podman", "CONTAINER_IMAGE": "x@sha256:abc"},
     "podman mode: set CONTAINER_IMAGE to a digest"),
    ({"SLURM_JOB_ID": "7", "CKPT_DIR": "/tmp", "LAUNCH_MODE": "pyxis"}, "pyxis mode: set CONTAINER_IMAGE"),
])
def test_a_misconfigured_job_stops_with_one_clear_line(env, message):
    base = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CKPT_", "LAUNCH_"))}
    result = subprocess.run(["bash", str(SBATCH_SCRIPT)], env={**base, "SLURM_JOB_NODELIST": "n1", **env},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
