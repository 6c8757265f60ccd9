"""Every way a run ends keeps its checkpoint: a torchrun job as the container's command (Kubernetes,
Slurm), the same under our manifests' wrapper torchrun_node.py, a trainer piped to `tee` in tmux and in a
command without job control, JupyterLab shut down under a trainer in tmux, and a stop in the host's PID
namespace (Apptainer's default), which must leave the host's processes alone.

    make test-image PYTEST_ARGS=tests/image/test_stop_endings.py
"""
from __future__ import annotations

import shlex
import subprocess

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import docker
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.stopping import (GRACE_PERIOD_S, endless_run_command, read_file, saved_checkpoints,
                                    trainer_arguments, wait_until_trained)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

TOKEN = "stop-endings-token-5e4d3c2b1a"


def torchrun_node_arguments(name: str, nproc: int) -> list[str]:
    """trainer_arguments' trainer under the wrapper our manifests run (the PyTorchJob's command line
    shape), on one node with the rendezvous on localhost."""
    return ["python", "/opt/scripts/multinode/torchrun_node.py", "--nnodes=1", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", f"--rdzv-id={name}",
            "--rdzv-conf=join_timeout=600,last_call_timeout=30", "--max-restarts=0",
            *trainer_arguments(name, nproc)[3:]]


# torchrun itself, and torchrun below torchrun_node.py as our manifests (PyTorchJob, TrainJob,
# compose.multinode.yaml) run it: the stop must reach the workers below the wrapper too.
@pytest.mark.parametrize("launch", [trainer_arguments, torchrun_node_arguments], ids=["torchrun", "torchrun_node"])
def test_docker_stop_of_a_torchrun_command_saves_and_exits_0(containers, tmp_path, launch):
    """A preempted job must end as one that succeeded: exit 0, a checkpoint, no traceback from torchrun."""
    container = containers(command=launch("job", 2), options=["--env", "OMP_NUM_THREADS=1",
                                                              "--env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"])
    wait_until_trained(container, "job")
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()
    assert container.state()["ExitCode"] == 0, logs[-3000:]
    assert "stopped by SIGTERM at step" in logs and saved_checkpoints(container, "job", tmp_path), logs[-3000:]
    assert "Traceback" not in logs and "SignalException" not in logs, logs[-3000:]
    assert "stopped cleanly" in logs


def test_docker_stop_saves_a_trainer_piped_to_tee_in_tmux_and_the_pipeline_exits_0(containers, tmp_path):
    """`tee` must outlive the trainer: signalled with it, it dies, and the trainer's next progress line
    (--log-every 1) raises BrokenPipeError before the checkpoint. The pipeline is typed at the prompt of
    a tmux pane, as a user does."""
    key = generate_key()
    container = containers(options=["--publish", "127.0.0.1::2222", "--env", "ENABLE_JUPYTER=0",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"])
    container.wait_until_healthy()
    pipeline = (f"OMP_NUM_THREADS=1 {' '.join(trainer_arguments('tee', 2))} 2>&1 | tee /tmp/tee.log; "
                'echo "${PIPESTATUS[*]}" > /tmp/tee.status')
    with ssh_session(container.published_port(2222), key=key) as client:
        status, _, err = run(client, f"tmux new-session -d -s train && tmux send-keys -t train {shlex.quote(pipeline)} Enter")
        assert status == 0, err
    wait_until_trained(container, "tee")
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    log = read_file(container, "/tmp/tee.log", tmp_path)
    assert "BrokenPipeError" not in log and "stopped by SIGTERM at step" in log, log[-3000:]
    assert saved_checkpoints(container, "tee", tmp_path), log[-3000:]
    # torchrun's status, then tee's: both ended on their own.
    assert read_file(container, "/tmp/tee.status", tmp_path).split() == ["0", "0"], log[-3000:]
    assert container.state()["ExitCode"] == 0 and "stopped cleanly" in container.logs(), container.logs()[-3000:]


def test_jupyterlab_shut_down_under_a_trainer_in_tmux_stops_the_container_in_order(containers, tmp_path):
    """File > Shut Down's API call stops the container in order; the trainer in tmux saves before the
    container exits for its restart policy."""
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    docker("exec", "--user", "dev", container.name, "tmux", "new-session", "-d", "-s", "train",
           endless_run_command("lab", 1))
    wait_until_trained(container, "lab")
    reply = requests.post(f"http://127.0.0.1:{container.published_port(8888)}/api/shutdown",
                          headers={"Authorization": f"token {TOKEN}"}, timeout=HTTP_TIMEOUT_S)
    assert reply.ok, reply.text
    wait_until(lambda: not container.state()["Running"], GRACE_PERIOD_S + 30, interval=1,
               failure=lambda: container.logs()[-3000:])
    log = read_file(container, "/tmp/lab.log", tmp_path)
    assert "stopped by SIGTERM at step" in log and saved_checkpoints(container, "lab", tmp_path), log[-3000:]
    logs = container.logs()
    assert "asked to shut down" in logs and "your processes have exited" in logs, logs[-3000:]
    # Not 0: the restart policy (restart: unless-stopped) brings the container back.
    assert container.state()["ExitCode"] != 0


def test_docker_stop_saves_a_trainer_piped_to_tee_in_a_command_without_job_control(containers, tmp_path):
    """`bash -c 'torchrun ... | tee log'` (Kubernetes commands, sbatch scripts) puts tee in bash's process
    group: signalled with the workers it would die first and the next progress line raise BrokenPipeError."""
    pipeline = f"{' '.join(trainer_arguments('pipe', 2))} 2>&1 | tee /tmp/pipe.log"
    container = containers(command=["bash", "-c", pipeline], options=["--env", "OMP_NUM_THREADS=1"])
    wait_until_trained(container, "pipe")
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    log = read_file(container, "/tmp/pipe.log", tmp_path)
    assert "BrokenPipeError" not in log and "stopped by SIGTERM at step" in log, log[-3000:]
    assert saved_checkpoints(container, "pipe", tmp_path), log[-3000:]
    assert container.state()["ExitCode"] == 0 and "stopped cleanly" in container.logs(), container.logs()[-3000:]
    # tee is not sent SIGTERM with the workers, and the line says so: it is named apart, left to drain.
    first = next(line for line in container.logs().splitlines() if "SIGTERM to your work first" in line)
    sent, _, left = first.partition("; left to read to the end of their input:")
    assert "(tee /tmp/pipe.log)" not in sent and "(tee /tmp/pipe.log)" in left, first


def test_docker_stop_in_the_hosts_pid_namespace_signals_nothing_outside_the_container(containers):
    """Apptainer shares the host's PID namespace by default (so does `docker run --pid=host`): /proc then
    shows the host's processes, and the stop must signal only the container's own."""
    outside = subprocess.Popen(["sleep", "600"], start_new_session=True)  # the host's, as a user's would be
    try:
        # Work that ends with 0 on SIGTERM, as a trainer that saved does.
        work = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(600)"
        container = containers(command=["python3", "-c", work], options=["--pid=host"])
        container.wait_until_started()
        docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
        logs = container.logs()
        assert outside.poll() is None, f"the host's sleep got a signal ({outside.returncode}): {logs[-3000:]}"
        assert container.state()["ExitCode"] == 0 and "stopped cleanly" in logs, logs[-3000:]
    finally:
        outside.kill()
        outside.wait(timeout=30)
