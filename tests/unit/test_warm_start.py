"""A resume starts warm: the compiled code saved beside the checkpoints (scripts/trainer/compiled_code.py)
fills an empty compile cache, as on a new pod or node, and the first step says where its time went
(scripts/trainer/first_step.py). Anything wrong with the file costs one line and a cold compile.

The trainer runs as a process on the unit tier's torch, with torch's own cache counters; --compile on a
CPU needs g++ (the host has it, the CPU image does not), so without one these tests skip.

    make test-unit PYTEST_ARGS=tests/unit/test_warm_start.py
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import pytest
import torch

from tests.support import REPO_ROOT
from trainer import first_step
from trainer.compiled_code import build_identity, compiled_code_path, load_compiled_code
from trainer.first_step import CompileCounts, FirstStep

CPU = torch.device("cpu")
# The tiny CNN, compiled whole: the cheapest model to compile, two steps a run.
COMPILED_RUN = ["--model", "tiny", "--image-size", "16", "--synthetic-samples", "64", "--batch-size", "8",
                "--num-workers", "0", "--log-every", "1", "--compile"]


def train(ckpt_dir: pathlib.Path, cache: pathlib.Path, steps: int) -> tuple[str, list[dict]]:
    """Runs the trainer to STEPS with its compile cache in CACHE; returns its output and its records."""
    metrics = ckpt_dir.with_suffix(f".{steps}.jsonl")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "train_ddp.py"), *COMPILED_RUN, "--max-steps", str(steps),
         "--ckpt-dir", str(ckpt_dir), "--metrics-file", str(metrics)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output, [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> pathlib.Path:
    """A compiled run of 2 steps, cold: its checkpoint folder, with the compiled code in it."""
    if not shutil.which(os.environ.get("CXX", "g++")):
        pytest.skip("--compile on a CPU needs g++, which this host lacks")
    folder = tmp_path_factory.mktemp("warm")
    output, records = train(folder / "ckpt", folder / "cache-cold", 2)
    assert "first step" in output and "cold:" in output, output
    assert records[0]["compile_cache_misses"] > 0 and records[0]["compile_s"] > 0, records[0]
    assert compiled_code_path(folder / "ckpt", 0).exists(), output
    return folder / "ckpt"


def test_a_resume_in_an_empty_cache_compiles_warm_from_the_checkpoint_folder(saved_run, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    output, records = train(ckpt, tmp_path / "empty-cache", 4)  # a new machine: nothing in its cache
    assert f"compiled code loaded from {compiled_code_path(ckpt, 0)}" in output, output
    assert "resumed from" in output and "warm: all" in output, output
    first = records[0]
    assert first["step"] == 3 and first["compile_cache_hits"] > 0 and first["compile_cache_misses"] == 0, first
    assert first["time_to_first_step_s"] >= first["startup_s"] + first["compile_s"], first


@pytest.mark.parametrize("damage", ["checksum", "build", "header"])
def test_damaged_or_foreign_compiled_code_costs_one_line_and_a_cold_compile(saved_run, tmp_path, damage):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    path = compiled_code_path(ckpt, 0)
    header, _, artifacts = path.read_bytes().partition(b"\n")
    recorded = json.loads(header)
    if damage == "checksum":
        data = header + b"\n" + artifacts[: len(artifacts) // 2] + b"\0" * (len(artifacts) - len(artifacts) // 2)
    elif damage == "build":
        recorded["identity"]["torch"] = "2.0.0"
        data = json.dumps(recorded).encode() + b"\n" + artifacts
    else:
        data = b"\x80\x04not a header" + artifacts
    path.write_bytes(data)

    loaded, line = load_compiled_code(path, CPU)  # what the trainer's resume prints, loading nothing
    assert not loaded
    assert line.startswith(f"compiled code {path} ") and line.endswith("; compiling afresh"), line
    assert {"checksum": "checksum differs", "build": "is for torch 2.0.0", "header": "no header"}[damage] in line


def test_the_trainer_says_so_in_one_line_and_trains_on(saved_run, tmp_path):
    """The trainer's side of a damaged file: its one line, then a compile without it (from the local
    cache the first run left, to keep this tier fast: an empty one compiles cold, as the first run did)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    compiled_code_path(ckpt, 0).write_bytes(b"\x80\x04 not compiled code")
    output, records = train(ckpt, saved_run.parent / "cache-cold", 3)
    assert [text for text in output.splitlines() if "compiling afresh" in text] == [
        f"compiled code {compiled_code_path(ckpt, 0)} is damaged (no header); compiling afresh"], output
    assert "compiled code loaded" not in output and "Traceback" not in output, output
    assert records[0]["step"] == 3 and "compile_s" in records[0], records[0]


def test_no_file_is_no_line_and_the_identity_names_the_build():
    assert load_compiled_code(pathlib.Path("/nonexistent/compiled_code.0.bin"), CPU) == (False, None)
    identity = build_identity(CPU)
    assert identity["torch"] == torch.__version__ and identity["device"].startswith("cpu ")


def test_the_first_step_line_splits_the_time_and_says_warm_or_cold():
    cold = FirstStep(startup_s=6.0, checkpoint_load_s=0.5, step_s=31.0, compile=CompileCounts(29.0, 0, 12))
    assert cold.line() == ("first step 37.5 s after the process started: start-up 6.0 s, checkpoint load 0.5 s, "
                           "compile 29.0 s (cold: 12 of 12 graphs compiled, 0 from the cache), "
                           "the step itself 2.0 s")
    warm = FirstStep(startup_s=6.0, checkpoint_load_s=0.5, step_s=7.0, compile=CompileCounts(5.0, 12, 0))
    assert "compile 5.0 s (warm: all 12 graphs from the cache)" in warm.line()
    assert warm.record() == {"time_to_first_step_s": 13.5, "startup_s": 6.0, "checkpoint_load_s": 0.5,
                             "compile_s": 5.0, "first_step_s": 2.0, "compile_cache_hits": 12,
                             "compile_cache_misses": 0}
    plain = FirstStep(startup_s=3.0, checkpoint_load_s=0.0, step_s=0.5, compile=None)
    assert plain.line() == ("first step 3.5 s after the process started: start-up 3.0 s, checkpoint load 0.0 s, "
                            "the step itself 0.5 s")
    lost = FirstStep(3.0, 0.0, 9.0, CompileCounts(8.0, 0, 3), cache_dir="/tmp/torchinductor_dev")
    assert lost.line().endswith("; the compile cache /tmp/torchinductor_dev is lost with the container "
                                "(~/.cache is not writable: set TORCHINDUCTOR_CACHE_DIR to a kept folder)")


def test_a_warm_resume_does_not_rewrite_the_compiled_code_it_loaded(saved_run, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_run, ckpt)
    before = compiled_code_path(ckpt, 0).stat().st_mtime_ns
    output, _ = train(ckpt, saved_run.parent / "cache-cold", 3)  # every graph from the cache
    assert "compiled code saved" not in output and compiled_code_path(ckpt, 0).stat().st_mtime_ns == before, output


def test_the_line_names_a_compile_cache_the_image_could_not_keep(monkeypatch, tmp_path):
    """Where ~/.cache cannot be written the image's rule leaves torch's default; torch then sets
    TORCHINDUCTOR_CACHE_DIR itself when it compiles, and the trainer's line still says the cache is lost."""
    monkeypatch.setitem(sys.modules, "container_compile_cache", types.SimpleNamespace(fell_back=True))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torchinductor_dev"))
    assert first_step.inductor_cache_lost() == str(tmp_path / "torchinductor_dev")
    monkeypatch.setitem(sys.modules, "container_compile_cache", types.SimpleNamespace(fell_back=False))
    assert first_step.inductor_cache_lost() is None
