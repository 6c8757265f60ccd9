"""The compiled code that travels with a run's checkpoints, so a resume anywhere starts warm.

torch.compile keeps what it built in a cache folder (Inductor's FX graphs, and on a GPU Triton's
kernels). The image keeps that folder in ~/.cache, but a new pod, a Slurm requeue on another node or a
new machine starts with an empty one and compiles from nothing. So a run with --compile also writes
torch's cache artifacts (torch.compiler.save_cache_artifacts) into --ckpt-dir, once its first step has
compiled everything; a resume loads them into the cache before compiling. torch's cache keys name the
GPU's index, so each local rank has a file of its own (compiled_code.LOCAL_RANK.bin), written by the
ranks of the first node and loaded by the ranks of the same local rank on every node.

The file is code (a pickle of compiled kernels): loading it runs it. So it is loaded only from the run's
own --ckpt-dir, only when it is a regular file of sane size (trainer/bounded_read.py), when the torch,
Triton and device it records are this process's own, its checksum holds, and its signature proves that
this user's own runs wrote it (trainer/compiled_code_key.py: a key outside the checkpoint folder).
Anything else (another build, a damaged file, a file another user planted, a link or a FIFO) costs one
line and a cold compile, never the run.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import platform

import torch

from trainer.bounded_read import RefusedFile, read_regular_file
from trainer.checkpoint_write import CheckpointWriteError, os_error_cause, write_atomically
from trainer.compiled_code_key import KeyUnusable, key_path, read_key, read_or_make_key, signature, signed_by

HEADER_LIMIT = 4096  # the JSON line before the artifacts
# Far above what a model's compiled graphs take (a few MiB on a CPU, tens on a GPU); what is larger is
# not worth reading to find out.
SIZE_LIMIT = 1 << 30


def compiled_code_path(ckpt_dir: pathlib.Path, local_rank: int) -> pathlib.Path:
    return ckpt_dir / f"compiled_code.{local_rank}.bin"


def build_identity(device: torch.device) -> dict[str, str | None]:
    """What compiled code depends on beyond its source: torch, Triton, Python and the device it ran on."""
    try:
        import triton
        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        where = f"{torch.cuda.get_device_name(device)} (sm_{major}{minor})"
    else:
        where = f"{device.type} {platform.machine()}"
    return {"torch": torch.__version__, "triton": triton_version, "python": platform.python_version(),
            "device": where}


def describe(identity: dict[str, str | None]) -> str:
    triton = f", Triton {identity.get('triton')}" if identity.get("triton") else ""
    return f"torch {identity.get('torch')}{triton}, Python {identity.get('python')} on {identity.get('device')}"


def load_compiled_code(path: pathlib.Path, device: torch.device) -> tuple[bool, str | None]:
    """Loads the compiled code in PATH into torch's caches. Returns whether it did, and the line that
    says what happened (None when there is no file)."""
    try:
        data, _ = read_regular_file(path, SIZE_LIMIT)
    except FileNotFoundError:
        return False, None
    except RefusedFile as refused:
        return False, f"compiled code {path} {refused}, so it is not read; compiling afresh"
    except OSError as error:
        return False, f"compiled code {path} is unreadable ({error.strerror}); compiling afresh"
    header, newline, artifacts = data.partition(b"\n")
    try:
        recorded = json.loads(header[:HEADER_LIMIT]) if newline else None
    except ValueError:
        recorded = None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("identity"), dict):
        return False, f"compiled code {path} is damaged (no header); compiling afresh"
    identity = build_identity(device)
    if recorded["identity"] != identity:
        return False, (f"compiled code {path} is for {describe(recorded['identity'])}, not {describe(identity)}; "
                       f"compiling afresh")
    digest = hashlib.sha256(artifacts).hexdigest()
    if digest != recorded.get("sha256"):
        return False, f"compiled code {path} is damaged (its checksum differs); compiling afresh"
    try:
        key = read_key(key_path())
    except KeyUnusable as unusable:
        return False, f"compiled code {path} cannot be checked: {unusable}; compiling afresh"
    if key is None or not signed_by(key, identity, digest, recorded.get("signature")):
        return False, (f"compiled code {path} was not signed with your key ({key_path()}), so no run of yours "
                       f"wrote it; compiling afresh")
    try:
        info = torch.compiler.load_cache_artifacts(artifacts)
    except Exception as error:  # whatever torch makes of artifacts it cannot use: a cold compile, not a crash
        return False, f"compiled code {path} could not be loaded ({type(error).__name__}: {error}); compiling afresh"
    if info is None:
        return False, f"compiled code {path} holds nothing torch can load; compiling afresh"
    return True, f"compiled code loaded from {path} ({len(artifacts) / 2**20:.1f} MiB)"


def save_compiled_code(path: pathlib.Path, device: torch.device) -> str | None:
    """Writes what torch compiled in this process into PATH, atomically; returns the line to print. A
    failed write is a warning: the run only loses a warm start."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return None
    artifacts = saved[0]
    try:
        key = read_or_make_key(key_path())
    except (KeyUnusable, OSError) as error:
        why = error.strerror if isinstance(error, OSError) else error
        return f"train_ddp.py: warning: the compiled code is not saved: {why}; a resume elsewhere compiles afresh"
    identity, digest = build_identity(device), hashlib.sha256(artifacts).hexdigest()
    header = json.dumps({"identity": identity, "sha256": digest, "signature": signature(key, identity, digest)})
    try:  # as a checkpoint is written: never through a planted link, never half
        write_atomically(path, lambda file: file.write(header.encode() + b"\n" + artifacts))
    except (CheckpointWriteError, OSError) as error:
        cause = os_error_cause(error)
        why = cause.strerror if cause else error
        return (f"train_ddp.py: warning: cannot write the compiled code to {path} ({why}); "
                f"a resume elsewhere compiles afresh")
    return f"compiled code saved to {path} ({len(artifacts) / 2**20:.1f} MiB) for a warm resume"
