"""`docker stop` saves the training a user started, however it was started: over SSH in tmux, with
`docker exec -d`, from a notebook's kernel, or as a loop in the kernel itself. Each runs in a session of its own, which tini's signal
never reached: the entrypoint signals them first and stops the services last.

    make test-image PYTEST_ARGS="tests/image/test_stop.py"
"""
from __future__ import annotations

import json
import shlex
import time

import pytest

from tests.support.containers import docker
from tests.support.jupyter_websockets import JupyterAccess, run_in_terminal
from tests.support.notebook_kernel import run_in_a_notebook_kernel, start_in_a_notebook_kernel
from tests.support.ssh_client import generate_key, public_line, run, ssh_session
from tests.support.stopping import (GRACE_PERIOD_S, docker_stop_saves, endless_run_command, read_file,
                                    saved_checkpoints, training_in_a_kernel, wait_until_it_ignores_sigterm,
                                    wait_until_trained)
from tests.support.training import TINY_MODEL
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

TOKEN = "stop-test-token-0a9b8c7d6e5f"


def start_from_a_notebook_kernel(container, base_url: str) -> None:
    """The kernel runs Popen(torchrun ...), as a notebook cell does."""
    cell = f"import subprocess; subprocess.Popen({endless_run_command('notebook', 1)!r}, shell=True)"
    reply = run_in_a_notebook_kernel(container, base_url, TOKEN, cell)
    assert reply["status"] == "ok", reply


def with_ssh_and_jupyterlab(containers):
    """A healthy container with SSH (for a new key, which it returns too) and JupyterLab published."""
    key = generate_key()
    container = containers(options=["--publish", "127.0.0.1::2222", "--publish", "127.0.0.1::8888",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}",
                                    "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    return container, key


def test_docker_stop_saves_training_started_over_ssh_in_tmux_with_exec_and_from_a_notebook(containers, tmp_path):
    container, key = with_ssh_and_jupyterlab(containers)
    with ssh_session(container.published_port(2222), key=key) as client:
        status, _, err = run(client, f"tmux new-session -d -s train {json.dumps(endless_run_command('tmux', 1))}")
        assert status == 0, err
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c", endless_run_command("exec", 1))
    start_from_a_notebook_kernel(container, f"http://127.0.0.1:{container.published_port(8888)}")
    for name in ("tmux", "exec", "notebook"):
        wait_until_trained(container, name)

    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started

    logs = {name: read_file(container, f"/tmp/{name}.log", tmp_path) for name in ("tmux", "exec", "notebook")}
    assert container.state()["ExitCode"] == 0 and took < GRACE_PERIOD_S, (took, container.logs()[-3000:], logs)
    for name, log in logs.items():
        assert "stopped by SIGTERM at step" in log, f"{name}:\n{log}"
        # torchrun's workers got the signal, not torchrun: it saw a finished job, not a SignalException.
        assert "SignalException" not in log and "Traceback" not in log, f"{name}:\n{log}"
        assert saved_checkpoints(container, name, tmp_path), f"{name} saved no checkpoint:\n{log}"
    assert "your processes have exited" in container.logs() and "stopped cleanly" in container.logs()


# A user's own kernel config that sets the list the image's /etc/ipython config appends to (a common one:
# autoreload in every notebook).
USERS_EXEC_LINES = 'c.InteractiveShellApp.exec_lines = ["%load_ext autoreload", "%autoreload 2"]'


@pytest.mark.parametrize("users_config", ["", USERS_EXEC_LINES], ids=["image-config", "users-exec-lines"])
def test_docker_stop_saves_a_training_loop_running_in_a_notebook_kernel_itself(containers, tmp_path, users_config):
    """The kernel gets SIGTERM like a trainer, the loop saves, and the kernel ends with its cell: JupyterLab
    would shut it down within 2 s, and restart it, if the stop left it to the services. A user's kernel
    config does not take that rule away."""
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    if users_config:
        profile = "~/.ipython/profile_default"
        assert container.run(f"mkdir -p {profile} && echo {shlex.quote(users_config)} > "
                             f"{profile}/ipython_kernel_config.py").rc == 0
    start_in_a_notebook_kernel(container, f"http://127.0.0.1:{container.published_port(8888)}", TOKEN,
                               training_in_a_kernel("kernel"))
    wait_until_trained(container, "kernel")
    docker_stop_saves(container, "kernel", tmp_path)


def test_a_process_that_ignores_sigterm_does_not_hold_the_services_past_the_timeout(containers):
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", "STOP_TIMEOUT=3"])
    container.wait_until_healthy()
    docker("exec", "--detach", container.name, "python3", "-c",
           "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)")
    wait_until_it_ignores_sigterm(container, "SIG_IGN")
    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    assert time.monotonic() - started < GRACE_PERIOD_S / 2
    # Not clean, so not 0: what ignored its SIGTERM was killed unsaved (round 8: it exited 0 before).
    assert container.state()["ExitCode"] == 1
    warnings = [line for line in container.logs().splitlines() if "still running after 3 s" in line]
    assert len(warnings) == 1 and "python3 -c import signal" in warnings[0], container.logs()


def steps_logged(container, name: str) -> int:
    return int(container.run(f"grep -c . /tmp/{name}.jsonl").stdout.strip() or 0)


def parent_of_trainer(container, name: str) -> str:
    """The PID of the shell that started the trainer NAME (its oldest process: the DataLoader's workers
    are its children)."""
    found = container.run(f"ps -o ppid= -p $(pgrep -o -f -- '--ckpt-dir /tmp/{name}-ckpt')")
    assert found.rc == 0, found.stderr
    return found.stdout.strip()


def test_a_nohup_trainer_outlives_its_ssh_connection_and_its_terminal_and_saves_on_docker_stop(containers, tmp_path):
    """`nohup python train_ddp.py ... &` over SSH, then the connection drops; the same typed into a
    JupyterLab terminal, then the Running panel shuts the terminal down. Each shell passes its hang-up
    on to its jobs, which `nohup` detached on purpose: both train on, and `docker stop` saves both."""
    container, key = with_ssh_and_jupyterlab(containers)
    with ssh_session(container.published_port(2222), key=key) as client:
        shell = client.invoke_shell()  # an interactive login shell on a terminal, as `ssh -p 2222` gives
        shell.send(f"{endless_run_command('ssh', None, detached=True)} &\n".encode())
        wait_until_trained(container, "ssh")
        shells = [parent_of_trainer(container, "ssh")]
    # The connection closed without a logout: sshd hangs up the shell, which sends SIGHUP to its jobs.
    access = JupyterAccess(f"http://127.0.0.1:{container.published_port(8888)}/", token=TOKEN)
    run_in_terminal(access, f"echo typed''-in; {endless_run_command('terminal', None, detached=True)} &",
                    until="typed-in")
    wait_until_trained(container, "terminal")
    shells.append(parent_of_trainer(container, "terminal"))
    (terminal,) = access.get("api/terminals").json()
    assert access.request("DELETE", f"api/terminals/{terminal['name']}").status_code == 204

    wait_until(lambda: all(container.run(f"test -d /proc/{pid}").rc != 0 for pid in shells), SETTLES_S,
               failure=lambda: f"the shells {shells} outlived their hang-up:\n" + container.run("ps -ef").stdout)
    for name in ("ssh", "terminal"):
        steps = steps_logged(container, name)
        wait_until(lambda: steps_logged(container, name) >= steps + 3, SETTLES_S,
                   failure=lambda: f"{name} stopped training:\n" + container.run(f"cat /tmp/{name}.log").stdout)
    docker_stop_saves(container, "ssh", tmp_path)
    terminal_log = read_file(container, "/tmp/terminal.log", tmp_path)
    assert "stopped by SIGTERM at step" in terminal_log and "SIGHUP" not in terminal_log, terminal_log
    assert saved_checkpoints(container, "terminal", tmp_path), terminal_log


def test_an_idle_kernel_that_ran_the_trainer_ends_at_once_on_docker_stop(containers):
    """README's way to train from a notebook, `train_ddp.main([...])` in a cell: once it returned, the
    kernel has its own SIGTERM handling back, so the stop ends the idle kernel at once and is clean."""
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    flags = shlex.split(f"{TINY_MODEL} --max-steps 3 --batch-size 8 --num-workers 0 --ckpt-dir /tmp/cell-ckpt")
    cell = (f"import sys; sys.path.insert(0, '/opt/scripts'); import train_ddp\n"
            f"assert train_ddp.main({flags!r}) == 0")
    reply = run_in_a_notebook_kernel(container, f"http://127.0.0.1:{container.published_port(8888)}", TOKEN, cell)
    assert reply["status"] == "ok", reply

    started = time.monotonic()
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    took = time.monotonic() - started
    # Held up, it took STOP_TIMEOUT (25 s); the margin is for a busy machine.
    assert took < GRACE_PERIOD_S / 2 and container.state()["ExitCode"] == 0, (took, container.logs()[-3000:])
    assert container.logs().strip().splitlines()[-1].endswith("stopped cleanly"), container.logs()[-3000:]
