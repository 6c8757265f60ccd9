"""The trainer's own compiled runs, as host processes on the test venv's torch: a cold run saves its
compiled code beside the checkpoints, a resume into an empty compile cache (a new pod or node) starts warm
from it without rewriting it, and a file signed with someone else's key costs one line and a compile.

--compile on a CPU needs a C++ compiler, which the host has and the CPU image does not: these tests run
on the host, in `make test`'s landing pass (docs/testing.md), and skip where g++ is missing. What the
loader decides before torch is called is in tests/unit/test_warm_start.py.

    make test PYTEST_ARGS=tests/host/test_compiled_runs.py
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest
from trainer.compiled_code import compiled_code_path
from trainer.compiled_code_key import KEY_FILE_VARIABLE, signature

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

# The tiny CNN, compiled whole: the cheapest model to compile, two steps a run.
COMPILED_RUN = ["--model", "tiny", "--image-size", "16", "--synthetic-samples", "64", "--batch-size", "8",
                "--num-workers", "0", "--log-every", "1", "--compile"]


def train(ckpt_dir: pathlib.Path, cache: pathlib.Path, steps: int, key: pathlib.Path) -> tuple[str, list[dict]]:
    """Runs the trainer to STEPS with its compile cache in CACHE and the user's key at KEY; returns its
    output and its records."""
    metrics = ckpt_dir.with_suffix(f".{steps}.jsonl")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "train_ddp.py"), *COMPILED_RUN, "--max-steps", str(steps),
         "--ckpt-dir", str(ckpt_dir), "--metrics-file", str(metrics)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache),
             KEY_FILE_VARIABLE: str(key)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output, [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> pathlib.Path:
    """A compiled run of 2 steps, cold: its checkpoint folder, with the compiled code in it."""
    if not shutil.which(os.environ.get("CXX", "g++")):
        pytest.skip("--compile on a CPU needs g++, which this host lacks")
    folder = tmp_path_factory.mktemp("warm")
    output, records = train(folder / "ckpt", folder / "cache-cold", 2, folder / "key")
    assert "first step" in output and "cold:" in output, output
    assert records[0]["compile_cache_misses"] > 0 and records[0]["compile_s"] > 0, records[0]
    assert compiled_code_path(folder / "ckpt", 0).exists(), output
    return folder / "ckpt"


def test_a_resume_in_an_empty_cache_compiles_warm_and_rewrites_nothing(saved_run, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    before = compiled_code_path(ckpt, 0).stat().st_mtime_ns
    # A new machine of the same user: nothing in its compile cache, the same key (a shared home).
    output, records = train(ckpt, tmp_path / "empty-cache", 4, saved_run.parent / "key")
    assert f"compiled code loaded from {compiled_code_path(ckpt, 0)}" in output, output
    assert "resumed from" in output and "warm: all" in output, output
    # A new cache folder holds no compiled kernel: on a CPU each is built again, and the line says so.
    assert f"yet {records[0]['compiled_kernels']} C++ kernels compiled again" in output, output
    first = records[0]
    assert first["step"] == 3 and first["compile_cache_hits"] > 0 and first["compile_cache_misses"] == 0, first
    assert first["time_to_first_step_s"] >= first["startup_s"] + first["compile_s"], first
    assert "compiled code saved" not in output and compiled_code_path(ckpt, 0).stat().st_mtime_ns == before, output


def test_compiled_code_signed_by_someone_else_costs_one_line_and_the_run_trains_on(saved_run, tmp_path):
    """Real compiled code, re-signed with another user's key (whoever can write a shared --ckpt-dir can
    do that much): the real trainer refuses it in one line and compiles without it (from the local cache
    the first run left, to keep this fast: an empty one compiles cold, as the first run did)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    path = compiled_code_path(ckpt, 0)
    header, _, artifacts = path.read_bytes().partition(b"\n")
    recorded = json.loads(header)
    recorded["signature"] = signature(os.urandom(32), recorded["identity"], hashlib.sha256(artifacts).hexdigest())
    path.write_bytes(json.dumps(recorded).encode() + b"\n" + artifacts)
    output, records = train(ckpt, saved_run.parent / "cache-cold", 3, saved_run.parent / "key")
    assert [text for text in output.splitlines() if "compiling afresh" in text] == [
        f"compiled code {path} was not signed with your key ({saved_run.parent / 'key'}), so no run of yours "
        f"wrote it; compiling afresh"], output
    assert "compiled code loaded" not in output and "Traceback" not in output, output
    assert records[0]["step"] == 3 and "compile_s" in records[0], records[0]


def test_a_stop_in_the_first_steps_compile_ends_it_at_once_and_the_run_starts_again(tmp_path):
    """SIGTERM while the first step compiles (minutes on a CPU for a real model): nothing was trained since
    the start, so the trainer ends there and then, exit 0 with one line, instead of keeping a container's
    stop waiting until it is killed mid-compile; the same command then trains."""
    if not shutil.which(os.environ.get("CXX", "g++")):
        pytest.skip("--compile on a CPU needs g++, which this host lacks")
    ckpt, cache, key = tmp_path / "ckpt", tmp_path / "cache", tmp_path / "key"
    trainer = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "scripts" / "train_ddp.py"), *COMPILED_RUN, "--max-steps", "2",
         "--ckpt-dir", str(ckpt)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache), KEY_FILE_VARIABLE: str(key)})
    lines = []
    for line in trainer.stdout:  # the start line comes just before the first step, and its compile, begin
        lines.append(line)
        if line.startswith("training tiny"):
            break
    trainer.send_signal(signal.SIGTERM)
    output = "".join(lines) + trainer.communicate(timeout=600)[0]
    assert trainer.returncode == 0, output
    assert output.splitlines()[-1] == (
        "stopped by SIGTERM in the first step, before anything was trained since the start or the checkpoint: "
        "nothing to save; run the same command again to resume"), output
    assert "first step" not in output.replace("in the first step", ""), "the compile was waited for"
    assert not list(ckpt.glob("step_*")) and "Traceback" not in output, output
    output, records = train(ckpt, cache, 2, key)
    assert "done: 2 steps" in output and records[-1]["step"] == 2, output
