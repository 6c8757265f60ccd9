""""stopped cleanly" means nothing was lost (docs/how-it-runs.md, rules 19 and 20): a stop that ended work
unsaved says so in its last lines, names what was lost, and the container exits 1.

    make test-image PYTEST_ARGS=tests/image/test_stop_lost_work.py

Each program here is a real one in the shape the reports named: pytorch/examples' scripts handle no
SIGTERM (torchrun's workers then die of it, -15); a trainer whose SIGTERM save fails (a full disk) exits
1 after it; the kernel's OOM killer ends a process that has been running a while.
"""
from __future__ import annotations

import shlex

import pytest

from tests.support.containers import docker
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.stopping import GRACE_PERIOD_S, TRAINER_STARTS_S
from tests.support.training import TINY_RUN, trainer_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

# A worker as pytorch/examples writes one: no SIGTERM handler, so the signal ends it where it stands.
UNHANDLED_WORKER = "import os, time\nprint('worker', os.environ['RANK'], 'up', flush=True)\ntime.sleep(600)\n"
# A trainer whose save on SIGTERM fails, as the attack's full checkpoint disk made it: it says so, exits 1.
SAVE_FAILS = ("import signal, sys, time\n"
              "def save(*_):\n"
              "    sys.exit('could not save the checkpoint: [Errno 28] No space left on device')\n"
              "signal.signal(signal.SIGTERM, save)\n"
              "print('training', flush=True)\n"
              "time.sleep(600)\n")


def stop(container) -> str:
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    return container.logs()


def test_a_torchrun_job_whose_workers_die_of_sigterm_is_not_a_clean_stop(containers):
    command = (f"printf %s {shlex.quote(UNHANDLED_WORKER)} > /tmp/worker.py && "
               "exec torchrun --nproc-per-node=2 --max-restarts=0 /tmp/worker.py")
    container = containers(command=["bash", "-c", command], options=["--env", "OMP_NUM_THREADS=1"])
    container.wait_for_log("worker 0 up")
    container.wait_for_log("worker 1 up")
    logs = stop(container)
    lines = logs.splitlines()
    died = [line for line in lines if "did not handle SIGTERM and died of it" in line]
    assert len(died) == 1 and died[0].count("/tmp/worker.py) did not handle SIGTERM") == 2, logs[-3000:]
    assert "stopped, but not cleanly" in lines[-1] and "stopped cleanly" not in logs, logs[-3000:]
    assert container.state()["ExitCode"] == 1, logs[-3000:]


def nohup_job_over_ssh(containers, program: str):
    """PROGRAM started with `nohup ... &` in an SSH session that then ends, as a user logs out: the job is
    adopted by the supervisor, which so sees its exit status."""
    key = generate_key()
    container = containers(options=["--publish", "127.0.0.1::2222", "--env", "ENABLE_JUPYTER=0",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"])
    container.wait_until_healthy()
    with ssh_session(container.published_port(2222), key=key) as client:
        status, out, err = run(client, f"printf %s {shlex.quote(program)} > /tmp/train.py; "
                                       "nohup python3 /tmp/train.py < /dev/null > /tmp/train.log 2>&1 & "
                                       "sleep 2; cat /tmp/train.log")
        assert status == 0 and "training" in out, out + err
    return container


@pytest.mark.tier("full")
def test_a_nohup_job_whose_save_fails_is_named_with_its_status(containers):
    container = nohup_job_over_ssh(containers, SAVE_FAILS)
    logs = stop(container)
    assert "ended without saving:" in logs and "/tmp/train.py) exited with status 1 after its SIGTERM" in logs, \
        logs[-3000:]
    assert "stopped, but not cleanly" in logs.splitlines()[-1], logs[-3000:]
    assert container.state()["ExitCode"] == 1, logs[-3000:]


@pytest.mark.tier("full")
def test_the_same_job_that_saves_is_a_clean_stop(containers):
    """The control: the same shape, whose SIGTERM handler saves and exits 0."""
    saves = SAVE_FAILS.replace("sys.exit('could not save the checkpoint: [Errno 28] No space left on device')",
                               "sys.exit(0)")
    container = nohup_job_over_ssh(containers, saves)
    logs = stop(container)
    assert logs.splitlines()[-1].endswith("stopped cleanly") and container.state()["ExitCode"] == 0, logs[-3000:]


def test_the_sample_trainer_in_tmux_whose_last_save_fails_is_named_and_the_stop_is_not_clean(containers):
    """The real trainer in tmux, its checkpoint disk too small for the save the stop asks for: tmux's shell
    reaps it, so the stop never sees its status; the trainer leaves its one line in the run folder, and the
    stop names it (before, this stop said "stopped cleanly" and exited 0)."""
    container = containers(options=["--tmpfs", "/ckpt:size=1m,mode=1777", "--env", "ENABLE_JUPYTER=0",
                                    "--env", "ENABLE_SSH=0", "--env", "OMP_NUM_THREADS=1"])
    container.wait_until_started()
    flags = f"{TINY_RUN} --max-steps 100000 --save-every 0 --num-workers 0 --ckpt-dir /ckpt/run"
    command = trainer_command(flags, nproc=None, timeout_s=None)
    container.run(f"tmux new -d -s train {shlex.quote(f'{command} > /tmp/t.log 2>&1')}")
    wait_until(lambda: container.run("grep -q 'step 2/' /tmp/t.log").rc == 0, TRAINER_STARTS_S,
               failure=lambda: container.run("cat /tmp/t.log").stdout)
    logs = stop(container)
    said = [line for line in logs.splitlines() if "ended without saving:" in line]
    assert said and "train_ddp.py stopped by SIGTERM without its last checkpoint: no space left" in said[0], logs[-3000:]
    assert "stopped, but not cleanly" in logs.splitlines()[-1] and container.state()["ExitCode"] == 1, logs[-3000:]


def test_an_out_of_memory_kill_is_named_and_makes_a_later_stop_not_clean(containers):
    """The kernel's OOM killer ends a process without a word of its own: a notebook kernel's death says
    only that it died. The container's log names the kill, what ended with it and the limit it hit, within
    seconds; the stop that comes later says the work was lost."""
    container = containers(options=["--memory", "512m", "--memory-swap", "512m", "--env", "ENABLE_JUPYTER=0"])
    container.wait_until_started()
    # Running a few seconds before it grows, as a trainer does: the supervisor's looks have seen it.
    eaten = container.run("python3 -c 'import time; time.sleep(5); chunks = [b\"x\" * (64 << 20) for _ in range(64)]'")
    assert eaten.rc == 137, eaten.stdout + eaten.stderr
    logs = container.wait_for_log("out-of-memory killer ended 1 process of this container (among those")
    assert "time.sleep(5); chunks" in logs and "the container's memory limit is 512 MiB" in logs, logs[-3000:]
    logs = stop(container)
    assert "killer ended 1 process of this container while it ran, unsaved: among" in logs, logs[-3000:]
    assert "stopped, but not cleanly" in logs.splitlines()[-1], logs[-3000:]
    assert container.state()["ExitCode"] == 1, logs[-3000:]
