"""One --ckpt-dir, one job; and a folder that stops being writable mid-run (issue 27, items 10 and 11).

    make test PYTEST_ARGS=tests/trainer/test_checkpoint_folder.py
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_checkpoint_folder.py

A second job in a live job's folder used to prune the first one's checkpoint mid-write, which then died
(FileNotFoundError ... .tmp/.metadata.tmp); a folder made unwritable mid-run ended in a PermissionError
traceback on one rank and gloo's "connection closed" on the other.
"""
from __future__ import annotations

import re

import pytest

from tests.conftest import torch_tests_run_on_host
from tests.support import STARTS_S
from tests.support.containers import running_container
from tests.support.training import (SIGTERM_TO_THE_WORKERS, TINY_RUN, interrupt_when_step_logged, make_workdir,
                                    trainer_command)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("full")

GPT_RUN = "--model gpt-tiny --seq-len 32 --batch-size 4 --warmup-steps 5 --log-every 1 --parallel fsdp"


@pytest.fixture
def workdir(torch_host):
    path = make_workdir(torch_host)
    yield path
    torch_host.run(f"chmod -R u+w {path}; rm -rf {path}")


def test_a_second_job_in_a_live_jobs_folder_is_refused_with_one_line_naming_it(torch_host, scripts_dir, workdir):
    # A long timeout: under load the second job's start (importing torch) alone can take a minute.
    first = (f"{trainer_command(scripts_dir=scripts_dir, timeout_s=600)} {TINY_RUN} --max-steps 2000 "
             f"--save-every 2 --keep 1 --num-workers 0 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/first.jsonl")
    second = (f"{trainer_command(nproc=None, scripts_dir=scripts_dir)} {TINY_RUN} --max-steps 4 --num-workers 0 "
              f"--ckpt-dir {workdir}/ckpt")
    # Once the first job saves every other step, the second starts in its folder; then the first is stopped.
    during = f"{second} > {workdir}/second.out 2> {workdir}/second.err; echo $? > {workdir}/second.rc; " \
             f"{SIGTERM_TO_THE_WORKERS}"
    status, _, log = interrupt_when_step_logged(torch_host, first, workdir, "first", 5, during)
    assert status == 0 and "Traceback" not in log, log  # the first job lost nothing to the second
    assert torch_host.file(f"{workdir}/second.rc").content_string.strip() == "2"
    errors = torch_host.file(f"{workdir}/second.err").content_string.strip().splitlines()
    host = torch_host.check_output("hostname")
    assert len(errors) == 1 and re.fullmatch(
        rf"train_ddp\.py: error: --ckpt-dir {workdir}/ckpt is in use by another training job \(pid \d+ on "
        rf"{re.escape(host)}, torchrun job \S+, since \S+\): let it finish or stop it, or give this job another "
        rf"--ckpt-dir", errors[0]), errors
    stop_step = int(re.search(r"stopped by SIGTERM at step (\d+)/", log)[1])
    assert torch_host.check_output(f"ls -A {workdir}/ckpt") == f"step_{stop_step:06d}.pt"  # and the lock is gone


@pytest.mark.skipif(torch_tests_run_on_host(), reason="two containers of the image: run it against one (make test)")
def test_a_job_in_another_container_of_the_same_host_name_is_named_as_live(image, tmp_path):
    """compose names every container `pytorch-dev`: two of them sharing a checkpoint folder (a bind mount
    here, NFS between machines) cannot look up each other's pids. The second job must still name the
    first as the live training job it is, not as a pid that has ended."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the containers' user writes there
    options = ["--hostname", "pytorch-dev", "--volume", f"{shared}:/shared"]
    endless = f"{TINY_RUN} --max-steps 100000 --save-every 0 --num-workers 0 --ckpt-dir /shared/ckpt"
    with running_container(image, command=["sleep", "infinity"], options=options, healthy=False) as first, \
            running_container(image, command=["sleep", "infinity"], options=options, healthy=False) as second:
        first.run(f"{trainer_command(endless + ' --metrics-file /shared/first.jsonl', timeout_s=600)} "
                  "> /shared/first.log 2>&1 &")
        wait_until(lambda: first.run("grep -q '\"step\": 2,' /shared/first.jsonl").rc == 0, STARTS_S,
                   failure=lambda: first.run("cat /shared/first.log").stdout)
        refused = second.run(trainer_command(f"{TINY_RUN} --max-steps 4 --num-workers 0 --ckpt-dir /shared/ckpt",
                                             nproc=None))
    assert refused.rc == 2, refused.stdout + refused.stderr
    errors = refused.stderr.strip().splitlines()
    assert len(errors) == 1 and re.fullmatch(
        r"train_ddp\.py: error: --ckpt-dir /shared/ckpt is in use by another training job \(pid \d+ on "
        r"pytorch-dev, torchrun job \S+, since \S+\): let it finish or stop it, or give this job another --ckpt-dir",
        errors[0]), errors


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_folder_made_unwritable_mid_run_ends_every_rank_with_the_same_one_line(torch_host, scripts_dir, workdir,
                                                                                  parallel):
    if torch_host.user().uid == 0:
        pytest.skip("root writes through any permission: run it as the image's user (make test)")
    flags = GPT_RUN if parallel == "fsdp" else TINY_RUN
    command = (f"{trainer_command(scripts_dir=scripts_dir)} {flags} --max-steps 2000 --save-every 20 "
               f"--num-workers 0 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/run.jsonl")
    # chmod at step 2: the first save, at step 20, meets a folder it cannot write
    status, _, log = interrupt_when_step_logged(torch_host, command, workdir, "run", 2, f"chmod a-w {workdir}/ckpt")
    assert status == 1, log
    name = "step_000020" if parallel == "fsdp" else "step_000020.pt"
    lines = [line for line in log.splitlines() if line.startswith("train_ddp.py: error:")]
    assert lines == [f"train_ddp.py: error: cannot write {workdir}/ckpt/{name} (Permission denied); make --ckpt-dir "
                     "writable again, or point it at another folder, and run the same command to resume from the "
                     "last checkpoint"], log
    # torchrun's agent reports the failed workers with a traceback of its own (ChildFailedError); no worker does,
    # and no rank is left to time out in a collective.
    assert log.count("Traceback") == 1 and "ChildFailedError" in log and "Connection closed" not in log, log


def test_a_folder_a_run_as_root_made_is_refused_to_the_user_in_one_line_that_names_the_fix(training_container):
    """`docker exec` without --user runs as root: its run leaves a --ckpt-dir only root can write, and the
    user's resume must say whose it is and how to take it back, not only that it is not writable."""
    if torch_tests_run_on_host():
        pytest.skip("needs the image's container: root and the container's user in one place")
    folder = "/tmp/made-by-root"
    run = f"{trainer_command(nproc=None, timeout_s=180)} {TINY_RUN} --num-workers 0 --ckpt-dir {folder}"
    made = training_container.run(f"{run} --max-steps 2", user=None)
    assert made.rc == 0, made.stderr[-2000:]
    resumed = training_container.run(f"{run} --max-steps 4")
    errors = [line for line in resumed.stderr.splitlines() if "error:" in line]
    assert resumed.rc == 2 and len(errors) == 1, resumed.stderr[-2000:]
    assert "belongs to root (uid 0), and this run is dev (uid 1000)" in errors[0], errors
    assert f"docker exec --user 0 CONTAINER chown -R 1000 {folder}" in errors[0], errors
