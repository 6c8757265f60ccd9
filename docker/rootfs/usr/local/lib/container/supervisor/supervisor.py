"""The container's resident supervisor. entrypoint.sh does the start-up steps, writes what they resolved
to the run folder's settings.json (run_folder.py), and ends by exec'ing this program (with the image's own
Python, -I -S: the standard library only, so no package of the user's can break it):

    supervisor.py SETTINGS -- [ARGUMENT ...]   # a command's words, or the services' JupyterLab arguments

It starts the services (sshd, JupyterLab, the GPU exporter), each in a session of its own, or the
command in one, and waits. On SIGTERM or SIGINT (`docker stop`), or when a service ends on its own, it
stops the container in the three steps that stop.py runs and stop_policy.py decides. While it waits it
names the kernel's out-of-memory kills in the log (oom_watch.py), and under a hub it tells the hub while
the user's work runs (hub_activity.py), so the idle culler leaves a server with a trainer alone. The rest
of the runtime, each file one job: children.py (reaping, pausing), stop_signals.py (what reaches the
supervisor), process_table.py (reading /proc), run_folder.py (the names).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Any

sys.dont_write_bytecode = True  # the image compiled these at build; the run time changes nothing of it
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this folder off sys.path
import process_kinds  # noqa: E402
import process_table  # noqa: E402
import stop_policy  # noqa: E402
from children import Children  # noqa: E402
from hub_activity import HubActivity  # noqa: E402
from oom_watch import OomWatch  # noqa: E402
from run_folder import LOG_PREFIX, SERVICES, STARTED, log, read_settings, warn  # noqa: E402
from stop import Stop, describe  # noqa: E402
from stop_signals import STOP_REQUEST_FD, WAITED_SIGNALS, Signals, StopRequests  # noqa: E402
from stop_verdict import exit_status  # noqa: E402

SCRIPTS = "/opt/scripts"  # doctor is a package there
# A service's end is seen as its SIGCHLD arrives; what ended with it (its terminals' jobs) ended no earlier
# than this before the supervisor looked, and is named by the stop.
SERVICE_END_SEEN_WITHIN_S = 1.0
PR_SET_CHILD_SUBREAPER = 36


# ---- starting ------------------------------------------------------------------------------------

def relay_limit_warnings(checks: str) -> None:
    """doctor's limit checks, run in this interpreter: their thresholds and fixes live in its limits.py."""
    sys.path.append(SCRIPTS)  # for this import only, after the standard library, so nothing there shadows it
    try:
        from doctor import limits, report
        lines = report.brief_lines(limits.check(checks.split(",")))
    except Exception as error:  # a broken doctor costs its warnings, never the container
        warn(f"could not check the container's limits ({SCRIPTS}/doctor: {error!r})")
        return
    finally:
        sys.path.remove(SCRIPTS)
    for line in lines:
        warn(line)


def spawn(argv: list[str], cwd: str | None = None, stdin: bool = False,
          stop_requests: int | None = None) -> int:
    """Starts ARGV in a session of its own, with the signals Python ignores or blocks back to default.
    Only the command gets the container's stdin (STDIN); a service reads /dev/null, as a shell's
    background job does. STOP_REQUESTS: the write end of a pipe the service gets as STOP_REQUEST_FD, to
    ask for the orderly stop through (StopRequests)."""
    actions = [] if stdin else [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    environment = {name: value for name, value in os.environ.items() if name != "CONTAINER_STOP_REQUEST_FD"}
    if stop_requests is not None:
        actions.append((os.POSIX_SPAWN_DUP2, stop_requests, STOP_REQUEST_FD))
        environment["CONTAINER_STOP_REQUEST_FD"] = str(STOP_REQUEST_FD)
    here = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        return os.posix_spawnp(argv[0], argv, environment, file_actions=actions, setsid=True, setsigmask=(),
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT))
    finally:
        os.chdir(here)


def start_services(settings: dict[str, Any], jupyter_arguments: list[str],
                   stop_requests: StopRequests) -> tuple[dict[int, str], bool]:
    """The services started, by PID, and whether every one of them could be started. JupyterLab may ask
    for the orderly stop through STOP_REQUESTS."""
    wanted = []
    if settings["ssh"]:
        wanted.append(("ssh", settings["ssh_command"], None))
    if settings["jupyter"]:
        wanted.append(("jupyter", [*settings["as_user"], *settings["jupyter_command"], *jupyter_arguments],
                       settings["workspace"]))
    services: dict[int, str] = {}
    for name, argv, cwd in wanted:
        try:
            if name == "jupyter":
                services[spawn(argv, cwd, stop_requests=stop_requests.write_end)] = name
                stop_requests.listen(name)
            else:
                services[spawn(argv, cwd)] = name
        except OSError as error:
            log(f"ERROR: could not start {name} ({' '.join(argv)}): {error}; stopping the container")
            return services, False
    with open(SERVICES, "w", encoding="utf-8") as file:  # the healthcheck's list
        file.writelines(f"{name}\n" for name in services.values())
    if not services:
        log("no service enabled and no command given: idling; use docker exec, or pass a command")
    log(f"started: {' '.join(services.values()) or 'nothing'}")
    return services, True


def start_gpu_exporter(settings: dict[str, Any]) -> int | None:
    """Beside the services or a command; a failed exporter costs its metrics, never the container."""
    if not settings["gpu_exporter_command"]:
        return None
    try:
        pid = spawn([*settings["as_user"], *settings["gpu_exporter_command"]])
    except OSError as error:
        warn(f"could not start the GPU exporter: {error}")
        return None
    log(f"GPU exporter: /metrics on port {settings['gpu_exporter_port']}")
    return pid


def mark_started() -> None:
    """From here on `docker exec` sees the final user, ids and files (tests wait for the marker; the
    healthcheck reports nothing healthy before it)."""
    with open(STARTED, "w"):
        pass


# ---- the main loop -------------------------------------------------------------------------------

def wait_for_event(children: Children, watched: set[int], watches: list[HubActivity | OomWatch],
                   signals: Signals) -> tuple[str, int]:
    """Blocks until a signal that stops the container ("stop", its number) or the end of a watched child
    ("ended", its PID), letting each of WATCHES look when it is due."""
    while True:
        for pid in children.reap():
            if pid in watched:
                return "ended", pid
        due = min(watches, key=lambda watch: watch.seconds_left(), default=None)
        if due is None or due.seconds_left() == float("inf"):
            info = signal.sigwaitinfo(WAITED_SIGNALS)
        else:
            info = signal.sigtimedwait(WAITED_SIGNALS, due.seconds_left())
            if info is None:
                due.look()
                continue
        if info.si_signo != signal.SIGCHLD and signals.take(info):
            return "stop", info.si_signo


def stop_what_the_command_left(stop: Stop, container: process_kinds.Container, status: int) -> None:
    """Work the command started in the background and left running would be SIGKILLed with the
    container, mid-save and without a word: it gets the stop `docker stop` gives."""
    table = process_table.snapshot(container, pipes=False)
    left = stop_policy.user_work(table, container)
    if left:
        log(f"the command exited (status {status}) and left work running; stopping it as docker stop does: "
            f"{describe(sorted(left), table)}")
        stop.run()


def cannot_run(command: str, error: OSError) -> int:
    log(f"ERROR: cannot run {command}: {error.strerror}; check the command's name and PATH")
    return 127


def run_in_place(settings: dict[str, Any], command: list[str]) -> int:
    """At a terminal in the host's PID namespace (`apptainer run` from a shell) the command takes this
    process's place: the caller's shell sees this process as its job, and Ctrl-Z must stop the whole of
    it for `fg` to work. The command then gets `docker stop`'s signal itself."""
    relay_limit_warnings(settings["limit_checks"])
    start_gpu_exporter(settings)
    mark_started()
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)
    argv = [*settings["as_user"], *command]
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        return cannot_run(command[0], error)


def spawn_at_the_terminal(argv: list[str], name: str) -> int:
    """Starts ARGV at the container's terminal (docker run -it): in a process group of its own in this
    session, made the terminal's foreground group, so Ctrl-C, Ctrl-Z and the terminal's size reach it and
    not the supervisor, which stays to stop its work in order on `docker stop` (an interactive shell
    ignores SIGTERM, and the jobs typed at its prompt run in process groups of their own)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            try:
                os.tcsetpgrp(0, os.getpid())  # allowed from the background: SIGTTOU is still blocked here
            except OSError:
                pass  # stdin is a terminal but not this session's: the command runs, without job control
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execvp(argv[0], argv)
        except OSError as error:
            os.write(2, f"{LOG_PREFIX} ERROR: cannot run {name}: {error.strerror}; check the command's name "
                        f"and PATH\n".encode())
        finally:
            os._exit(127)  # never back into this program's main, whatever went wrong
    try:
        os.setpgid(pid, pid)  # here too, as shells do: whichever runs first
    except OSError:
        pass  # the child is in its group already, or has exec'd and set it
    return pid


def main(argv: list[str]) -> int:
    settings_path, separator, *rest = argv
    if separator != "--":
        raise SystemExit("usage: supervisor.py SETTINGS -- [ARGUMENT ...]")
    settings = read_settings(settings_path)
    command_mode = settings["mode"] == "command"
    if command_mode and settings["at_a_terminal"] and not settings["own_pid_namespace"]:
        return run_in_place(settings, rest)
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED_SIGNALS)
    # The orphans of the user's work (a launcher that exited) become our children: they stay in our
    # tree, which is all the stop looks at without a PID namespace of our own.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    children = Children()
    stop_requests = StopRequests()
    command, started = None, True
    if command_mode:
        argv = [*settings["as_user"], *rest]
        try:
            command = (spawn_at_the_terminal(argv, rest[0]) if settings["at_a_terminal"]
                       else spawn(argv, stdin=True))
        except OSError as error:
            return cannot_run(rest[0], error)
        services = {command: "command"}
    else:
        services, started = start_services(settings, rest, stop_requests)
    exporter = start_gpu_exporter(settings)
    children.watched = set(services) | ({exporter} - {None})  # an exporter's end is no lost work
    holders = {pid for pid, name in services.items() if name != "command"} | ({exporter} - {None})
    container = process_kinds.Container(os.getpid(), frozenset(holders), settings["own_pid_namespace"])
    oom = OomWatch(settings["own_pid_namespace"])
    stop = Stop(container, children, settings["stop_timeout_s"], command, oom)
    if not started:
        stop.run()
        return 1
    mark_started()
    # Beside the services, which take seconds to answer: the check costs them no time.
    relay_limit_warnings(settings["limit_checks"])
    watches: list[HubActivity | OomWatch] = [oom]
    if settings["spawned_by_hub"] and not command_mode and os.environ.get("JUPYTERHUB_API_URL"):
        watches.append(HubActivity(container))
    signals = Signals(container, command_mode, stop_requests)
    event, which = wait_for_event(children, set(services), watches, signals)
    oom.look()  # an OOM kill that ended a service, or just came before the stop, is named first
    if command:
        if event == "stop":
            stop.run()
        else:
            stop_what_the_command_left(stop, container, children.status[command])
        # The command's exit status is the container's: torchrun's, 0 when its workers saved.
        return exit_status("command", stop.clean, children.status_of(command))
    if event == "stop":
        stop.left_by_the_service = stop_requests.left_running if signals.asked_by else ""
        stop.run()
        if signals.asked_by is None:
            return exit_status("docker stop", stop.clean)
        status = 0  # a service shut down on purpose, with the user's work stopped first
    else:
        status = children.status[which]
        warn(f"a service exited on its own (status {status}): stopping your work, then the other services, "
             "so the restart policy can act")
        stop.service_ended_at = time.monotonic() - SERVICE_END_SEEN_WITHIN_S
        stop.run()
    return exit_status("service", stop.clean, status, settings["spawned_by_hub"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
