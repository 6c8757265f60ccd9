"""The container's resident supervisor. entrypoint.sh does the start-up steps, writes what they resolved
to /run/container/settings.json, and ends by exec'ing this program (with the image's own Python, -I -S:
the standard library only, so no package of the user's can break it):

    supervisor.py SETTINGS -- [ARGUMENT ...]   # a command's words, or the services' JupyterLab arguments

It starts the services (sshd, JupyterLab, the GPU exporter), each in a session of its own, or the
command in one, and waits. On SIGTERM or SIGINT (`docker stop`), or when a service ends on its own, it
stops the container in the three steps stop_policy.py decides. It is running already when the stop
comes, so it forks nothing between the signal and the exit: thousands of processes and a full PID
table do not slow it. Under a hub it also tells the hub while the user's work runs, so the idle culler
leaves a server with a trainer alone.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from typing import Any

sys.dont_write_bytecode = True  # the image compiled these at build; the run time changes nothing of it
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this folder off sys.path
import process_table  # noqa: E402
import stop_policy  # noqa: E402

RUN_DIR = "/run/container"
# The stop's marker, read by kernel_stop.py, python-kernel and jupyter_work_first.py.
STOPPING = os.path.join(RUN_DIR, "stop", "stopping")
DOCTOR = "/opt/scripts/doctor.py"
# The checks for exited work start this often and slow down to POLL_S: most work ends within a
# fraction of a second, and a check of 5,000 processes costs tens of milliseconds.
FIRST_POLL_S = 0.02
POLL_S = 0.2
RESCAN_EVERY_S = 1.0    # at most this often, after some of the work exited, the table is read again
SERVICES_STOP_S = 10    # step 3 waits this long for what it signalled, then SIGKILLs what is left
# Step 3 first gives the work still running, top first, this long to end before everything else gets
# SIGTERM: a trainer below a launcher that ignored step 1 saves before its DataLoader workers are signalled.
# compose's 30 s grace less the default STOP_TIMEOUT of 25 s leaves about 5 s for all of step 3.
WORK_FIRST_S = 3
COMMAND_ENDS_S = 2      # how long a command whose work has ended may take to end by itself
# A service's end is seen as its SIGCHLD arrives; what ended with it (its terminals' jobs) ended no earlier
# than this before the supervisor looked, and is named by the stop.
SERVICE_END_SEEN_WITHIN_S = 1.0
STOP_REQUEST_FD = 3  # where JupyterLab finds the pipe to ask for the orderly stop through (StopRequests)
DESCRIBED_AT_MOST = 8
PR_SET_CHILD_SUBREAPER = 36
# Every signal an operator may send is waited for, never left to its default action, which would end the
# supervisor at once and everything with it (stop_policy.signal_meaning says what each one means). The
# faults stay a crash's, and SIGPIPE and SIGXFSZ stay ignored, as Python leaves them.
FAULTS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT, signal.SIGTRAP,
                    signal.SIGSYS})
WAITED_SIGNALS = frozenset(signal.valid_signals()) - FAULTS - {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL,
                                                                 signal.SIGSTOP}


def log(message: str) -> None:
    print(f"[start] {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    log(f"WARNING: {message}")


# ---- starting ------------------------------------------------------------------------------------

def relay_limit_warnings(checks: str) -> None:
    """doctor's own checks, run in this interpreter: the thresholds and fixes live only in doctor.py."""
    try:
        spec = importlib.util.spec_from_file_location("doctor", DOCTOR)
        doctor = importlib.util.module_from_spec(spec)
        sys.modules["doctor"] = doctor  # its dataclasses look their module up there
        spec.loader.exec_module(doctor)
        lines = doctor.brief_lines(doctor.run_checks(doctor.parse_args(["--only", checks])))
    except Exception as error:  # a broken doctor costs its warnings, never the container
        warn(f"could not check the container's limits ({DOCTOR}: {error!r})")
        return
    for line in lines:
        warn(line)


def spawn(argv: list[str], cwd: str | None = None, stdin: bool = False, stop_requests: int | None = None) -> int:
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


class StopRequests:
    """JupyterLab's File > Shut Down, as a request for the container's orderly stop: the server (as the
    user) cannot signal the supervisor (root), so it writes a line to a pipe it got at its start
    (jupyter_work_first.py): `stop`, a tab, and what it had to close with work still running, if anything.
    A thread reads the line and wakes the main loop with a SIGTERM of the supervisor's own, which
    Signals.take knows by REQUESTED_BY."""

    LONGEST_LINE = 4096

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.requested_by: str | None = None
        self.left_running = ""  # what the service closed with work still running, in its words
        self.service = ""

    def listen(self, service: str) -> None:
        os.close(self.write_end)  # the service holds it now: the read ends when the service does
        self.service = service
        threading.Thread(target=self.read, args=(threading.main_thread().ident,), daemon=True).start()

    def read(self, main_thread: int) -> None:
        with os.fdopen(self.read_end, "rb") as pipe:
            line = pipe.readline(self.LONGEST_LINE)
        if line:  # not the end of the service's output: a request
            self.left_running = line.decode("utf-8", "replace").partition("\t")[2].strip()
            self.requested_by = self.service
            signal.pthread_kill(main_thread, signal.SIGTERM)


def start_services(settings: dict[str, Any], jupyter_arguments: list[str],
                   stop_requests: StopRequests) -> tuple[dict[int, str], bool]:
    """The services started, by PID, and whether every one of them could be started. JupyterLab may ask
    for the orderly stop through STOP_REQUESTS."""
    wanted = []
    if settings["ssh"]:
        wanted.append(("ssh", settings["ssh_command"], None))
    if settings["jupyter"]:
        wanted.append(("jupyter", [*settings["as_user"], *settings["jupyter_command"], *jupyter_arguments],
                       "/workspace"))
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
    with open(os.path.join(RUN_DIR, "services"), "w", encoding="utf-8") as file:  # the healthcheck's list
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
    with open(os.path.join(RUN_DIR, "started"), "w"):
        pass


def mark_stopping() -> None:
    """Tells the notebook kernels that the container is stopping: a kernel ends when its cell does, and
    JupyterLab starts no new one (kernel_stop.py, python-kernel). Made anew, never through a link a user
    left in the shared folder. Its folder (made at start-up) is writable by the supervisor's uid only, so
    no user's `touch` can keep kernels from starting."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(STOPPING)
        os.close(os.open(STOPPING, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except OSError as error:  # a read-only /run: kernels are still signalled, they only end less neatly
        warn(f"could not mark the container as stopping ({error}); notebook kernels may be restarted")


# ---- children and signals ------------------------------------------------------------------------

class Children:
    """Reaps every child (as a subreaper the supervisor inherits the orphans of what it started) and
    keeps the exit status of those it watches, as a shell reports it (128 + N for a death by signal N).
    The ends of orphans that may have been work lost are kept too, with their names (the last ORPHANS_KEPT
    that ended with a status other than 0, holders left out): the stop names the work that ended with a
    service rather than by the stop (stop_policy.lost_with_a_holder)."""

    ORPHANS_KEPT = 256

    def __init__(self) -> None:
        self.watched: set[int] = set()
        self.status: dict[int, int] = {}
        self.orphans_ended: collections.deque[stop_policy.Ended] = collections.deque(maxlen=self.ORPHANS_KEPT)

    def reap(self) -> list[int]:
        ended = []
        while True:
            try:
                # Peeked first (WNOWAIT): until it is reaped, the zombie's name is still in /proc.
                peeked = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return ended
            if peeked is None:
                return ended
            name = "" if peeked.si_pid in self.watched else process_table.read_name(peeked.si_pid)
            pid, status = os.waitpid(peeked.si_pid, os.WNOHANG)
            if pid == 0:
                return ended
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code
            if pid in self.watched:
                self.status[pid] = code
            elif code != 0 and not stop_policy.is_holder_by_name(name):  # only what could have been lost
                self.orphans_ended.append(stop_policy.Ended(pid, name, code, time.monotonic()))
            ended.append(pid)

    def status_of(self, pid: int) -> int:
        """PID's exit status, waiting for it to end if it has not yet."""
        while pid not in self.status:
            self.pause(POLL_S)
        return self.status[pid]

    def pause(self, seconds: float) -> None:
        """Sleeps SECONDS, reaping as children end (SIGCHLD is blocked: waited for, not handled)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if signal.sigtimedwait({signal.SIGCHLD}, left) is not None:
                self.reap()
        self.reap()


def describe(pids: list[int] | tuple[int, ...] | set[int], table: stop_policy.Table) -> str:
    shown = []
    for pid in list(pids)[:DESCRIBED_AT_MOST]:
        process = table.get(pid)
        command = (process.command if process else "") or process_table.read_command(pid) or \
            (process.name if process else "")
        shown.append(f"{pid}({command[:60]})")
    more = len(pids) - len(shown)
    return " ".join(shown) + (f" and {more} more" if more > 0 else "")


def still_alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if process_table.is_alive(pid)}


# ---- the stop ------------------------------------------------------------------------------------

class Stop:
    """The three steps; clean only when everything signalled exited in time and every signal was sent."""

    def __init__(self, container: stop_policy.Container, children: Children, timeout_s: int,
                 command: int | None = None) -> None:
        self.container, self.children, self.timeout_s, self.command = container, children, timeout_s, command
        self.clean = True
        self.work_ended = True
        self.told: set[int] = set()  # the work that got its SIGTERM, and the tops an earlier plan handled
        self.service_ended_at: float | None = None  # a service ended on its own: what ended with it is named
        self.left_by_the_service = ""  # what a service that asked for the stop had to close with work running

    def stop_user_work(self) -> None:
        """Steps 1 and 2. Each pass checks only the work found alive at the last; after a pass in which
        some of it exited (at most once a second), the table is read again for new tops."""
        deadline = time.monotonic() + self.timeout_s
        table = process_table.snapshot(self.container)
        plan = stop_policy.plan_signals(table, self.container)
        work = set(plan.work)
        if not work:
            return
        failed = process_table.signal_each(signal.SIGTERM, plan.signal)  # first, then the line that says so
        log(f"stopping: SIGTERM to your work first, waiting up to {self.timeout_s} s for it: "
            f"{describe([*plan.signal, *plan.readers], table)}")
        known, readers, signalled = set(plan.tops), dict(plan.readers), set(plan.signal)
        writers_gone_at: dict[int, float] = {}
        scanned_at, exited_since_scan, pause_s = time.monotonic(), False, FIRST_POLL_S
        while work and time.monotonic() < deadline:
            self.children.pause(pause_s)
            pause_s = min(POLL_S, pause_s * 2)
            alive = still_alive(work)
            now = time.monotonic()
            exited_since_scan = exited_since_scan or len(alive) < len(work)
            if (exited_since_scan and now - scanned_at >= RESCAN_EVERY_S) or not alive:
                scanned_at, exited_since_scan = now, False
                table = process_table.snapshot(self.container)
                plan, fresh = stop_policy.rescan(table, self.container, frozenset(known), signalled)
                alive = set(plan.work)
                known |= plan.tops
                readers.update(plan.readers)
                if fresh:
                    failed += process_table.signal_each(signal.SIGTERM, fresh)
                    log("stopping: SIGTERM to work whose launcher exited or that started since: "
                        f"{describe(fresh, table)}")
                    signalled |= set(fresh)
            drained = [pid for pid in stop_policy.readers_to_signal(readers, alive, writers_gone_at, now)
                       if pid not in signalled]
            if drained:
                failed += process_table.signal_each(signal.SIGTERM, drained)
                log(f"stopping: SIGTERM to readers still running {stop_policy.READER_DRAIN_S:g} s after "
                    f"their input ended: {describe(drained, table)}")
                signalled |= set(drained)
            work = alive
        self.told = signalled | (known - readers.keys())  # a reader left to drain got no SIGTERM yet
        if failed:
            self.clean = False
            warn(f"could not signal {describe(failed, table)}")
        if work:
            self.clean = self.work_ended = False
            warn(f"still running after {self.timeout_s} s, stopped with the services now: {describe(work, table)}")
        else:
            log("your processes have exited")

    def stop_work_still_running(self) -> None:
        """Step 3's start: the work below what ignored its SIGTERM gets step 1's signal now, tops first,
        and WORK_FIRST_S to end, before everything else is signalled at once."""
        deadline = time.monotonic() + WORK_FIRST_S
        # Planned below what ignored steps 1 and 2 only: what this step signals is not passed over in
        # turn while it saves, so its DataLoader workers wait until it has exited.
        ignored = frozenset(self.told)
        waiting: set[int] = set()
        while time.monotonic() < deadline:
            table = process_table.snapshot(self.container)
            fresh = [pid for pid in stop_policy.plan_signals(table, self.container, told=ignored).signal
                     if pid not in self.told]
            if fresh:
                process_table.signal_each(signal.SIGTERM, fresh)
                log(f"stopping: SIGTERM to work below what is still running, tops first: {describe(fresh, table)}")
                self.told |= set(fresh)
                waiting |= set(fresh)
            waiting = still_alive(waiting)
            if not waiting:
                return
            self.children.pause(POLL_S)

    def stop_everything_left(self) -> None:
        """Step 3: sshd and its sessions, tmux, shells, JupyterLab. Waits for everything it signalled,
        not only for its own children, and SIGKILLs what outlives SERVICES_STOP_S."""
        table = process_table.snapshot(self.container, pipes=False)
        targets = stop_policy.everything_left(table, self.container)
        self.told |= set(targets)  # alive when step 3 looked: whatever ended them, the service's end did not
        failed = process_table.signal_each(signal.SIGTERM, targets)
        # An interactive shell ignores SIGTERM; one whose terminal is held outside (`docker exec -it`)
        # gets no SIGHUP from it either.
        process_table.signal_each(signal.SIGHUP, stop_policy.shells(table, targets))
        deadline = time.monotonic() + SERVICES_STOP_S
        left, pause_s = still_alive(set(targets)), FIRST_POLL_S
        while left and time.monotonic() < deadline:
            self.children.pause(pause_s)
            pause_s = min(POLL_S, pause_s * 2)
            left = still_alive(left)
        if failed or left:
            self.clean = False
            warn(f"still running {SERVICES_STOP_S} s after the services' SIGTERM, SIGKILLed: "
                 f"{describe(sorted(left | set(failed)), table)}")
            process_table.signal_each(signal.SIGKILL, sorted(left))
        self.children.reap()

    def wait_for_the_command(self) -> None:
        """A command whose work has ended ends by itself (`bash -c 'torchrun ... | tee log'` returns its
        reader's 0 a moment later): its own status, not step 3's SIGTERM, is the container's."""
        if self.command is None or not self.work_ended:
            return
        deadline = time.monotonic() + COMMAND_ENDS_S
        while self.command not in self.children.status and time.monotonic() < deadline:
            self.children.pause(FIRST_POLL_S)

    def name_the_work_lost_with_the_service(self) -> None:
        """Work that a service's end took away (a JupyterLab terminal's job killed by the hang-up when the
        server crashed) ended before the stop could ask it to save, and work a service that asked for the
        stop had to close while it still ran: never a clean stop."""
        if self.left_by_the_service:
            self.clean = False
            warn(f"JupyterLab closed these with their work still running after {self.timeout_s} s: "
                 f"{self.left_by_the_service}")
        if self.service_ended_at is None:
            return
        lost = stop_policy.lost_with_a_holder(list(self.children.orphans_ended), self.service_ended_at,
                                              self.told)
        if lost:
            self.clean = False
            shown = " ".join(f"{process.pid}({process.name}, status {process.status})"
                             for process in lost[:DESCRIBED_AT_MOST])
            more = f" and {len(lost) - DESCRIBED_AT_MOST} more" if len(lost) > DESCRIBED_AT_MOST else ""
            warn(f"ended with the service, before the stop could ask it to save: {shown}{more}")

    def run(self) -> None:
        # The stop signals stay blocked: a second `docker stop` does not cut the orderly stop short.
        mark_stopping()
        self.stop_user_work()
        self.wait_for_the_command()
        if not self.work_ended:
            self.stop_work_still_running()
        self.stop_everything_left()
        self.name_the_work_lost_with_the_service()
        if self.clean:
            log("stopped cleanly")
        else:
            warn("stopped, but not cleanly: what the lines above name did not end in time and got SIGTERM late")


# ---- telling a hub that work runs ----------------------------------------------------------------

class HubActivity:
    """Under a hub, every JUPYTERHUB_ACTIVITY_INTERVAL seconds (the variable jupyterhub-singleuser reads
    too): when some of the user's work was running at the last look and still is (so a healthcheck or a
    `docker exec ls` does not count), posts now as the server's last activity to the hub's activity API,
    with the server's own token. jupyterhub-singleuser reports only what JupyterLab itself sees."""

    def __init__(self, container: stop_policy.Container) -> None:
        self.container = container
        self.interval_s = self.read_interval()
        self.url = f"{os.environ['JUPYTERHUB_API_URL']}/users/{os.environ.get('JUPYTERHUB_USER', '')}/activity"
        self.due = time.monotonic() + self.interval_s
        self.seen: set[int] = set()

    @staticmethod
    def read_interval() -> float:
        value = os.environ.get("JUPYTERHUB_ACTIVITY_INTERVAL", "300")
        try:
            if 1 <= float(value) <= 86400:
                return float(value)
        except ValueError:
            pass
        warn(f"JUPYTERHUB_ACTIVITY_INTERVAL='{value}' is not a number of seconds from 1 to 86400: "
             "reporting your running work to the hub every 300 s")
        return 300.0

    def seconds_left(self) -> float:
        return max(0.0, self.due - time.monotonic())

    def look(self) -> None:
        self.due = time.monotonic() + self.interval_s
        work = stop_policy.user_work(process_table.snapshot(self.container, pipes=False), self.container)
        if work & self.seen:
            threading.Thread(target=self.post, daemon=True).start()  # a slow hub never delays a stop
        self.seen = work

    def post(self) -> None:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {"last_activity": now, "servers": {os.environ.get("JUPYTERHUB_SERVER_NAME", ""): {"last_activity": now}}}
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST", headers={
            "Authorization": f"token {os.environ['JUPYTERHUB_API_TOKEN']}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except OSError as error:
            warn(f"could not tell the hub that your work runs ({self.url}: {error}); "
                 "its idle culler may stop this server")


# ---- the main loop -------------------------------------------------------------------------------

def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a realtime signal past SIGRTMIN
        return f"signal {number}"


class Signals:
    """What the signals sent to the supervisor mean here: the runtime's stop, ignored, or passed on."""

    def __init__(self, container: stop_policy.Container, command_mode: bool, requests: StopRequests) -> None:
        self.container, self.command_mode, self.requests = container, command_mode, requests
        self.asked_by: str | None = None  # the service that asked for the stop, if one did

    def take(self, info: signal.struct_siginfo) -> bool:
        """Acts on one signal; True when it stops the container."""
        number = info.si_signo
        meaning = stop_policy.signal_meaning(number, self.command_mode)
        if meaning == "ignore":
            return False
        if stop_policy.asked_by_a_service(number, info.si_pid, self.container.supervisor,
                                          self.requests.requested_by):
            self.asked_by = self.requests.requested_by
            log(f"{self.asked_by} asked to shut down (JupyterLab's File > Shut Down): stopping as docker stop "
                "does, your work first")
            return True
        descends = not self.container.own_pid_namespace and process_table.descends_from(info.si_pid,
                                                                                        self.container.supervisor)
        if stop_policy.sent_from_inside(info.si_code, info.si_pid, os.getppid(), self.container.own_pid_namespace,
                                        descends):
            warn(f"ignored {signal_name(number)} from process {info.si_pid} "
                 f"({process_table.read_command(info.si_pid)[:60] or 'gone'}) of this container: only the "
                 "container's runtime stops it (docker stop)")
            return False
        if meaning == "pass on":
            table = process_table.snapshot(self.container)
            targets = stop_policy.plan_signals(table, self.container).signal
            process_table.signal_each(signal.Signals(number), targets)
            log(f"passed {signal_name(number)} on to your work: {describe(targets, table) or 'none is running'}")
            return False
        if number not in (signal.SIGTERM, signal.SIGINT):
            log(f"{signal_name(number)} received: stopping as docker stop does")
        return True


def wait_for_event(children: Children, watched: set[int], activity: HubActivity | None,
                   signals: Signals) -> tuple[str, int]:
    """Blocks until a signal that stops the container ("stop", its number) or the end of a watched child
    ("ended", its PID)."""
    while True:
        for pid in children.reap():
            if pid in watched:
                return "ended", pid
        if activity is None:
            info = signal.sigwaitinfo(WAITED_SIGNALS)
        else:
            info = signal.sigtimedwait(WAITED_SIGNALS, activity.seconds_left())
            if info is None:
                activity.look()
                continue
        if info.si_signo != signal.SIGCHLD and signals.take(info):
            return "stop", info.si_signo


def stop_what_the_command_left(stop: Stop, container: stop_policy.Container, status: int) -> None:
    """Work the command started in the background and left running would be SIGKILLed with the
    container, mid-save and without a word: it gets the stop `docker stop` gives."""
    table = process_table.snapshot(container, pipes=False)
    left = stop_policy.user_work(table, container)
    if left:
        log(f"the command exited (status {status}) and left work running; stopping it as docker stop does: "
            f"{describe(sorted(left), table)}")
        stop.run()


def cannot_run(command: str, error: OSError) -> int:
    print(f"[start] ERROR: cannot run {command}: {error.strerror}; check the command's name and PATH",
          file=sys.stderr, flush=True)
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
            os.write(2, f"[start] ERROR: cannot run {name}: {error.strerror}; check the command's name and "
                        f"PATH\n".encode())
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
    with open(settings_path, encoding="utf-8") as file:
        settings = json.load(file)
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
    container = stop_policy.Container(os.getpid(), frozenset(holders), settings["own_pid_namespace"])
    stop = Stop(container, children, settings["stop_timeout_s"], command)
    if not started:
        stop.run()
        return 1
    mark_started()
    # Beside the services, which take seconds to answer: the check costs them no time.
    relay_limit_warnings(settings["limit_checks"])
    activity = None
    if settings["spawned_by_hub"] and not command_mode and os.environ.get("JUPYTERHUB_API_URL"):
        activity = HubActivity(container)
    signals = Signals(container, command_mode, stop_requests)
    event, which = wait_for_event(children, set(services), activity, signals)
    if command:
        if event == "stop":
            stop.run()
        else:
            stop_what_the_command_left(stop, container, children.status[command])
        # The command's exit status is the container's: torchrun's, 0 when its workers saved.
        return children.status_of(command)
    if event == "stop":
        stop.left_by_the_service = stop_requests.left_running if signals.asked_by else ""
        stop.run()
        if signals.asked_by is None:
            return 0
        status = 0  # a service shut down on purpose, with the user's work stopped first
    else:
        status = children.status[which]
        warn(f"a service exited on its own (status {status}): stopping your work, then the other services, "
             "so the restart policy can act")
        stop.service_ended_at = time.monotonic() - SERVICE_END_SEEN_WITHIN_S
        stop.run()
    # A hub's server that ends with 0 was shut down on purpose (File > Shut Down, the hub's idle culler):
    # the hub counts the container's exit, and 0 is the truth. Elsewhere the restart policy needs non-zero.
    if status == 0 and settings["spawned_by_hub"]:
        return 0
    return status or 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
