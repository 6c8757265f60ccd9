"""JupyterLab ending first loses no work: its own File > Shut Down, and a crash of the server, each with a
trainer typed into a JupyterLab terminal and a training loop running in a notebook kernel. Both keep their
checkpoint, and the container's log ends honestly: "stopped cleanly" only when nothing was lost, and work a
crash took away is named.

    make test-image PYTEST_ARGS=tests/image/test_stop_with_jupyterlab.py
"""
from __future__ import annotations

import concurrent.futures
import json

import pytest

from tests.support import SETTLES_S
from tests.support.containers import docker
from tests.support.jupyter_websockets import JupyterAccess, run_in_terminal
from tests.support.notebook_kernel import run_in_kernel, start_in_kernel
from tests.support.stopping import (GRACE_PERIOD_S, endless_flags, endless_run_command, read_file,
                                    saved_checkpoints, training_in_a_kernel, wait_until_it_ignores_sigterm,
                                    wait_until_trained)
from tests.support.training import trainer_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

TOKEN = "shut-down-test-token-3c2b1a0f9e"
IGNORES_SIGTERM = "python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'"


def jupyterlab(containers, options: tuple[str, ...] = ()):
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}", *options])
    container.wait_until_healthy()
    return container, JupyterAccess(f"http://127.0.0.1:{container.published_port(8888)}/", token=TOKEN)


def open_a_notebook(access: JupyterAccess, name: str) -> str:
    """Opens the notebook NAME.ipynb as JupyterLab does (a session with a new python3 kernel); returns the
    kernel's id."""
    session = access.post("api/sessions", json={"path": f"{name}.ipynb", "name": f"{name}.ipynb", "type": "notebook",
                                                "kernel": {"name": "python3"}})
    assert session.status_code == 201, session.text
    return session.json()["kernel"]["id"]


def type_into_a_terminal(access: JupyterAccess, command: str) -> None:
    """Opens a JupyterLab terminal and types COMMAND at its prompt, as a user does; it runs in the
    foreground there, its output on the terminal unless COMMAND sends it elsewhere."""
    run_in_terminal(access, f"echo typed''-in; {command}", until="typed-in")


def start_a_loop_in_a_notebook(container, access: JupyterAccess, name: str) -> None:
    """Opens a notebook (a session, as JupyterLab does) and leaves the trainer NAME's loop running in it."""
    start_in_kernel(container, open_a_notebook(access, name), training_in_a_kernel(name))


def training_in_a_terminal_and_a_notebook(containers, terminal_command: str):
    """JupyterLab with the trainer "terminal" typed into a terminal and the loop "notebook" in a notebook's
    kernel, both past their second step."""
    container, access = jupyterlab(containers)
    type_into_a_terminal(access, terminal_command)
    start_a_loop_in_a_notebook(container, access, "notebook")
    for name in ("terminal", "notebook"):
        wait_until_trained(container, name)
    return container, access


def file_shut_down(access: JupyterAccess) -> None:
    """What JupyterLab 4's File > Shut Down sends: every session and terminal deleted at once, then
    /api/shutdown."""
    deletions = [f"api/sessions/{session['id']}" for session in access.get("api/sessions").json()]
    deletions += [f"api/terminals/{terminal['name']}" for terminal in access.get("api/terminals").json()]
    with concurrent.futures.ThreadPoolExecutor(len(deletions)) as pool:
        for reply in pool.map(lambda path: access.request("DELETE", path), deletions):
            assert reply.status_code == 204, reply.text
    reply = access.post("api/shutdown")
    assert reply.ok, reply.text


def kill_the_server(container) -> None:
    """A crash of JupyterLab: SIGKILL, which leaves it no time to close its terminals or kernels."""
    killed = container.run("pkill -KILL -o -f 'bin/jupyter-lab'", user="root")
    assert killed.rc == 0, killed.stderr


def wait_until_stopped(container) -> str:
    wait_until(lambda: not container.state()["Running"], GRACE_PERIOD_S + 30, interval=1,
               failure=lambda: container.logs()[-3000:])
    return container.logs()


def last_line(logs: str) -> str:
    return logs.strip().splitlines()[-1]


def test_file_shut_down_saves_a_trainer_in_a_terminal_and_a_loop_in_a_notebook(containers, tmp_path):
    container, access = training_in_a_terminal_and_a_notebook(containers, endless_run_command("terminal", 1))
    file_shut_down(access)
    logs = wait_until_stopped(container)

    for name in ("terminal", "notebook"):
        log = read_file(container, f"/tmp/{name}.log", tmp_path)
        assert "stopped by SIGTERM at step" in log and "Traceback" not in log, f"{name}:\n{log}\n{logs[-3000:]}"
        assert saved_checkpoints(container, name, tmp_path), f"{name} saved no checkpoint:\n{log}"
    assert "JupyterLab's File > Shut Down" in logs and last_line(logs).endswith("stopped cleanly"), logs[-3000:]
    # As for any service that ends: not 0, so that `restart: unless-stopped` brings the container back.
    assert container.state()["ExitCode"] == 1, logs[-3000:]


def test_a_crash_of_jupyterlab_keeps_the_trainer_in_its_terminal_and_the_loop_in_its_kernel(containers, tmp_path):
    """The terminal hangs up on the trainer (SIGHUP), whose output to it fails from then on; the kernel loses
    its server. Each must still save, and the kernel must live until its loop has."""
    # Its output on the terminal itself, as typed by a user; the metrics file says how far it got.
    container, _ = training_in_a_terminal_and_a_notebook(
        containers, trainer_command(endless_flags("terminal"), nproc=None, timeout_s=None))
    kill_the_server(container)
    logs = wait_until_stopped(container)

    for name in ("terminal", "notebook"):
        assert saved_checkpoints(container, name, tmp_path), f"{name} saved no checkpoint:\n{logs[-3000:]}"
    assert "stopped by SIGTERM at step" in read_file(container, "/tmp/notebook.log", tmp_path)
    assert "before the stop could ask it to save" not in logs, logs[-3000:]
    assert last_line(logs).endswith("stopped cleanly"), logs[-3000:]


def test_work_a_crash_of_jupyterlab_took_away_is_named_and_the_stop_is_not_clean(containers):
    """A program that does not handle SIGHUP dies of it with its terminal. It ignores SIGTERM, so that
    however the hang-up and the stop's step 1 race, the hang-up is what ends it."""
    container, access = jupyterlab(containers)
    type_into_a_terminal(access, IGNORES_SIGTERM)
    wait_until_it_ignores_sigterm(container, "SIG_IGN")

    kill_the_server(container)
    logs = wait_until_stopped(container)

    named = [line for line in logs.splitlines() if "before the stop could ask it to save" in line]
    assert len(named) == 1 and "python3, status 129" in named[0], logs[-3000:]
    assert "stopped cleanly" not in logs and "not cleanly" in last_line(logs), logs[-3000:]


def test_work_still_running_when_file_shut_down_closed_its_terminal_is_named(containers):
    """STOP_TIMEOUT runs out for a program that ignores SIGTERM: JupyterLab closes its terminal anyway, and
    the container's log must say so rather than end with "stopped cleanly"."""
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}",
                                    "--env", "STOP_TIMEOUT=3"])
    container.wait_until_healthy()
    access = JupyterAccess(f"http://127.0.0.1:{container.published_port(8888)}/", token=TOKEN)
    type_into_a_terminal(access, IGNORES_SIGTERM)
    wait_until_it_ignores_sigterm(container, "SIG_IGN")

    file_shut_down(access)
    logs = wait_until_stopped(container)

    assert "JupyterLab closed these with their work still running after 3 s: terminal 1" in logs, logs[-3000:]
    assert "stopped cleanly" not in logs and "not cleanly" in last_line(logs), logs[-3000:]


SLEEPER = "nohup python3 -c 'import time; time.sleep(600)' >/dev/null 2>&1"


# Bare, and behind a list, a group and a subshell, which bash runs in a subshell of its own: the job's top
# then does not ignore SIGHUP, but the nohup below it does (round 8, medium 1: it got SIGTERM first).
@pytest.mark.parametrize("typed", [f"{SLEEPER} &", f"cd /tmp && {SLEEPER} &", f"{{ {SLEEPER}; }} &",
                                   f"( {SLEEPER} ) &"], ids=["bare", "list", "group", "subshell"])
def test_a_nohup_job_outlives_its_terminal_being_shut_down(containers, typed):
    """A job the user kept from the hang-up (`nohup ... &`) keeps running when its terminal closes, as it
    did before the terminal's work was stopped first."""
    container, access = jupyterlab(containers)
    type_into_a_terminal(access, typed)
    wait_until(lambda: "time.sleep(600)" in container.run("ps -eo args").stdout, SETTLES_S)
    (terminal,) = access.get("api/terminals").json()
    assert access.request("DELETE", f"api/terminals/{terminal['name']}").status_code == 204
    assert "time.sleep(600)" in container.run("ps -eo args").stdout


def test_a_second_shut_down_while_the_container_stops_is_answered(containers):
    """Two open tabs, two clicks: the second request comes while the stop waits for work, and is answered
    as the first was, not with a server error."""
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}",
                                    "--env", "STOP_TIMEOUT=5"])
    container.wait_until_healthy()
    access = JupyterAccess(f"http://127.0.0.1:{container.published_port(8888)}/", token=TOKEN)
    docker("exec", "--detach", container.name, "bash", "-c", IGNORES_SIGTERM)
    wait_until_it_ignores_sigterm(container, "SIG_IGN")
    first = access.post("api/shutdown")
    wait_until(lambda: "asked to shut down" in container.logs(), SETTLES_S)
    second = access.post("api/shutdown")
    assert (first.status_code, second.status_code) == (202, 202), second.text
    wait_until_stopped(container)


SAVES_FOR_8_S_ON_SIGTERM = """
import signal, time
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
while not stopping:
    time.sleep(0.1)
time.sleep(8)
"""


def test_no_kernel_is_restarted_once_the_container_stops(containers):
    """An idle kernel ends at the stop's first SIGTERM while another one's cell still saves: JupyterLab's
    restarter (it looks every 3 s) must not start it again, nor try over and over while the kernel wrapper
    refuses to start one in a stopping container."""
    container, access = jupyterlab(containers)
    open_a_notebook(access, "idle")
    start_in_kernel(container, open_a_notebook(access, "saving"), SAVES_FOR_8_S_ON_SIGTERM)
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()

    assert "restarting kernel" not in logs and "no kernel starts now" not in logs, logs[-3000:]
    assert last_line(logs).endswith("stopped cleanly"), logs[-3000:]


def test_no_kernel_is_restarted_however_soon_the_restarter_looks_after_the_stop_began(containers, tmp_path):
    """The stop signals the idle kernels right after it writes its marker. A restarter that looks every
    10 ms (a user's KernelRestarter.time_to_dead, in a config folder of their own) sees them dead before
    any watch of the marker would: it must still start none, and JupyterLab's end must not fail on a
    restart in flight (InvalidStateError, then the SIGKILL)."""
    config = tmp_path / "jupyter-config"
    config.mkdir(mode=0o755)
    (config / "jupyter_server_config.json").write_text(json.dumps({"KernelRestarter": {"time_to_dead": 0.01}}))
    (config / "jupyter_server_config.json").chmod(0o644)
    container, access = jupyterlab(containers, ("--volume", f"{config}:/etc/jupyter-of-the-user:ro",
                                                "--env", "JUPYTER_CONFIG_PATH=/etc/jupyter-of-the-user"))
    for name in ("first", "second", "third"):
        assert run_in_kernel(container, open_a_notebook(access, name), "1")["status"] == "ok"  # up and idle
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()

    assert "restarting kernel" not in logs and "InvalidStateError" not in logs, logs[-3000:]
    assert last_line(logs).endswith("stopped cleanly"), logs[-3000:]


def test_a_kernel_still_starting_when_the_stop_begins_is_not_started_on_the_images_python(containers):
    """A kernel's start first tries the user's own environment (a second or two); a stop that begins then
    ends that try. The kernel must not fall back to the image's Python, telling the user their
    environment is broken, and start in a container that is stopping."""
    container, access = jupyterlab(containers)
    for name in ("first", "second", "third"):
        open_a_notebook(access, name)
    docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=GRACE_PERIOD_S + 30)
    logs = container.logs()

    assert "runs the image's Python" not in logs, logs[-3000:]
    assert last_line(logs).endswith("stopped cleanly"), logs[-3000:]


def test_jupyter_server_stop_works_in_a_container_without_a_network(containers):
    """`jupyter server stop` posts /api/shutdown to the URL in the server's runtime file: with the server on
    every address that URL named the container's host name, which nothing resolves without a network."""
    container = containers(options=["--network", "none", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()

    stopped = container.run("jupyter server stop 8888")
    # It waits for the server to end, and is work of the container the stop signals first: 143.
    assert stopped.rc in (0, 143) and "Traceback" not in stopped.stderr, stopped.stdout + stopped.stderr
    logs = wait_until_stopped(container)

    assert "asked to shut down" in logs and last_line(logs).endswith("stopped cleanly"), logs[-3000:]
