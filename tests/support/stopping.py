"""What the `docker stop` tests share: a trainer that only a stop ends, and what it left behind.

The trainer logs every step and saves only when stopped (--save-every 0), so a checkpoint proves that
SIGTERM reached it and that it had the time to save.
"""
from __future__ import annotations

import pathlib
import shlex
import time

from tests.support import SETTLES_S
from tests.support.containers import Container, docker
from tests.support.training import TINY_RUN, trainer_argv, trainer_command
from tests.support.waiting import wait_until

GRACE_PERIOD_S = 30  # compose's stop_grace_period
# Long enough that only a stop ends it, saving only on request (--save-every 0).
ENDLESS_RUN = f"{TINY_RUN} --max-steps 100000 --save-every 0 --num-workers 1"
TRAINER_STARTS_S = 240  # torch's import and the rendezvous, on 2 shared cores


def endless_flags(name: str) -> str:
    """The endless run's flags, for a trainer that writes /tmp/NAME.jsonl and saves to /tmp/NAME-ckpt."""
    return f"{ENDLESS_RUN} --ckpt-dir /tmp/{name}-ckpt --metrics-file /tmp/{name}.jsonl"


def trainer_arguments(name: str, nproc: int | None) -> list[str]:
    """The endless trainer NAME's command line as words: under torchrun with NPROC ranks, or plain python
    when NPROC is None."""
    return trainer_argv(endless_flags(name), nproc=nproc)


def endless_run_command(name: str, nproc: int | None, *, detached: bool = False) -> str:
    """The same as a shell command whose output goes to /tmp/NAME.log, with no timeout around torchrun:
    the container's stop must find torchrun itself as the launcher. DETACHED: under `nohup`."""
    command = trainer_command(endless_flags(name), nproc=nproc, timeout_s=None, detached=detached)
    return f"{command} > /tmp/{name}.log 2>&1"


def training_in_a_kernel(name: str) -> str:
    """A cell that runs the endless trainer NAME's loop in the notebook kernel itself, as a notebook that
    imports train_ddp runs it; its output goes to /tmp/NAME.log as the other ways' does."""
    return f"""
import contextlib, sys
sys.path.insert(0, "/opt/scripts")
import train_ddp
with open("/tmp/{name}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    train_ddp.main({shlex.split(endless_flags(name))!r})
"""


def wait_until_it_ignores_sigterm(container: Container, pattern: str) -> None:
    """Waits until a process whose command line holds PATTERN (pgrep -f) ignores SIGTERM (bit 15 of
    /proc/PID/status's SigIgn). Its command line shows from its exec on, before the program set the
    signal aside; a stop in between would end it, and a test of a process that ignores the stop with it."""
    check = (f"for pid in $(pgrep -f -- {shlex.quote(pattern)}); do "
             "mask=$(awk '/^SigIgn:/ {print $2}' /proc/$pid/status 2>/dev/null); "
             "[ -n \"$mask\" ] && (( 0x$mask & 0x4000 )) && exit 0; done; exit 1")
    wait_until(lambda: container.run(check, user=None).rc == 0, SETTLES_S,
               failure=lambda: f"no process like {pattern!r} ignores SIGTERM:\n"
                               + container.run("ps -eo pid,args", user=None).stdout)


def wait_until_trained(container: Container, name: str) -> None:
    """Waits until the trainer NAME logged step 2; on failure shows its log, the container's, and where
    each process waits (a hang shows its place there: stat and wchan)."""
    def story() -> str:
        return (f"{name} never trained:\n" + container.run(f"cat /tmp/{name}.log").stdout
                + container.logs()[-2000:]
                + container.run("ps -eo pid,ppid,pgid,stat,wchan:24,etime,args", user=None).stdout)
    wait_until(lambda: container.run(f"grep -q '\"step\": 2,' /tmp/{name}.jsonl").rc == 0, TRAINER_STARTS_S,
               failure=story)


def saved_checkpoints(container: Container, name: str, into: pathlib.Path) -> list[str]:
    """The checkpoints in /tmp/NAME-ckpt of CONTAINER, running or stopped (docker cp reads both)."""
    copied = docker("cp", f"{container.name}:/tmp/{name}-ckpt", str(into / name), check=False)
    return sorted(path.name for path in (into / name).glob("*.pt")) if copied.returncode == 0 else []


def read_file(container: Container, path: str, into: pathlib.Path) -> str:
    """A file of CONTAINER, running or stopped; empty when it does not exist."""
    target = into / pathlib.PurePath(path).name
    copied = docker("cp", f"{container.name}:{path}", str(target), check=False)
    return target.read_text() if copied.returncode == 0 else ""


def docker_stop_saves(container: Container, name: str, into: pathlib.Path) -> str:
    """Stops CONTAINER as compose does and checks the contract for the trainer NAME: the container exits 0
    within the grace period with "stopped cleanly", and the trainer logged its stop and saved. Returns
    its log."""
    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started
    log = read_file(container, f"/tmp/{name}.log", into)
    assert container.state()["ExitCode"] == 0 and took < GRACE_PERIOD_S, (took, container.logs()[-3000:], log)
    assert "stopped by SIGTERM at step" in log and "Traceback" not in log, log
    assert saved_checkpoints(container, name, into), f"{name} saved no checkpoint:\n{log}"
    assert "your processes have exited" in container.logs() and "stopped cleanly" in container.logs(), \
        container.logs()[-3000:]
    return log
