"""The stop's executor: it snapshots the process table, asks stop_policy.py what to signal, signals,
waits and logs, in the phases docs/how-it-runs.md names ("The stop's rules"). It decides nothing itself.

    mark_stopping        the kernels end after their cell, JupyterLab starts no new one
    stop_user_work       steps 1 and 2: SIGTERM to the tops of the work, looking again as work exits
    wait_for_the_command a command whose work has ended ends by itself
    stop_work_still_running  step 3's start: below what ignored its SIGTERM, tops first
    stop_everything_left step 3: every process left, the services included; SIGKILL after SERVICES_STOP_S
    name_the_work_lost   what a service's end took away, and what JupyterLab closed with work running

It is running already when the stop comes, so it forks nothing between the signal and the exit:
thousands of processes and a full PID table do not slow it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import time

import process_kinds
import process_table
import stop_policy
import stop_verdict
from children import FIRST_POLL_S, POLL_S, Children
from oom_watch import OomWatch
from run_folder import LOST_DIR, STOPPING, log, warn

RESCAN_EVERY_S = 1.0    # at most this often, after some of the work exited, the table is read again
# Step 3 first gives the work still running, top first, this long to end before everything else gets
# SIGTERM: a trainer below a launcher that ignored step 1 saves before its DataLoader workers are signalled.
# compose's 30 s grace less the default STOP_TIMEOUT of 25 s leaves about 5 s for all of step 3.
WORK_FIRST_S = 3
COMMAND_ENDS_S = 2      # how long a command whose work has ended may take to end by itself
DESCRIBED_AT_MOST = 8
REPORTS_READ = 64       # reports of lost work read at most (run_folder.LOST_DIR), each its first line
REPORT_BYTES = 512


def describe(pids: list[int] | tuple[int, ...] | set[int], table: process_kinds.Table) -> str:
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


def read_reports(since: float) -> dict[int, str]:
    """The lines programs left in LOST_DIR at or after SINCE (time.time()): regular files named by a PID,
    the first line of each, at most REPORTS_READ of them; a link or anything odd is passed over."""
    reports: dict[int, str] = {}
    with contextlib.suppress(OSError):
        names = sorted(name for name in os.listdir(LOST_DIR) if name.isdigit())[:REPORTS_READ]
        for name in names:
            with contextlib.suppress(OSError):
                descriptor = os.open(os.path.join(LOST_DIR, name),
                                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not hold it
                with os.fdopen(descriptor, "rb") as file:
                    status = os.fstat(file.fileno())
                    if stat.S_ISREG(status.st_mode) and status.st_mtime >= since:
                        line = file.read(REPORT_BYTES).decode("utf-8", "replace").splitlines()[:1]
                        reports[int(name)] = "".join(line).strip() or "(an empty report)"
    return reports


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


class Stop:
    """The three steps; clean only when everything signalled exited in time and every signal was sent.
    progress: how far the stop has come (stop_policy.Progress), the policy's to read and advance."""

    def __init__(self, container: process_kinds.Container, children: Children, timeout_s: int,
                 command: int | None = None, oom: OomWatch | None = None) -> None:
        self.container, self.children, self.timeout_s, self.command = container, children, timeout_s, command
        self.oom = oom
        self.signalled: dict[int, stop_verdict.Signalled] = {}  # the work sent SIGTERM, as it was when sent
        self.command_ran_into_the_stop = False  # the command was running when the stop began
        self.started_at = 0.0  # when run() began the stop: older reports of lost work are not its own
        self.clean = True
        self.work_ended = True
        self.progress = stop_policy.Progress()
        self.service_ended_at: float | None = None  # a service ended on its own: what ended with it is named
        self.left_by_the_service = ""  # what a service that asked for the stop had to close with work running

    def signal_work(self, pids: list[int] | tuple[int, ...], table: process_kinds.Table) -> list[int]:
        """SIGTERM to PIDS as work; how each took SIGTERM is read first, and its exit status kept where the
        supervisor reaps it, for the verdict (stop_verdict.py). Returns those that could not be signalled."""
        bit = 1 << (signal.SIGTERM - 1)
        parents = {process.parent for process in table.values()}
        for pid in pids:
            if pid not in self.signalled:
                handled, ignored = process_table.signal_masks(pid)
                process = table.get(pid)
                counts = process is not None and process_kinds.is_python(process) \
                    and not process_kinds.is_kernel(process) and pid not in parents
                self.signalled[pid] = stop_verdict.Signalled(pid, describe([pid], table), counts,
                                                             bool(handled & bit), bool(ignored & bit))
        self.children.kept.update(pids)
        return process_table.signal_each(signal.SIGTERM, pids)

    def stop_user_work(self) -> None:
        """Steps 1 and 2. Each pause checks only the work found alive at the last; after one in which some
        of it exited (at most once a second), the table is read again for new tops."""
        deadline = time.monotonic() + self.timeout_s
        table = process_table.snapshot(self.container)
        plan = stop_policy.look(table, self.container)
        work, progress = set(plan.work), plan.progress
        if not work:
            return
        failed = self.signal_work(plan.signal, table)  # first, then the line that says so
        # A pipeline's reader (`| tee`) is not signalled yet: named apart, as what waits for its input to end.
        readers = f"; left to read to the end of their input: {describe(list(plan.readers), table)}" \
            if plan.readers else ""
        log(f"stopping: SIGTERM to your work first, waiting up to {self.timeout_s} s for it: "
            f"{describe(plan.signal, table)}{readers}")
        scanned_at, exited_since_scan = time.monotonic(), False
        for _ in self.children.pauses(deadline):
            alive = still_alive(work)
            now = time.monotonic()
            exited_since_scan = exited_since_scan or len(alive) < len(work)
            if (exited_since_scan and now - scanned_at >= RESCAN_EVERY_S) or not alive:
                scanned_at, exited_since_scan = now, False
                table = process_table.snapshot(self.container)
                plan = stop_policy.look(table, self.container, progress)
                alive, progress = set(plan.work), plan.progress
                if plan.signal:
                    failed += self.signal_work(plan.signal, table)
                    log("stopping: SIGTERM to work whose launcher exited or that started since: "
                        f"{describe(plan.signal, table)}")
            drained, progress = stop_policy.drain(progress, alive, now)
            if drained:
                failed += process_table.signal_each(signal.SIGTERM, drained)
                log(f"stopping: SIGTERM to readers still running {stop_policy.READER_DRAIN_S:g} s after "
                    f"their input ended: {describe(drained, table)}")
            work = alive
            if not work:
                break
        self.progress = progress
        if failed:
            self.clean = False
            warn(f"could not signal {describe(failed, table)}")
        if work:
            self.clean = self.work_ended = False
            warn(f"still running after {self.timeout_s} s, stopped with the services now: "
                 f"{describe(work, table)}")
        else:
            log("your processes have exited")

    def stop_work_still_running(self) -> None:
        """Step 3's start: the work below what ignored its SIGTERM gets step 1's signal now, tops first,
        and WORK_FIRST_S to end, before everything else is signalled at once. What this step signals is
        not planned below in turn while it saves, so its DataLoader workers wait until it has exited."""
        deadline = time.monotonic() + WORK_FIRST_S
        progress = self.progress.past_the_timeout()
        waiting: set[int] = set()
        while time.monotonic() < deadline:
            table = process_table.snapshot(self.container)
            plan = stop_policy.look(table, self.container, progress)
            progress = plan.progress
            if plan.signal:
                self.signal_work(plan.signal, table)
                log(f"stopping: SIGTERM to work below what is still running, tops first: "
                    f"{describe(plan.signal, table)}")
                waiting |= set(plan.signal)
            waiting = still_alive(waiting)
            if not waiting:
                break
            self.children.pause(POLL_S)
        self.progress = progress

    def stop_everything_left(self) -> None:
        """Step 3: sshd and its sessions, tmux, shells, JupyterLab. Waits for everything it signalled,
        not only for its own children, and SIGKILLs what outlives stop_policy.SERVICES_STOP_S."""
        table = process_table.snapshot(self.container, pipes=False)
        targets = stop_policy.everything_left(table, self.container)
        # Alive when step 3 looked: whatever ended them, the service's end did not.
        self.progress = self.progress.with_signalled(targets)
        failed = process_table.signal_each(signal.SIGTERM, targets)
        # An interactive shell ignores SIGTERM; one whose terminal is held outside (`docker exec -it`)
        # gets no SIGHUP from it either.
        process_table.signal_each(signal.SIGHUP, stop_policy.shells(table, targets))
        left = still_alive(set(targets))
        if left:
            for _ in self.children.pauses(time.monotonic() + stop_policy.SERVICES_STOP_S):
                left = still_alive(left)
                if not left:
                    break
        if failed or left:
            self.clean = False
            warn(f"still running {stop_policy.SERVICES_STOP_S} s after the services' SIGTERM, SIGKILLed: "
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
            self.children.pause(FIRST_POLL_S)  # a pipeline's reader returns within milliseconds

    def name_the_work_lost(self) -> None:
        """Work that a service's end took away (a JupyterLab terminal's job killed by the hang-up when the
        server crashed) ended before the stop could ask it to save, and work a service that asked for the
        stop had to close while it still ran: never a clean stop."""
        if self.left_by_the_service:
            self.clean = False
            warn(f"JupyterLab closed these with their work still running after {self.timeout_s} s: "
                 f"{self.left_by_the_service}")
        if self.service_ended_at is None:
            return
        lost = stop_verdict.lost_with_a_holder(list(self.children.orphans_ended), self.service_ended_at,
                                              self.progress.told)
        if lost:
            self.clean = False
            shown = " ".join(f"{process.pid}({process.name}, status {process.status})"
                             for process in lost[:DESCRIBED_AT_MOST])
            more = f" and {len(lost) - DESCRIBED_AT_MOST} more" if len(lost) > DESCRIBED_AT_MOST else ""
            warn(f"ended with the service, before the stop could ask it to save: {shown}{more}")

    def name_the_work_unsaved(self) -> None:
        """What the stop ended unsaved (stop_verdict.unsaved), the command's failure, and the work the
        kernel's out-of-memory killer ended while the container ran: never a clean stop."""
        command = self.children.status.get(self.command) if self.command_ran_into_the_stop else None
        lost = stop_verdict.unsaved(self.signalled, self.children.status)
        lost += stop_verdict.reported(read_reports(self.started_at))
        if self.command not in self.signalled and stop_verdict.command_failed(command):
            lost.append(f"the command {self.command} exited with status {command}")
        if lost:
            self.clean = False
            more = f"; and {len(lost) - DESCRIBED_AT_MOST} more" if len(lost) > DESCRIBED_AT_MOST else ""
            warn(f"ended without saving: {'; '.join(lost[:DESCRIBED_AT_MOST])}{more}")
        if self.oom is None:
            return
        self.oom.look(final=True)  # a kill during the stop itself, and one not yet told
        if self.oom.killed:
            self.clean = False
            killed = f"{self.oom.killed} process{'es' if self.oom.killed > 1 else ''}"
            warn(f"the kernel's out-of-memory killer ended {killed} of this container while it ran, unsaved: "
                 f"{self.oom.named}")

    def run(self) -> None:
        # The stop signals stay blocked: a second `docker stop` does not cut the orderly stop short.
        self.command_ran_into_the_stop = self.command is not None and self.command not in self.children.status
        self.started_at = time.time() - 1  # a report's time, as the file system keeps it, may lag a little
        mark_stopping()
        self.stop_user_work()
        self.wait_for_the_command()
        if not self.work_ended:
            self.stop_work_still_running()
        self.stop_everything_left()
        self.name_the_work_lost()
        self.name_the_work_unsaved()
        if self.clean:
            log("stopped cleanly")
        else:
            warn("stopped, but not cleanly: the lines above name what ended late or unsaved")
