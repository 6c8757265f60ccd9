"""A real one-node Slurm cluster on this machine: munge, slurmctld and slurmd with a slurm.conf of our own.

Debian's slurm-wlm packages provide the daemons (.ci/install-slurm.sh installs them). Everything the
cluster writes (configuration, state, logs, spool) stays in one temporary folder; clients find the
cluster through SLURM_CONF. The daemons run as root, as slurmd must, and are stopped by their pids.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import shutil
import socket
import subprocess

from collections.abc import Iterator

from tests.support.containers import free_port
from tests.support.host_tools import skip_where_missing
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

COMMAND_TIMEOUT_S = 30


def missing_prerequisite() -> str | None:
    """Why a Slurm cluster cannot run here, or None."""
    missing = [tool for tool in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed: run .ci/install-slurm.sh (Debian's slurm-wlm and munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs"
    return None


def munge_works() -> bool:
    encode = subprocess.run(["munge", "-n"], capture_output=True, timeout=COMMAND_TIMEOUT_S)
    if encode.returncode != 0:
        return False
    decode = subprocess.run(["unmunge"], input=encode.stdout, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return decode.returncode == 0


# Two pytest workers may each want a cluster at once: one starts munged, the other waits for it, since a
# second munged exits non-zero on the socket the first holds.
MUNGED_LOCK = pathlib.Path("/tmp/pytorch-dev-tests-munged.lock")


def ensure_munged() -> None:
    """Starts munged (as the munge user, on its default socket) unless one already answers."""
    with MUNGED_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if munge_works():
            return
        os.makedirs("/run/munge", exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, timeout=COMMAND_TIMEOUT_S)
        wait_until(munge_works, SETTLES_S, interval=0.2,
                   failure="munged started but `munge -n | unmunge` still fails")


SLURM_CONF = """\
ClusterName=ptdev
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
# No cgroup hierarchy is delegated to a CI machine's container: track processes by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
# Seconds between SIGTERM and SIGKILL when a job is cancelled, preempted or requeued: the trainer saves
# its checkpoint in this time.
KillWait=30
MinJobAge=600
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.daemons: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        ensure_munged()
        (self.root / "state").mkdir(parents=True)
        (self.root / "spool").mkdir()
        self.conf.write_text(SLURM_CONF.format(node=self.node, root=self.root, cpus=os.cpu_count(),
                                               ctld_port=free_port(), slurmd_port=free_port()))
        # -D: stay in the foreground, so the Popen objects are the daemons; -i: ignore any saved state.
        for daemon in (["slurmctld", "-D", "-i", "-f", str(self.conf)], ["slurmd", "-D", "-f", str(self.conf)]):
            self.daemons.append(subprocess.Popen(daemon, env=self.env, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL))
        self.wait_until_node_is_idle()

    def node_state(self) -> str:
        return self.run("sinfo", "--noheader", "--Node", "--format=%t", check=False).stdout.strip()

    def wait_until_node_is_idle(self, timeout: float = SETTLES_S) -> None:
        wait_until(lambda: self.node_state() == "idle", timeout,
                   failure=lambda: f"node {self.node} is {self.node_state()!r}, not idle:\n{self.daemon_logs()}")

    def run(self, *command: str, check: bool = True, timeout: float = COMMAND_TIMEOUT_S,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(command, env={**self.env, **(env or {})}, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def job_field(self, job_id: str, field: str) -> str:
        """One field of `scontrol show job` (JobState, Restarts, ExitCode...)."""
        shown = self.run("scontrol", "show", "job", job_id).stdout
        for word in shown.split():
            key, _, value = word.partition("=")
            if key == field:
                return value
        raise AssertionError(f"no {field} in `scontrol show job {job_id}`:\n{shown}")

    def wait_for_job_state(self, job_id: str, states: set[str], timeout: float) -> str:
        def state_reached() -> str | None:
            state = self.job_field(job_id, "JobState")
            return state if state in states else None
        return wait_until(state_reached, timeout, interval=1, failure=lambda: (
            f"job {job_id} is {self.job_field(job_id, 'JobState')}, not in {states}:\n{self.daemon_logs()}"))

    def daemon_logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{(self.root / name).read_text()[-3000:]}"
                         for name in ("slurmctld.log", "slurmd.log") if (self.root / name).exists())

    def stop(self) -> None:
        self.run("scancel", "--full", "--user", "root", check=False)
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)


@contextlib.contextmanager
def running_cluster(root: pathlib.Path) -> Iterator[SlurmCluster]:
    """A started cluster with its state under ROOT, stopped afterwards; skips (fails in CI) without Slurm."""
    why_not = missing_prerequisite()
    if why_not:
        skip_where_missing(why_not)
    cluster = SlurmCluster(root)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
