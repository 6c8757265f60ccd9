"""A Jupyter server extension: JupyterLab's own shutdowns stop the user's work first, as `docker stop` does.

Loaded by /etc/jupyter/jupyter_server_config.py. JupyterLab's File > Shut Down deletes every session and
terminal, then posts /api/shutdown; on its own each of those would end the work inside at once: a
terminal's shell and its jobs get SIGHUP, a busy kernel gets SIGINT, SIGTERM 2.5 s later and SIGKILL at 5 s.
So here, as in the container's stop (stop_policy.py):
  - shutting down a terminal first sends SIGTERM to the work running in it (torchrun's workers rather than
    torchrun) and waits up to STOP_TIMEOUT for it to end; then the terminal closes as before;
  - shutting down a busy kernel first sends SIGTERM to what its cell runs (the kernel itself for a loop in
    a cell, the workers of a `!torchrun`) and waits up to STOP_TIMEOUT for the cell to end;
  - /api/shutdown, in the container's JupyterLab service, asks the supervisor for the container's orderly
    stop (the supervisor's own work-first steps, the server still up and holding its terminals and
    kernels) instead of tearing the server down itself.
A restart, an idle kernel and a terminal with nothing running are shut down at once, as before.
"""
from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import time

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

CONTAINER_LIB = os.path.dirname(os.path.abspath(__file__))
if CONTAINER_LIB not in sys.path:
    sys.path.append(CONTAINER_LIB)
import process_table  # noqa: E402
import stop_policy  # noqa: E402

STOPPING = "/run/container/stopping"  # supervisor.py's mark_stopping: the container's stop has begun
POLL_S = 0.2
DEFAULT_STOP_TIMEOUT_S = 25


def stop_timeout_s() -> int:
    """The container's STOP_TIMEOUT: how long the stop waits for work, here as in docker stop."""
    try:
        return max(1, int(os.environ.get("STOP_TIMEOUT", DEFAULT_STOP_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_STOP_TIMEOUT_S


def work_below(root: int) -> tuple[frozenset[int], tuple[int, ...]]:
    """The user's work running below ROOT (a terminal's shell, the server for a kernel), and what the stop
    policy would signal of it first."""
    below_root = stop_policy.Container(root, frozenset(), own_pid_namespace=False)
    plan = stop_policy.plan_signals(process_table.snapshot(below_root), below_root)
    return plan.work, plan.signal


def in_subtree(pid: int, top: int) -> bool:
    return pid == top or process_table.descends_from(pid, top)


def terminate(pids: tuple[int, ...]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)  # a job stopped with Ctrl-Z acts on its SIGTERM once it runs
        except OSError:
            pass  # gone already, or not ours


async def wait_until(done, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def stop_the_terminals_work(log, name: str, shell: int) -> None:
    work, first = work_below(shell)
    if not work or os.path.exists(STOPPING):  # the container's stop has signalled it already
        return
    terminate(first)
    log.info(f"terminal {name}: SIGTERM to the work running in it first ({' '.join(map(str, first))}); "
             f"closing it once that has ended, or in {stop_timeout_s()} s")
    if not await wait_until(lambda: not work_below(shell)[0], stop_timeout_s()):
        log.warning(f"terminal {name}: its work still runs after {stop_timeout_s()} s; closing it now")


async def stop_the_kernels_work(log, kernel_id: str, kernel) -> None:
    pid = getattr(kernel.provisioner, "pid", None) if kernel.provisioner else None
    if pid is None or getattr(kernel, "execution_state", "") != "busy" or os.path.exists(STOPPING):
        return
    _, first = work_below(os.getpid())
    first = tuple(process for process in first if in_subtree(process, pid))
    terminate(first)
    log.info(f"kernel {kernel_id}: its cell runs; SIGTERM to it first ({' '.join(map(str, first))}), "
             f"shutting it down once the cell has ended, or in {stop_timeout_s()} s")
    if not await wait_until(lambda: getattr(kernel, "execution_state", "") != "busy"
                            or not process_table.is_alive(pid), stop_timeout_s()):
        log.warning(f"kernel {kernel_id}: its cell still runs after {stop_timeout_s()} s; shutting it down now")


def stop_work_before_closing_terminals(serverapp) -> None:
    terminals = serverapp.web_app.settings.get("terminal_manager")
    if terminals is None:  # the terminals' extension has not loaded yet: once the server runs, it has
        IOLoop.current().add_callback(stop_work_before_closing_terminals_once_loaded, serverapp)
        return
    close = terminals.terminate

    async def terminate_after_its_work(name: str, force: bool = False) -> None:
        terminal = terminals.terminals.get(name)
        if terminal is not None:
            await stop_the_terminals_work(serverapp.log, name, terminal.ptyproc.pid)
        await close(name, force=force)

    terminals.terminate = terminate_after_its_work


def stop_work_before_closing_terminals_once_loaded(serverapp) -> None:
    if serverapp.web_app.settings.get("terminal_manager") is None:
        serverapp.log.warning("jupyter_work_first: no terminals to look after (terminals are off)")
        return
    stop_work_before_closing_terminals(serverapp)


def stop_work_before_shutting_kernels_down(serverapp) -> None:
    kernels = serverapp.kernel_manager
    shut_down = kernels.shutdown_kernel

    async def shutdown_after_its_cell(kernel_id: str, now: bool = False, restart: bool = False) -> None:
        if not restart and kernel_id in kernels:
            await stop_the_kernels_work(serverapp.log, kernel_id, kernels.get_kernel(kernel_id))
        await shut_down(kernel_id, now=now, restart=restart)

    kernels.shutdown_kernel = shutdown_after_its_cell


class ContainerShutdownHandler(JupyterHandler):
    """/api/shutdown, when this server is the container's JupyterLab service: the supervisor stops the
    container as `docker stop` does, the user's work first and this server last."""
    auth_resource = "server"

    stop_requests: int = -1  # the pipe's write end the supervisor gave this server

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.log.info("Shutting down on /api/shutdown request: asking the container to stop, your work first")
        os.write(self.stop_requests, b"stop\n")
        self.set_status(202)  # accepted: JupyterLab closes its window on any 2xx
        self.finish({"message": "the container is stopping: your work gets SIGTERM first, then JupyterLab"})


def stop_request_pipe() -> int | None:
    """The pipe the supervisor gave this server to ask for the container's stop through, when it started
    the server as the container's service (not `docker run IMAGE jupyter lab`, a command). Taken out of
    the environment and kept from every child, so no kernel or terminal finds it."""
    fd = os.environ.pop("CONTAINER_STOP_REQUEST_FD", "")
    try:
        if not stat.S_ISFIFO(os.fstat(int(fd)).st_mode):
            return None
        os.set_inheritable(int(fd), False)
    except (ValueError, OSError):
        return None
    return int(fd)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    stop_work_before_closing_terminals(serverapp)
    stop_work_before_shutting_kernels_down(serverapp)
    pipe = stop_request_pipe()
    if pipe is not None:
        ContainerShutdownHandler.stop_requests = pipe
        # An extension's handlers are matched before the server's own (tornado inserts them first).
        serverapp.web_app.add_handlers(".*$", [(url_path_join(serverapp.base_url, "api/shutdown"),
                                                ContainerShutdownHandler)])
