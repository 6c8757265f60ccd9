"""Checkpoint folders that hold junk, traps or no free space never cost a checkpoint or a file elsewhere
(issue 11, items 4 and 5 and the disk-full case).

    make test PYTEST_ARGS="tests/trainer/test_checkpoint_safety.py"
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none python -m pytest tests/trainer/test_checkpoint_safety.py
"""
from __future__ import annotations

import shlex

import pytest

from tests.support.training import TINY_RUN, make_workdir, trainer_command

pytestmark = pytest.mark.tier("full")

# One process, 4 steps, a checkpoint every 2: a few seconds per run.
SHORT_RUN = f"{TINY_RUN} --num-workers 0 --max-steps 4 --save-every 2"


@pytest.fixture
def workdir(torch_host):
    path = make_workdir(torch_host)
    yield path
    torch_host.run(f"chmod -R u+w {path}; rm -rf {path}")


def train(torch_host, scripts_dir: str, workdir: str, extra: str = ""):
    return torch_host.run(f"cd {workdir} && {trainer_command(nproc=None, scripts_dir=scripts_dir)} "
                          f"{SHORT_RUN} --ckpt-dir {workdir}/ckpt {extra}")


def test_unreadable_newer_checkpoints_are_moved_aside_and_the_new_one_is_kept(torch_host, scripts_dir, workdir):
    """--keep 1 with a truncated step_000999.pt: the run keeps what it saved, not the junk."""
    torch_host.check_output(f"mkdir {workdir}/ckpt && head -c 1000 /dev/urandom > {workdir}/ckpt/step_000999.pt")
    result = train(torch_host, scripts_dir, workdir, "--keep 1")
    assert result.rc == 0, result.stdout + result.stderr
    assert f"moved {workdir}/ckpt/step_000999.pt aside to {workdir}/ckpt/step_000999.pt.corrupt" in result.stdout
    assert torch_host.file(f"{workdir}/ckpt/step_000004.pt").exists
    assert torch_host.file(f"{workdir}/ckpt/step_000999.pt.corrupt").exists  # kept for a person to look at
    assert not torch_host.file(f"{workdir}/ckpt/step_000002.pt").exists  # --keep 1 still prunes

    again = train(torch_host, scripts_dir, workdir, "--keep 1 --max-steps 6")
    assert f"resumed from {workdir}/ckpt/step_000004.pt" in again.stdout, again.stdout + again.stderr


def test_a_planted_symlink_at_the_temporary_name_is_never_followed(torch_host, scripts_dir, workdir):
    torch_host.check_output(f"mkdir {workdir}/ckpt && echo precious > {workdir}/victim && "
                            f"for step in 000002 000004; do "
                            f"ln -s {workdir}/victim {workdir}/ckpt/.step_$step.pt.tmp; done")
    result = train(torch_host, scripts_dir, workdir)
    assert result.rc == 0, result.stdout + result.stderr
    assert torch_host.file(f"{workdir}/victim").content_string == "precious\n"
    checkpoint = torch_host.file(f"{workdir}/ckpt/step_000004.pt")
    assert checkpoint.is_file and not checkpoint.is_symlink


def test_a_checkpoint_of_another_model_is_refused_with_one_line_naming_the_flags(torch_host, scripts_dir, workdir):
    assert train(torch_host, scripts_dir, workdir, "--max-steps 2").rc == 0
    result = train(torch_host, scripts_dir, workdir, "--model small --num-classes 5")
    assert result.rc == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"train_ddp.py: error: --ckpt-dir {workdir}/ckpt holds a checkpoint of another model "
        "(--model tiny, --num-classes 10; now --model small, --num-classes 5): use the same flags to resume, "
        "or another --ckpt-dir to start afresh"]
    assert torch_host.file(f"{workdir}/ckpt/step_000002.pt").exists  # nothing lost


@pytest.mark.tier("landing")
def test_a_checkpoint_that_cannot_be_read_stops_both_ranks_in_one_line_and_stays(torch_host, scripts_dir, workdir):
    """A refused read (here permissions; an NFS mount's EIO or ESTALE alike) proves nothing about the file:
    moving it aside as corrupt would restart training from step 0."""
    if torch_host.user().uid == 0:
        pytest.skip("root reads a file of any mode: the trainer runs as the container's user in the image")
    assert train(torch_host, scripts_dir, workdir, "--max-steps 2").rc == 0
    torch_host.check_output(f"chmod 000 {workdir}/ckpt/step_000002.pt")
    result = torch_host.run(f"cd {workdir} && {trainer_command(scripts_dir=scripts_dir)} {SHORT_RUN} "
                            f"--ckpt-dir {workdir}/ckpt")
    assert result.rc != 0, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("train_ddp.py: error:")]
    assert errors == [f"train_ddp.py: error: cannot read checkpoint {workdir}/ckpt/step_000002.pt (Permission "
                      "denied); nothing was moved: make --ckpt-dir readable again (its permissions, the disk or the "
                      "mount) and run the same command to resume"], result.stderr
    # torchrun's agent reports the failed workers with a traceback of its own (ChildFailedError); no worker does.
    assert result.stderr.count("Traceback") == 1 and "ChildFailedError" in result.stderr, result.stderr
    listed = torch_host.check_output(f"ls -A {workdir}/ckpt").split()
    assert "step_000002.pt" in listed and not [name for name in listed if name.endswith(".corrupt")], listed


def run_with_a_full_disk(torch_host, workdir: str, limit: str, inner: str):
    """Runs the shell command INNER with writes under WORKDIR/ckpt limited to 1 MiB, the way LIMIT says."""
    torch_host.check_output(f"mkdir {workdir}/ckpt")
    if limit == "full tmpfs":  # a real full file system: a 1 MiB tmpfs in a mount namespace of our own
        if torch_host.run("timeout 10 unshare --user --map-root-user --mount true").rc != 0:
            pytest.skip("unshare cannot make a mount namespace here (containers forbid it): no tmpfs to fill")
        mount = f"mount -t tmpfs -o size=1m tmpfs {workdir}/ckpt"
        return torch_host.run(f"unshare --user --map-root-user --mount sh -c {shlex.quote(f'{mount} && {inner}')}")
    # The shell's file size limit, in KiB; Python ignores SIGXFSZ, so a write past it fails with EFBIG.
    return torch_host.run(f"bash -c {shlex.quote(f'ulimit -f 1024 && {inner}')}")


def test_a_full_disk_ends_with_one_line_and_leaves_no_partial_file(torch_host, scripts_dir, workdir):
    """The tiny CNN's checkpoint (model and AdamW state) is about 1.5 MB, so the first save fails.

    A file size limit stands in for a full disk here, so that this runs in containers too; the FSDP test
    below fills a real file system.
    """
    result = run_with_a_full_disk(torch_host, workdir, "file size limit", (
        f"cd {workdir} && {trainer_command(SHORT_RUN, nproc=None, scripts_dir=scripts_dir)} --ckpt-dir {workdir}/ckpt; "
        f"echo exit=$?; ls -A {workdir}/ckpt"))
    assert "exit=1" in result.stdout, result.stdout + result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"train_ddp.py: error: no space left writing {workdir}/ckpt/step_000002.pt"), \
        result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "exit=1", result.stdout  # ls found no partial file


def test_a_full_disk_under_fsdp_ends_every_rank_and_leaves_no_partial_folder(torch_host, scripts_dir, workdir):
    """Every rank writes its shards (3 MB each for gpt-tiny): the one-line error, then torchrun's own report."""
    result = run_with_a_full_disk(torch_host, workdir, "full tmpfs", (
        f"cd {workdir} && {trainer_command(scripts_dir=scripts_dir)} --model gpt-tiny --seq-len 32 --batch-size 4 "
        f"--num-workers 0 --max-steps 4 --save-every 2 --parallel fsdp --ckpt-dir {workdir}/ckpt; "
        f"echo exit=$?; ls -A {workdir}/ckpt"))
    assert result.stdout.strip().splitlines()[-1] == "exit=1", result.stdout + result.stderr  # no partial folder
    lines = [line for line in result.stderr.splitlines() if line.startswith("train_ddp.py: error:")]
    assert lines == [f"train_ddp.py: error: no space left writing {workdir}/ckpt/step_000002 (No space left on "
                     "device); free some space or point --ckpt-dir at a larger disk"], result.stderr
    # torchrun's agent reports the failed workers with a traceback of its own (ChildFailedError); no worker does.
    assert result.stderr.count("Traceback") == 1 and "ChildFailedError" in result.stderr, result.stderr
