"""What a resume does with the compiled code beside the checkpoints (scripts/trainer/compiled_code.py),
decided before torch is called: only a regular file of sane size, for this build, undamaged, and signed
with the user's own key is loaded; anything else costs one line and a cold compile. And the first step's
line (scripts/trainer/first_step.py).

Files here are written by hand, so no test compiles; the trainer's own compiled runs (a cold run, a warm
resume, a planted file refused by the real trainer) are in tests/host/test_compiled_runs.py.

    make test-unit PYTEST_ARGS=tests/unit/test_warm_start.py
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import types

import pytest
import torch

from trainer import compiled_code, first_step
from trainer.compiled_code import build_identity, compiled_code_path, load_compiled_code
from trainer.compiled_code_key import KEY_FILE_VARIABLE, read_or_make_key, signature
from trainer.first_step import CompileCounts, FirstStep

CPU = torch.device("cpu")
ARTIFACTS = b"stand-in for torch's cache artifacts"


@pytest.fixture
def key_file(tmp_path, monkeypatch) -> pathlib.Path:
    """The user's key, in a folder of this test's (COMPILED_CODE_KEY_FILE), made on first use."""
    path = tmp_path / "home" / "compiled-code.key"
    monkeypatch.setenv(KEY_FILE_VARIABLE, str(path))
    return path


@pytest.fixture
def torch_loads(monkeypatch) -> list[bytes]:
    """Every call that would hand bytes to torch's loader (which unpickles them): recorded, never made."""
    calls: list[bytes] = []
    monkeypatch.setattr(compiled_code.torch.compiler, "load_cache_artifacts", lambda data: calls.append(data))
    return calls


def write_compiled_code(path: pathlib.Path, artifacts: bytes = ARTIFACTS, key: bytes | None = None,
                        **header_changes) -> None:
    identity = build_identity(CPU)
    digest = hashlib.sha256(artifacts).hexdigest()
    header = {"identity": identity, "sha256": digest}
    if key is not None:
        header["signature"] = signature(key, identity, digest)
    header.update(header_changes)
    path.write_bytes(json.dumps(header).encode() + b"\n" + artifacts)


def assert_refused(path: pathlib.Path, expected: str, torch_loads: list[bytes]) -> None:
    loaded, line = load_compiled_code(path, CPU)
    assert not loaded and torch_loads == []
    assert line.startswith(f"compiled code {path} ") and line.endswith("; compiling afresh"), line
    assert expected in line, line


def test_a_file_signed_with_the_users_key_goes_to_torch(tmp_path, key_file, torch_loads):
    path = compiled_code_path(tmp_path, 0)
    write_compiled_code(path, key=read_or_make_key(key_file))
    loaded, line = load_compiled_code(path, CPU)
    assert torch_loads == [ARTIFACTS]
    assert (loaded, line) == (False, f"compiled code {path} holds nothing torch can load; compiling afresh")


def test_compiled_code_planted_by_someone_else_never_reaches_torch(tmp_path, key_file, torch_loads):
    """The attack of round 8: code of the attacker's, its checksum recomputed and the identity kept, signed
    with a key of the attacker's own, or with none."""
    read_or_make_key(key_file)
    planted = b"\x80\x04cos\nsystem\n(S'touch /tmp/owned'\ntR."  # a pickle that runs a command
    path = compiled_code_path(tmp_path, 0)
    for key in (os.urandom(32), None):
        write_compiled_code(path, planted, key=key)
        assert_refused(path, f"was not signed with your key ({key_file}), so no run of yours wrote it",
                       torch_loads)


def test_without_a_key_of_the_users_no_file_is_trusted(tmp_path, key_file, torch_loads):
    path = compiled_code_path(tmp_path, 0)
    write_compiled_code(path, key=os.urandom(32))
    assert_refused(path, "was not signed with your key", torch_loads)
    assert not key_file.exists()  # reading makes no key; only a save does


@pytest.mark.parametrize("damage", ["checksum", "build", "header"])
def test_damaged_or_foreign_compiled_code_costs_one_line_and_a_cold_compile(tmp_path, key_file, torch_loads,
                                                                           damage):
    path = compiled_code_path(tmp_path, 0)
    key = read_or_make_key(key_file)
    if damage == "checksum":
        write_compiled_code(path, key=key, sha256=hashlib.sha256(b"other bytes").hexdigest())
    elif damage == "build":
        write_compiled_code(path, key=key, identity={**build_identity(CPU), "torch": "2.0.0"})
    else:
        path.write_bytes(b"\x80\x04not a header" + ARTIFACTS)
    assert_refused(path, {"checksum": "checksum differs", "build": "is for torch 2.0.0", "header": "no header"}[damage],
                   torch_loads)


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "folder", "too large"])
def test_what_is_not_a_regular_file_of_sane_size_is_never_read(tmp_path, key_file, torch_loads, monkeypatch, kind):
    """A link to /dev/zero once ran the reader out of memory, a FIFO hung it, a 3 GB file was read whole."""
    path = compiled_code_path(tmp_path, 0)
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        write_compiled_code(path, key=read_or_make_key(key_file))
        monkeypatch.setattr(compiled_code, "SIZE_LIMIT", 64)
    expected = {"link to /dev/zero": "is a symbolic link", "fifo": "is not a regular file",
                "folder": "is not a regular file", "too large": "more than the 64 bytes allowed"}[kind]
    assert_refused(path, f"{expected}, so it is not read", torch_loads)


def test_the_key_is_made_private_once_and_read_back_by_every_rank(key_file):
    first = read_or_make_key(key_file)
    assert read_or_make_key(key_file) == first and len(first) == 32
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.parent.stat().st_mode & 0o777 == 0o700
    assert [entry.name for entry in key_file.parent.iterdir()] == [key_file.name]  # no candidate left behind


@pytest.mark.parametrize("flaw", ["open to others", "a link", "not a key"])
def test_a_key_that_is_not_private_is_refused_and_never_replaced(tmp_path, monkeypatch, torch_loads, flaw):
    """In the default place, under ~/.cache, where only a link of someone's could have put it."""
    key_file = tmp_path / "cache" / "train_ddp" / "compiled-code.key"
    monkeypatch.delenv(KEY_FILE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    key = read_or_make_key(key_file)
    path = compiled_code_path(tmp_path, 0)
    write_compiled_code(path, key=key)
    if flaw == "open to others":
        key_file.chmod(0o644)
    elif flaw == "a link":
        elsewhere = tmp_path / "elsewhere.key"
        key_file.rename(elsewhere)
        key_file.symlink_to(elsewhere)
    else:
        key_file.write_bytes(b"short")
    expected = {"open to others": "is open to others (mode 644)", "a link": "is a symbolic link",
                "not a key": "is not a key (5 bytes, not 32)"}[flaw]
    assert_refused(path, f"cannot be checked: the key {key_file} {expected}", torch_loads)
    with pytest.raises(Exception, match=expected.replace("(", r"\(").replace(")", r"\)")):
        read_or_make_key(key_file)


def test_a_key_file_you_name_may_be_a_platforms_secret_a_link_to_a_group_readable_file(tmp_path, monkeypatch,
                                                                                      torch_loads):
    """A Kubernetes Secret: a link (..data/key) to a file the pod's fsGroup may read."""
    secret = tmp_path / "secret" / "..data" / "key"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(os.urandom(32))
    secret.chmod(0o440)
    named = tmp_path / "secret" / "key"
    named.symlink_to("..data/key")
    monkeypatch.setenv(KEY_FILE_VARIABLE, str(named))
    path = compiled_code_path(tmp_path, 0)
    write_compiled_code(path, key=read_or_make_key(named))
    load_compiled_code(path, CPU)
    assert torch_loads == [ARTIFACTS]


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
                             "compile_cache_misses": 0, "compiled_kernels": 0}
    # Every graph from the cache, but its kernels built again into an empty cache folder (a CPU's g++):
    # the time is not called warm without saying where it went.
    rebuilt = FirstStep(startup_s=3.0, checkpoint_load_s=0.0, step_s=25.0, compile=CompileCounts(24.9, 6, 0, 28))
    assert "compile 24.9 s (warm: all 6 graphs from the cache, yet 28 C++ kernels compiled again)" in rebuilt.line()
    assert rebuilt.record()["compiled_kernels"] == 28
    plain = FirstStep(startup_s=3.0, checkpoint_load_s=0.0, step_s=0.5, compile=None)
    assert plain.line() == ("first step 3.5 s after the process started: start-up 3.0 s, checkpoint load 0.0 s, "
                            "the step itself 0.5 s")
    lost = FirstStep(3.0, 0.0, 9.0, CompileCounts(8.0, 0, 3), cache_dir="/tmp/torchinductor_dev")
    assert lost.line().endswith("; the compile cache /tmp/torchinductor_dev is lost with the container "
                                "(~/.cache is not writable: set TORCHINDUCTOR_CACHE_DIR to a kept folder)")


def test_the_line_names_a_compile_cache_the_image_could_not_keep(monkeypatch, tmp_path):
    """Where ~/.cache cannot be written the image's rule leaves torch's default; torch then sets
    TORCHINDUCTOR_CACHE_DIR itself when it compiles, and the trainer's line still says the cache is lost."""
    monkeypatch.setitem(sys.modules, "container_compile_cache", types.SimpleNamespace(fell_back=True))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torchinductor_dev"))
    assert first_step.inductor_cache_lost() == str(tmp_path / "torchinductor_dev")
    monkeypatch.setitem(sys.modules, "container_compile_cache", types.SimpleNamespace(fell_back=False))
    assert first_step.inductor_cache_lost() is None
