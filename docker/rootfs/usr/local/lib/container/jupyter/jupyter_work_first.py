"""A Jupyter server extension: JupyterLab's own shutdowns stop the user's work first, as `docker stop` does.

Loaded by /etc/jupyter/jupyter_server_config.py. JupyterLab's File > Shut Down deletes every session and
terminal, then posts /api/shutdown; on its own each of those would end the work inside at once: a
terminal's shell and its jobs get SIGHUP, a busy kernel gets SIGINT, SIGTERM 2.5 s later and SIGKILL at 5 s.
So here, as in the container's stop (close_policy.py decides: terminal_close, kernel_close):
  - shutting down a terminal first sends SIGTERM to the work its close would hang up on (torchrun's
    workers rather than torchrun; not a `nohup` or `setsid` job, which outlives the terminal) and waits
    up to STOP_TIMEOUT for it to end; then the terminal closes as before;
  - shutting down a busy kernel first sends SIGTERM to what its cell runs (the workers of a `!torchrun`,
    the kernel itself for a loop in a cell that handles SIGTERM) and waits up to STOP_TIMEOUT for the
    cell to end; a loop that does not handle SIGTERM gets JupyterLab's SIGINT first, as before;
  - /api/shutdown, in the container's JupyterLab service, asks the supervisor for the container's orderly
    stop (the supervisor's own work-first steps, the server still up and holding its terminals and
    kernels) instead of tearing the server down itself.
A restart, an idle kernel and a terminal with nothing running are shut down at once, as before. Work
still running when its terminal or kernel had to close is told to the supervisor with the stop request,
so the container's log does not call the stop clean.
"""
from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import time
import urllib.parse

from jupyter_client.ioloop.restarter import AsyncIOLoopKernelRestarter
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

# The stop's policy and the run folder's names, which the supervisor's folder beside this one holds.
SUPERVISOR_LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "supervisor")
if SUPERVISOR_LIB not in sys.path:
    sys.path.append(SUPERVISOR_LIB)
import close_policy  # noqa: E402
import process_kinds  # noqa: E402
import process_table  # noqa: E402
from run_folder import STOPPING, stop_timeout_s  # noqa: E402

POLL_S = 0.2


def below(root: int) -> process_kinds.Table:
    return process_table.snapshot(process_kinds.Container.below(root))


def terminal_work(shell: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What a terminal's close stops first and waits for (close_policy.terminal_close)."""
    return close_policy.terminal_close(below(shell), shell,
                                       lambda job: process_table.ignores(job, signal.SIGHUP))


def kernel_work(server: int, kernel: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What a busy kernel's shutdown stops first and waits for (close_policy.kernel_close)."""
    handles_sigterm = process_table.handles(kernel, signal.SIGTERM)
    first = close_policy.kernel_close(below(server), server, kernel, handles_sigterm)
    return first, first


async def wait_until(done, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


class WorkFirst:
    """Stops the work in a terminal or busy kernel before JupyterLab closes it, and remembers what was
    still running when it had to close it anyway: /api/shutdown tells the supervisor, whose log then
    does not call the stop clean."""

    def __init__(self, log) -> None:
        self.log = log
        self.left_running: list[str] = []

    async def stop(self, what: str, find, ended=None) -> None:
        """FIND (run in a thread: it reads the process table) gives the pids to signal and the pids to wait
        for; waits until those have ended (or ENDED says the work has), at most STOP_TIMEOUT."""
        if os.path.exists(STOPPING):  # the container's stop has signalled this work already
            return
        try:
            pids, awaited = await asyncio.to_thread(find)
        except Exception as error:  # a failure here costs the work-first step, never the shutdown itself
            self.log.warning(f"{what}: could not look for its work ({error!r}); "
                             "closing it as JupyterLab does")
            return
        if not pids:
            return
        timeout_s = stop_timeout_s()
        process_table.signal_each(signal.SIGTERM, pids)
        self.log.info(f"{what}: SIGTERM to the work running in it first ({' '.join(map(str, pids))}); "
                      f"closing it once that has ended, or in {timeout_s} s")
        done = ended or (lambda: not any(process_table.is_alive(pid) for pid in (*pids, *awaited)))
        if not await wait_until(done, timeout_s):
            self.left_running.append(f"{what}: {' '.join(map(str, pids))}")
            self.log.warning(f"{what}: its work still runs after {timeout_s} s; closing it now")


def stop_work_before_closing_terminals(serverapp, work_first: WorkFirst) -> None:
    terminals = serverapp.web_app.settings.get("terminal_manager")
    if terminals is None:  # the terminals' extension has not loaded yet: once the server runs, it has
        IOLoop.current().add_callback(stop_work_before_closing_terminals_once_loaded, serverapp, work_first)
        return
    close = terminals.terminate

    async def terminate_after_its_work(name: str, force: bool = False) -> None:
        terminal = terminals.terminals.get(name)
        if terminal is not None:
            shell = terminal.ptyproc.pid
            await work_first.stop(f"terminal {name}", lambda: terminal_work(shell))
        await close(name, force=force)

    terminals.terminate = terminate_after_its_work


def stop_work_before_closing_terminals_once_loaded(serverapp, work_first: WorkFirst) -> None:
    if serverapp.web_app.settings.get("terminal_manager") is None:
        serverapp.log.warning("jupyter_work_first: no terminals to look after (terminals are off)")
        return
    stop_work_before_closing_terminals(serverapp, work_first)


def stop_work_before_shutting_kernels_down(serverapp, work_first: WorkFirst) -> None:
    kernels = serverapp.kernel_manager
    shut_down = kernels.shutdown_kernel

    async def shutdown_after_its_cell(kernel_id: str, now: bool = False, restart: bool = False) -> None:
        kernel = kernels.get_kernel(kernel_id) if kernel_id in kernels else None
        pid = getattr(kernel.provisioner, "pid", None) if kernel is not None and kernel.provisioner else None
        if not restart and pid is not None and getattr(kernel, "execution_state", "") == "busy":
            kernel.stop_restarter()  # a kernel that ends while its work stops is not started again
            await work_first.stop(f"kernel {kernel_id}", lambda: kernel_work(os.getpid(), pid),
                                  ended=lambda: (kernel.execution_state != "busy"
                                                 or not process_table.is_alive(pid)))
        await shut_down(kernel_id, now=now, restart=restart)

    kernels.shutdown_kernel = shutdown_after_its_cell


class ContainerShutdownHandler(JupyterHandler):
    """/api/shutdown, when this server is the container's JupyterLab service: the supervisor stops the
    container as `docker stop` does, the user's work first and this server last."""
    auth_resource = "server"

    stop_requests: int = -1  # the pipe's write end the supervisor gave this server
    work_first: WorkFirst | None = None

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.log.info("Shutting down on /api/shutdown request: asking the container to stop, your work first")
        left = "; ".join(self.work_first.left_running).replace("\t", " ").replace("\n", " ")
        try:
            os.write(self.stop_requests, f"stop\t{left}\n".encode())
        except OSError:  # asked already (a second tab, a second click): the supervisor stopped listening
            pass
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


class RestarterThatStopsWithTheContainer(AsyncIOLoopKernelRestarter):
    """JupyterLab's kernel restarter, which starts a kernel that died again, except once the container's
    stop has begun (its marker): the stop ends the kernels, the kernel wrapper refuses to start new ones,
    and a restart still in flight when the server's own end comes fails that end (InvalidStateError), so
    the stop waits for its SIGKILL. Decided at each look, the moment a restart would begin: the stop
    signals the kernels right after it writes the marker, sooner than any watch of the marker would see
    it. Set as every kernel's restarter by /etc/jupyter/jupyter_server_config.py."""

    async def poll(self) -> None:
        if os.path.exists(STOPPING):
            self.stop()
            return
        await super().poll()


def reachable_from_inside(serverapp) -> None:
    """`jupyter server stop` and `jupyter server list` read the server's runtime file, whose URL names the
    host name when the server listens on every address (0.0.0.0): a container without a network cannot
    resolve it. The loopback address reaches such a server from anywhere in the container."""
    if serverapp.ip not in ("0.0.0.0", "::") or serverapp.sock:
        return
    loopback = "[::1]" if serverapp.ip == "::" else "127.0.0.1"
    info = serverapp.server_info

    def server_info() -> dict:
        found = info()
        address = urllib.parse.urlsplit(found["url"])
        found["url"] = address._replace(netloc=f"{loopback}:{serverapp.port}").geturl()
        return found
    serverapp.server_info = server_info


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    pipe = stop_request_pipe()  # first: the pipe is kept from every child whatever happens below
    work_first = WorkFirst(serverapp.log)
    stop_work_before_closing_terminals(serverapp, work_first)
    stop_work_before_shutting_kernels_down(serverapp, work_first)
    reachable_from_inside(serverapp)
    if pipe is not None:
        # This server's kernels outlive it (python-kernel): after a crash, the container's stop still
        # asks their loops to save. Kernels of another server (one a user starts) keep ipykernel's watch.
        os.environ["CONTAINER_JUPYTER_PID"] = str(os.getpid())
        ContainerShutdownHandler.stop_requests, ContainerShutdownHandler.work_first = pipe, work_first
        # An extension's handlers are matched before the server's own (tornado inserts them first).
        serverapp.web_app.add_handlers(".*$", [(url_path_join(serverapp.base_url, "api/shutdown"),
                                                ContainerShutdownHandler)])
