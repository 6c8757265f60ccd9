"""The stop against what holds a terminal and what sends signals (issue 39): a trainer in the terminal of
a program the stop knows by no name (script, a Python pty host, as editors' terminal servers hold
theirs) saves; any stop signal stops in order; a signal from inside the container stops nothing; work a
command leaves in the background is stopped, not SIGKILLed.

    make test-image PYTEST_ARGS=tests/image/test_stop_holders_and_signals.py
"""
from __future__ import annotations

import shlex

import pytest

from tests.support.containers import docker
from tests.support.stopping import GRACE_PERIOD_S, endless_flags, read_file, saved_checkpoints, wait_until_trained
from tests.support.training import trainer_argv, trainer_command
from tests.support.waiting import wait_until
from tests.support import SETTLES_S

pytestmark = pytest.mark.tier("landing")

NO_JUPYTER = ["--env", "ENABLE_JUPYTER=0", "--env", "OMP_NUM_THREADS=1"]


def stop(container) -> str:
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    return container.logs()


def trainer(name: str) -> str:
    """One process of the endless trainer, its output in /tmp/NAME.log."""
    return f"{trainer_command(endless_flags(name), nproc=None, timeout_s=None)} > /tmp/{name}.log 2>&1"


# The terminal's holders: script(1), and a few lines of Python, as an editor's terminal server holds one.
TERMINAL_HOSTS = {
    "script": lambda command: ["script", "-qfc", command, "/dev/null"],
    "python-pty": lambda command: ["python3", "-c", "import pty, sys; pty.spawn(['sh', '-c', sys.argv[1]])",
                                   command],
}


@pytest.mark.parametrize("host", ["script", pytest.param("python-pty", marks=pytest.mark.tier("full"))])
def test_a_trainer_in_a_terminal_held_by_a_program_of_any_name_saves_on_docker_stop(containers, tmp_path, host):
    """Signalled first, the holder exits, the kernel hangs up its terminal and the trainer dies of SIGHUP
    without saving, while the log said "stopped cleanly"."""
    container = containers(options=NO_JUPYTER)
    container.wait_until_started()
    docker("exec", "--detach", "--user", "dev", container.name, *TERMINAL_HOSTS[host](trainer("held")))
    wait_until_trained(container, "held")
    logs = stop(container)
    assert "stopped by SIGTERM at step" in read_file(container, "/tmp/held.log", tmp_path), logs[-3000:]
    assert saved_checkpoints(container, "held", tmp_path), logs[-3000:]
    assert container.state()["ExitCode"] == 0 and "stopped cleanly" in logs, logs[-3000:]


@pytest.mark.tier("full")
@pytest.mark.parametrize("number", ["HUP", "QUIT"])
def test_another_stop_signal_stops_in_order_and_the_trainer_saves(containers, tmp_path, number):
    """Any signal but TERM and INT used to end the supervisor, and everything with it, at once."""
    container = containers(options=NO_JUPYTER)
    container.wait_until_started()
    docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c", trainer("signalled"))
    wait_until_trained(container, "signalled")
    docker("kill", "--signal", number, container.name)
    wait_until(lambda: container.state()["Status"] == "exited", GRACE_PERIOD_S + 30,
               failure=lambda: container.logs()[-3000:])
    logs = container.logs()
    assert f"SIG{number} received: stopping as docker stop does" in logs, logs[-3000:]
    assert saved_checkpoints(container, "signalled", tmp_path), logs[-3000:]
    assert container.state()["ExitCode"] == 0 and "stopped cleanly" in logs, logs[-3000:]


@pytest.mark.tier("full")
def test_a_pkill_python_inside_the_container_stops_nothing(containers):
    """Under --user (Kubeflow's runAsUser: 1000) the supervisor is the user's own python3."""
    container = containers(command=["sleep", "infinity"], options=["--user", "1000:1000", *NO_JUPYTER])
    container.wait_until_started()
    docker("exec", container.name, "pkill", "python", check=False)
    line = "ignored SIGTERM from process"
    wait_until(lambda: line in container.logs(), SETTLES_S, failure=lambda: container.logs()[-3000:])
    assert container.state()["Status"] == "running", container.logs()[-3000:]
    logs = stop(container)
    # The command (sleep, a session holder) ends at step 3: its status, 128 + SIGTERM, is the container's.
    assert container.state()["ExitCode"] == 143 and "stopped cleanly" in logs, logs[-3000:]


@pytest.mark.tier("full")
def test_work_a_command_leaves_in_the_background_is_stopped_with_a_line(containers, tmp_path):
    """It used to be SIGKILLed with the container, without a word, when the command exited."""
    background = ("import signal, sys, time\n"
                  "signal.signal(signal.SIGTERM, lambda *_: (open('/tmp/background.term', 'w').close(), sys.exit(0)))\n"
                  "open('/tmp/background.ready', 'w').close(); time.sleep(600)")
    # The command ends when the test says so (/tmp/go), once its background work is ready.
    script = (f"python3 -c {shlex.quote(background)} & "
              "while [ ! -e /tmp/background.ready ] || [ ! -e /tmp/go ]; do sleep 0.1; done; exit 3")
    container = containers(command=["bash", "-c", script], options=NO_JUPYTER)
    docker("exec", container.name, "touch", "/tmp/go")
    wait_until(lambda: container.state()["Status"] == "exited", SETTLES_S, failure=lambda: container.logs()[-3000:])
    logs = container.logs()
    assert container.state()["ExitCode"] == 3, logs[-3000:]
    assert "the command exited (status 3) and left work running; stopping it as docker stop does" in logs, logs
    copied = docker("cp", f"{container.name}:/tmp/background.term", str(tmp_path / "term"), check=False)
    assert copied.returncode == 0, logs[-3000:]  # the file is there: SIGTERM reached the background work


@pytest.mark.tier("full")
def test_a_trainer_first_reached_at_step_3_is_signalled_before_its_dataloader_workers(containers, tmp_path):
    """A sweep launcher that catches SIGTERM and lets its run finish keeps its trainer from step 1; at step 3
    the trainer and its DataLoader workers used to get SIGTERM at the same instant, and the trainer died
    of `DataLoader worker ... killed by signal: Terminated` without saving."""
    # No shell between the launcher and the trainer: the trainer's parent is work that ignored its SIGTERM.
    launcher = ("import signal, subprocess, sys; signal.signal(signal.SIGTERM, lambda *_: None); "
                "subprocess.run(sys.argv[1:], stdout=open('/tmp/swept.log', 'w'), stderr=subprocess.STDOUT)")
    container = containers(options=[*NO_JUPYTER, "--env", "STOP_TIMEOUT=3"])
    container.wait_until_started()
    docker("exec", "--detach", "--user", "dev", container.name, "python3", "-c", launcher,
           *trainer_argv(endless_flags("swept"), nproc=None))
    wait_until_trained(container, "swept")
    logs = stop(container)
    log = read_file(container, "/tmp/swept.log", tmp_path)
    assert "killed by signal" not in log and "stopped by SIGTERM at step" in log, log[-3000:]
    assert saved_checkpoints(container, "swept", tmp_path), logs[-3000:]
    assert "stopping: SIGTERM to work below what is still running, tops first" in logs, logs[-3000:]


# What start-up and the stop write in /run/container, which any uid may write (docker run --user).
RUN_DIR_NAMES = ["started", "services", "stopping", "stop", "settings.json", "jupyter-url", "jupyter-checked"]


def test_what_a_user_leaves_in_the_run_folder_neither_blocks_kernels_nor_the_next_start(containers):
    """A user's `touch stopping` must not keep kernels from starting, and folders left under the names
    start-up writes must not end every later start (a restart loop under `unless-stopped`)."""
    container = containers(options=["--env", "JUPYTER_TOKEN=run-folder-test-token-4d3c2b1a"])
    container.wait_until_healthy()
    assert container.run("touch /run/container/stop/stopping").rc != 0  # the supervisor's folder only
    assert container.run("touch /run/container/stopping && /usr/local/lib/container/python-hooks/python-kernel --version").rc == 0
    planted = " ".join(f"/run/container/{name}.new" for name in RUN_DIR_NAMES)
    moves = " && ".join(f"mv -T /run/container/{name}.new /run/container/{name}" for name in RUN_DIR_NAMES)
    # A folder under every name, as a user leaves them where no file of root's stands (the container's own
    # uid under --user can replace them all): made as root here, so root's files are replaced too.
    assert container.run(f"rm -rf /run/container/* ; mkdir -p {planted} && {moves}", user="root").rc == 0
    docker("restart", "--time", "20", container.name)
    container.wait_until_healthy()
    assert container.run("test -f /run/container/settings.json && test -f /run/container/started").rc == 0


def test_the_healthchecks_own_probe_is_never_named_or_signalled_as_your_work(containers):
    """The engine runs the image's HEALTHCHECK from outside every few seconds. With JupyterLab paused its
    curl waits out its 4 s, so a `docker stop` finds one running: the container's own probe, not work."""
    container = containers(options=["--env", "ENABLE_SSH=0", "--health-interval", "1s"])
    container.wait_until_healthy()
    container.run("pkill -STOP -f '[j]upyter-lab'", user=None)  # [j]: not the shell running pkill
    wait_until(lambda: container.run("pgrep -x curl", user=None).rc == 0, SETTLES_S,
               failure=lambda: "the healthcheck's curl never ran")
    logs = stop(container)
    lines = [line for line in logs.splitlines() if line.startswith("[start]") and "curl" in line]
    assert not lines and "SIGTERM to your work" not in logs, logs[-3000:]
