"""process_table.snapshot() on this machine's own /proc, over processes the test starts: what the stop
policy is given of each (its parent, its name as the kernel keeps it, its executable where the name is a
holder's, its stdin where it is a top of the work).

    make test-unit PYTEST_ARGS=tests/unit/test_process_table.py
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import process_kinds
import process_table
import stop_policy

# The test is the supervisor; it has no PID namespace of its own, so only its descendants are the container.
CONTAINER = process_kinds.Container(os.getpid(), own_pid_namespace=False)
# Sets its own name (as setproctitle does) to NAME, says so, then waits on its stdin.
RENAMED = "import sys; open('/proc/self/comm', 'w').write(sys.argv[1]); print('ready', flush=True); sys.stdin.read()"


def started(*argv: str) -> subprocess.Popen:
    """ARGV, running and ready; with SIGHUP at its default, even when the tests run under `nohup`."""
    process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    assert process.stdout.readline() == "ready\n"
    return process


def ended(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.kill()
        process.wait(timeout=10)


def test_a_name_with_spaces_and_a_parenthesis_is_read_whole_with_its_parent():
    child = started(sys.executable, "-c", RENAMED, "x) (y z")
    try:
        row = process_table.snapshot(CONTAINER)[child.pid]
        assert (row.parent, row.name) == (os.getpid(), "x) (y z")
    finally:
        ended(child)


def test_a_program_named_like_a_holder_is_told_by_its_executable_and_stays_work():
    child = started(sys.executable, "-c", RENAMED, "bash")
    try:
        table = process_table.snapshot(CONTAINER)
        assert table[child.pid].program.startswith("python")
        assert child.pid in stop_policy.user_work(table, CONTAINER)
    finally:
        ended(child)


def test_a_top_reading_a_pipe_from_other_work_is_a_reader_and_an_exited_one_is_not_in_the_table():
    writer = subprocess.Popen(["sh", "-c", "echo ready; exec tail -f /dev/null"], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "ready\n"
    reader = subprocess.Popen(["cat"], stdin=writer.stdout, stdout=subprocess.DEVNULL)
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    try:
        deadline = time.monotonic() + 10
        while (table := process_table.snapshot(CONTAINER))[writer.pid].name != "tail":  # sh's exec is done
            assert time.monotonic() < deadline, table[writer.pid]
        assert table[reader.pid].stdin.startswith("pipe:[")
        assert table[reader.pid].stdin in table[writer.pid].outputs
        assert dict(stop_policy.look(table, CONTAINER).readers).keys() == {reader.pid}
        assert gone.pid not in table
    finally:
        ended(reader, writer)


# Holds a pseudo-terminal whose other end runs `sleep` in a session of its own, as script(1) does.
PTY_HOST = ("import os, pty, sys\n"
            "pid, master = pty.fork()\n"
            "if pid == 0:\n"
            "    os.execvp('sleep', ['sleep', '600'])\n"
            "print(pid, flush=True); sys.stdin.read()")


def test_a_process_that_holds_a_terminal_with_a_session_in_it_is_seen_by_what_it_does():
    host = subprocess.Popen([sys.executable, "-c", PTY_HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        in_terminal = int(host.stdout.readline())
        deadline = time.monotonic() + 10
        while (table := process_table.snapshot(CONTAINER)).get(in_terminal, table[host.pid]).name != "sleep":
            assert time.monotonic() < deadline, table.get(in_terminal)
        assert table[host.pid].holds_terminal and table[host.pid].program is None  # no holder's name
        assert not table[in_terminal].holds_terminal
        assert not table[os.getpid()].holds_terminal
    finally:
        ended(host)


# Handles SIGTERM by saying so and exiting 0, ignores SIGHUP (as `nohup` leaves a job), then waits.
SAVES_ON_SIGTERM = ("import signal, sys\n"
                    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
                    "signal.signal(signal.SIGTERM, lambda *_: (print('saved', flush=True), sys.exit(0)))\n"
                    "print('ready', flush=True)\n"
                    "signal.pause()\n")


def test_what_a_process_handles_and_ignores_is_read_from_its_masks():
    worker, plain = started(sys.executable, "-c", SAVES_ON_SIGTERM), started(sys.executable, "-c", RENAMED, "plain")
    try:
        assert process_table.handles(worker.pid, signal.SIGTERM) and process_table.ignores(worker.pid, signal.SIGHUP)
        assert not process_table.handles(plain.pid, signal.SIGTERM) and not process_table.ignores(plain.pid, signal.SIGHUP)
    finally:
        ended(worker, plain)
    assert not process_table.handles(worker.pid, signal.SIGTERM), "a process gone handles nothing"


def test_a_sigterm_reaches_a_job_stopped_with_ctrl_z_and_a_gone_pid_is_no_failure():
    worker = started(sys.executable, "-c", SAVES_ON_SIGTERM)
    os.kill(worker.pid, signal.SIGSTOP)
    assert process_table.signal_each(signal.SIGTERM, [worker.pid]) == []
    assert worker.wait(timeout=30) == 0 and worker.stdout.readline() == "saved\n"
    assert process_table.signal_each(signal.SIGTERM, [worker.pid]) == [], "reaped: gone, not a failure"


# A Jupyter server, as far as the table can tell: a Python program run as `jupyter-lab`, which starts a
# kernel that is not Python (here `tail`, handed a kernel's connection file as IRkernel and xeus are) with a
# cell's program below it, and waits. The kernel is in a session of its own, as jupyter_client starts one,
# and writes nowhere the test reads: tail, given two files, prints a header for each, which once came
# before the "ready" line.
SERVER = """
import os, subprocess, sys
kernel = subprocess.Popen(["sh", "-c", "python3 -c 'import time; time.sleep(600)' & exec tail -f /dev/null \\"$0\\"",
                           os.environ["CONNECTION_FILE"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
print("ready", kernel.pid, flush=True)
sys.stdin.read()
"""


def test_a_kernel_of_any_language_is_told_by_its_connection_file_and_its_cells_work_is_signalled_first(tmp_path):
    runtime = tmp_path / "jupyter" / "runtime"
    runtime.mkdir(parents=True)
    (tmp_path / "jupyter-lab").write_text(SERVER)
    server = subprocess.Popen([sys.executable, str(tmp_path / "jupyter-lab")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, CONNECTION_FILE=str(runtime / "kernel-5f3c-e1.json")))
    kernel = 0
    try:
        kernel = int(server.stdout.readline().split()[1])
        deadline = time.monotonic() + 10
        while True:  # sh's exec is done, and the cell's program runs below the kernel, exec'd too
            table = process_table.snapshot(CONTAINER)
            cells = [pid for pid, row in table.items() if row.parent == kernel and row.name.startswith("python")]
            # In the middle of an exec the new name shows before the new command line: wait for both.
            if table[kernel].name == "tail" and table[kernel].command and cells:
                break
            assert time.monotonic() < deadline, table.get(kernel)
        assert process_kinds.is_kernel(table[kernel]) and kernel not in stop_policy.user_work(table, CONTAINER)
        # Among whatever else this test process runs (multiprocessing's resource tracker, say).
        signalled = stop_policy.look(table, CONTAINER).signal
        assert set(cells) <= set(signalled) and kernel not in signalled, (cells, kernel, signalled)
    finally:
        server.kill()
        if kernel:  # the kernel and its cell's program: the process group the kernel's session began
            os.killpg(kernel, signal.SIGKILL)
        server.wait(timeout=10)


# A kernel (its command line names ipykernel_launcher) whose loop takes its workers from multiprocessing's
# fork server, as the trainer's DataLoader does: the server's forks run the server's command line under
# the name a DataLoader worker gives itself, and are read so that the stop sees they are the kernel's.
KERNEL_WITH_A_FORK_SERVER = """
import multiprocessing, sys

def worker(ready):
    open('/proc/self/comm', 'w').write('pt_data_worker')
    ready.set()
    __import__('time').sleep(600)

if __name__ == '__main__':
    context = multiprocessing.get_context('forkserver')
    ready = context.Event()
    process = context.Process(target=worker, args=(ready,), daemon=True)
    process.start()
    ready.wait(30)
    print('ready', process.pid, flush=True)
    sys.stdin.read()
"""


def test_a_kernels_fork_server_and_its_workers_are_read_as_the_kernels_own(tmp_path):
    launcher = tmp_path / "ipykernel_launcher.py"
    launcher.write_text(KERNEL_WITH_A_FORK_SERVER)
    kernel = subprocess.Popen([sys.executable, str(launcher)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        worker = int(kernel.stdout.readline().split()[1])
        table = process_table.snapshot(CONTAINER)
        server = table[worker].parent
        assert table[server].parent == kernel.pid and table[worker].name == "pt_data_worker"
        assert table[worker].command == table[server].command, "the worker's command line was not read"
        below = {pid for pid, row in table.items() if stop_policy.descends_from(table, pid, kernel.pid)}
        assert below >= {server, worker} and not below & stop_policy.user_work(table, CONTAINER)
        assert kernel.pid in stop_policy.look(table, CONTAINER).signal
    finally:
        ended(kernel)
