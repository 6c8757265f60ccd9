"""A stop's progress from look to look (stop_policy.look, drain, Progress.past_the_timeout) and
JupyterLab's own closes (terminal_close, kernel_close), decided on process tables written by hand. The
rules of a single look are in test_stop_policy.py; the real stops in tests/image/test_stop*.py.

    make test-unit PYTEST_ARGS=tests/unit/test_stop_progress.py
"""
from __future__ import annotations

from close_policy import kernel_close, terminal_close
from process_kinds import Container, Process
from stop_policy import READER_DRAIN_S, Progress, drain, look
from stop_verdict import Ended, lost_with_a_holder, may_have_been_lost
from tests.unit.helpers.process_tables import CONTAINER, KERNEL, SUPERVISOR, TORCHRUN, python, shell, table


def test_each_look_signals_only_what_no_earlier_look_did_and_never_a_known_top_itself():
    # ssh's shell (12) runs torchrun (13) with two workers (14, 15); rank 15 exits 1 on its SIGTERM and
    # torchrun --max-restarts starts a new pair (24, 25) under the same agent.
    first = look(table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13), python(15, 13)),
                 CONTAINER)
    assert first.signal == (14, 15) and first.progress.tops == {13} and first.progress.signalled == {14, 15}
    again = look(table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13)), CONTAINER,
                 first.progress)
    assert again.signal == () and again.progress == first.progress
    between = look(table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun")), CONTAINER, again.progress)
    assert between.signal == (), "torchrun between two restarts waits for its workers: never signalled itself"
    restarted = look(table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(24, 13), python(25, 13)),
                     CONTAINER, between.progress)
    assert restarted.signal == (24, 25) and restarted.progress.signalled == {14, 15, 24, 25}
    assert restarted.progress.told == {13, 14, 15, 24, 25}


def test_a_launcher_that_died_leaves_its_trainer_a_new_top_told_at_the_next_look():
    first = look(table(shell(12, 10), Process(13, 12, "flock", "flock"), python(14, 13)), CONTAINER)
    assert first.signal == (13,)
    orphaned = look(table(shell(12, 10), python(14, SUPERVISOR), python(15, 14)), CONTAINER, first.progress)
    assert orphaned.signal == (14,) and orphaned.tops == {14}, "not its DataLoader worker (15)"


def test_a_reader_is_drained_once_and_told_only_after_its_drain():
    stages = table(shell(100, SUPERVISOR), python(101, 100, outputs=frozenset({"pipe:[1]"})),
                   Process(102, 100, "tee", "tee", stdin="pipe:[1]"))
    plan = look(stages, CONTAINER)
    assert plan.signal == (101,) and plan.progress.readers == {102: {101}}
    assert 102 not in plan.progress.told, "a reader left to drain has not been told"
    due, progress = drain(plan.progress, alive={102}, now=50.0)
    assert due == [] and progress.writers_gone_at == {102: 50.0}
    assert plan.progress.writers_gone_at == {}, "the progress a look returned is never changed in place"
    due, progress = drain(progress, alive={102}, now=50.0 + READER_DRAIN_S)
    assert due == [102] and 102 in progress.told
    assert drain(progress, alive={102}, now=60.0 + READER_DRAIN_S)[0] == []
    assert look(table(shell(100, SUPERVISOR), Process(102, 100, "tee", "tee", stdin="pipe:[1]")), CONTAINER,
                progress).signal == ()


def test_past_the_timeout_the_work_below_what_ignored_its_sigterm_is_told_tops_first():
    # A sweep launcher (13) caught its SIGTERM and runs a trainer (14) with DataLoader workers (15, 16).
    launcher = "python3 sweep.py"
    processes = table(shell(12, 1), python(13, 12, launcher), python(14, 13), python(15, 14), python(16, 14))
    step_2 = look(processes, CONTAINER)
    assert step_2.signal == (13,) and look(processes, CONTAINER, step_2.progress).signal == ()
    step_3 = look(processes, CONTAINER, step_2.progress.past_the_timeout())
    assert step_3.signal == (14,)
    assert look(processes, CONTAINER, step_3.progress).signal == (), "its workers wait while the trainer saves"
    orphans = table(shell(12, 1), python(13, 12, launcher), python(15, SUPERVISOR), python(16, SUPERVISOR))
    assert look(orphans, CONTAINER, step_3.progress).signal == (15, 16)


def test_a_first_look_at_a_table_without_work_plans_nothing():
    plan = look(table(shell(12, 10)), CONTAINER)
    assert plan.signal == () and plan.work == set() and plan.progress == Progress()


# ---- JupyterLab's closes ----------------------------------------------------------------------------

SERVER = 20


def terminal(shell_pid: int, *jobs: Process) -> dict[int, Process]:
    return table(Process(shell_pid, SERVER, "bash", "bash", session=shell_pid), *jobs)


def test_a_terminals_close_stops_first_what_its_hang_up_would_reach_and_waits_for_the_job():
    processes = terminal(30, python(31, 30, TORCHRUN, "torchrun", session=30), python(32, 31, session=30),
                         python(33, 31, session=30))
    assert terminal_close(processes, 30, ignores_hangup=lambda pid: False) == ((32, 33), (31,))


def test_a_nohup_or_setsid_job_outlives_its_terminals_close():
    nohup = terminal(30, python(31, 30, session=30))
    assert terminal_close(nohup, 30, ignores_hangup={31}.__contains__) == ((), ())
    setsid = terminal(30, python(31, 30, session=31))
    assert terminal_close(setsid, 30, ignores_hangup=lambda pid: False) == ((), ())
    both = terminal(30, python(31, 30, session=31), python(32, 30, session=30))
    assert terminal_close(both, 30, ignores_hangup=lambda pid: False) == ((32,), (32,))


def test_a_nohup_below_a_jobs_subshell_outlives_its_terminals_close():
    """`cd DIR && nohup CMD &`, `{ nohup CMD; } &` and `( nohup CMD ) &` run in a subshell (31), the job's
    top, which does not ignore SIGHUP; the trainer below it (32) does, and so does torchrun's worker (33)
    below a nohup'd torchrun. The hang-up ends the subshell alone (before: 32 got SIGTERM first)."""
    subshell = Process(31, 30, "bash", "bash", session=30)
    under_nohup = terminal(30, subshell, python(32, 31, session=30))
    assert terminal_close(under_nohup, 30, ignores_hangup={32}.__contains__) == ((), ())
    torchrun = terminal(30, subshell, python(32, 31, TORCHRUN, "torchrun", session=30), python(33, 32, session=30))
    assert terminal_close(torchrun, 30, ignores_hangup={32, 33}.__contains__) == ((), ())
    without_nohup = terminal(30, subshell, python(32, 31, session=30))
    assert terminal_close(without_nohup, 30, ignores_hangup=lambda pid: False) == ((32,), (31,))


def test_a_busy_kernels_shutdown_signals_its_cells_programs_and_itself_only_where_its_cell_handles_sigterm():
    cell = table(python(21, SERVER, KERNEL), Process(22, 21, "sh", "dash"), python(23, 22, TORCHRUN, "torchrun"),
                 python(24, 23), python(41, SERVER, KERNEL.replace("kernel-1", "kernel-2")))
    assert kernel_close(cell, SERVER, 21, handles_sigterm=True) == (24,), "not the other kernel (41)"
    loop = table(python(21, SERVER, KERNEL), python(22, 21, KERNEL, "pt_data_worker"))
    assert kernel_close(loop, SERVER, 21, handles_sigterm=True) == (21,)
    assert kernel_close(loop, SERVER, 21, handles_sigterm=False) == (), "JupyterLab's SIGINT comes first"


def test_a_servers_view_counts_only_the_processes_below_its_root():
    processes = table(python(21, SERVER, KERNEL), python(30, 0), shell(12, 10), python(13, 12))
    assert look(processes, Container.below(SERVER)).signal == (21,)
    assert look(processes, Container.below(12)).signal == (13,)


def test_the_ends_that_may_be_lost_work_are_decided_once():
    assert may_have_been_lost("python3", 129) and not may_have_been_lost("python3", 0)
    assert not may_have_been_lost("bash", 129), "a holder's end is no lost work"
    assert lost_with_a_holder([Ended(31, "tmux: server", 1, 5.0)], since=0.0, told=set()) == []


def test_a_torchrun_reading_a_pipe_has_its_workers_told_once_its_writers_are_gone():
    """`producer | torchrun ...`: torchrun is a reader while the producer runs; then, as any torchrun, its
    workers get the signal, never torchrun itself."""
    producer = python(101, 100, "python3 produce.py", outputs=frozenset({"pipe:[7]"}))
    reader = python(102, 100, TORCHRUN, "torchrun", stdin="pipe:[7]")
    first = look(table(shell(100, SUPERVISOR), producer, reader, python(103, 102)), CONTAINER)
    assert first.signal == (101,) and first.progress.readers == {102: {101}}
    drained = look(table(shell(100, SUPERVISOR), reader, python(103, 102)), CONTAINER, first.progress)
    assert drained.signal == (103,)


def test_past_the_timeout_a_reader_whose_writers_are_gone_is_told_at_once():
    """Its writers ended in the last seconds of STOP_TIMEOUT: no drain time is left, and step 3 tells it
    before everything else is signalled."""
    writer = python(101, 100, outputs=frozenset({"pipe:[1]"}))
    reader = Process(102, 100, "tee", "tee", stdin="pipe:[1]")
    step_2 = look(table(shell(100, SUPERVISOR), writer, reader), CONTAINER)
    assert step_2.signal == (101,)
    step_3 = look(table(shell(100, SUPERVISOR), reader), CONTAINER, step_2.progress.past_the_timeout())
    assert step_3.signal == (102,)


def test_a_kernel_of_another_language_holds_its_cells_programs_like_an_ipython_kernel():
    """IRkernel's R, handed the connection file a Jupyter server writes: what its cell started is told first,
    as a terminal's job is; the kernel once nothing of its cell runs below it."""
    r_kernel = Process(21, SERVER, "R", None,
                       "R --slave -e IRkernel::main() --args /home/dev/.local/share/jupyter/runtime/kernel-5f3c.json")
    running = look(table(r_kernel, python(22, 21)), CONTAINER)
    assert running.signal == (22,) and 21 in running.work
    assert look(table(r_kernel), CONTAINER, running.progress).signal == (21,)
