"""The stop's decisions (docker/rootfs/usr/local/lib/container/supervisor/stop_policy.py) on process tables written
out by hand: who holds a session, which processes are tops, torchrun's workers, wrappers, pipeline readers,
launchers that exited, the host's PID namespace and kernel threads. The real stops are in
tests/image/test_stop*.py.

    make test-unit PYTEST_ARGS=tests/unit/test_stop_policy.py
"""
from __future__ import annotations

import signal

import pytest

from signal_policy import asked_by_a_service, decide, sent_from_inside, signal_meaning
from process_kinds import Container, Process, terminal_host_candidates
from stop_policy import READER_DRAIN_S, Progress, drain, everything_left, look, shells, user_work
from stop_verdict import Ended, lost_with_a_holder
from tests.unit.helpers.process_tables import (CONTAINER, KERNEL, SUPERVISOR, TORCHRUN, fork_server_below, python,
                                               shell, table)


def test_the_top_of_work_in_a_shell_is_signalled_not_the_shell_nor_what_runs_below_it():
    # sshd's session (11, unreadable executable: it dropped root without exec) runs a shell (12) that
    # runs the trainer (13), whose DataLoader worker is 14.
    processes = table(Process(11, 10, "sshd", None), shell(12, 11), python(13, 12), python(14, 13))
    assert look(processes, CONTAINER).signal == (13,)


def test_docker_exec_work_and_a_notebook_kernels_child_are_tops():
    kernel = python(21, 20, "python3 -m ipykernel_launcher -f kernel.json")
    processes = table(python(30, 0), kernel, Process(22, 21, "sh", "dash"), python(23, 22))
    assert sorted(look(processes, CONTAINER).signal) == [23, 30]


def test_a_notebook_kernel_with_nothing_below_it_is_work_signalled_in_step_1():
    """A cell may run the training loop in the kernel itself: a busy kernel is work."""
    processes = table(python(21, 20, KERNEL), python(22, 20, KERNEL.replace("kernel-1", "kernel-2"),
                                                      name="ipykernel_launc"))
    plan = look(processes, CONTAINER)
    assert plan.signal == (21, 22) and {21, 22} <= plan.work


def test_a_kernel_is_signalled_only_after_the_work_its_cell_started_has_ended():
    """`!torchrun` writes through the kernel's pipe: a kernel that ended first would cut off its output."""
    started = table(python(21, 20, KERNEL), Process(22, 21, "sh", "dash"), python(23, 22, TORCHRUN, "torchrun"),
                    python(24, 23))
    first = look(started, CONTAINER)
    assert first.signal == (24,) and 21 in first.work
    ended = table(python(21, 20, KERNEL))
    assert look(ended, CONTAINER, Progress(tops=first.tops)).signal == (21,)


@pytest.mark.parametrize("worker_name", ["python", "pt_data_worker"])
def test_a_loop_in_a_kernel_is_signalled_before_its_dataloader_workers_which_are_its_forks(worker_name):
    processes = table(python(21, 20, KERNEL), python(22, 21, KERNEL, worker_name),
                      Process(23, 21, worker_name, None, KERNEL))
    plan = look(processes, CONTAINER)
    assert plan.signal == (21,) and plan.work == {21}


def test_a_loop_in_a_kernel_with_workers_from_a_fork_server_is_signalled_alone_and_idle_is_no_work():
    """The trainer's loader in a kernel starts multiprocessing's fork server and resource tracker below it:
    they and the server's forks are the kernel's own, as its forks are, not a program its cell started."""
    processes = table(python(21, 20, KERNEL), *fork_server_below(21, 30))
    plan = look(processes, CONTAINER)
    assert plan.signal == (21,) and plan.work == {21}
    assert user_work(processes, CONTAINER) == set(), "a hub would keep an idle kernel's server running"


def test_a_trainers_fork_server_and_its_workers_are_its_work_below_it_never_tops():
    processes = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13),
                      *fork_server_below(14, 30))
    plan = look(processes, CONTAINER)
    assert plan.signal == (14,) and plan.work == {13, 14, 30, 31, 32, 33}


def test_a_fork_server_and_tracker_whose_trainer_has_ended_are_not_signalled_but_its_forks_are():
    """They end by themselves once the trainer and its workers have: a SIGTERM would make the stop say the
    server "died of it" (not clean), and the tracker ignores one."""
    tracker, server = fork_server_below(1, 30)[:2]  # below PID 1, where orphans go
    ended = table(tracker, server)
    assert look(ended, CONTAINER).signal == () and look(ended, CONTAINER).work == {30, 31}
    killed = table(*fork_server_below(1, 30))  # the trainer was killed before it could stop its workers
    assert look(killed, CONTAINER).signal == (32, 33)


def test_a_program_a_kernels_cell_started_keeps_the_kernel_from_its_signal_with_a_fork_server_beside():
    processes = table(python(21, 20, KERNEL), *fork_server_below(21, 30), Process(40, 21, "sh", "dash"),
                      python(41, 40))
    assert look(processes, CONTAINER).signal == (41,)


def test_the_healthchecks_probe_is_no_work_but_the_same_programs_a_user_runs_are():
    """The engine runs the image's HEALTHCHECK from outside (parent 0) every few seconds; a stop that finds
    its curl running must not name or signal it as the user's work, nor a hub count it as activity."""
    probe = shell(40, 0, command="bash /usr/local/bin/healthcheck")
    users = shell(50, 0, command="bash")  # `docker exec -it C bash`, running curl too
    processes = table(probe, Process(41, 40, "curl", None), users, Process(51, 50, "curl", None))
    assert user_work(processes, CONTAINER) == {51}
    assert look(processes, CONTAINER).signal == (51,)


def test_the_engine_entering_the_container_is_nothing_yet_and_what_it_becomes_is_judged_then():
    """`docker exec` and the HEALTHCHECK (every 0.5 s of the first minute) start as runc's own init inside
    the container; a command that exited just then left no work (landing run 66: "left work running:
    136(runc init)", exit 1 for a command that exited 0)."""
    entering = Process(60, 0, "runc:[2:INIT]", None)
    assert user_work(table(entering), CONTAINER) == set()
    assert look(table(entering), CONTAINER).signal == ()
    became = table(python(60, 0))  # a `docker exec` of the trainer, at the next look
    assert user_work(became, CONTAINER) == {60}


def test_an_idle_kernel_is_no_work_a_hub_keeps_a_server_running_for():
    assert user_work(table(python(21, 20, KERNEL)), CONTAINER) == set()


def test_vs_code_in_the_browser_holds_its_terminals_and_the_trainer_in_one_is_signalled():
    """code-server (the -vscode variant's node, under that name) below JupyterLab: its server, terminal
    host and the shell in its terminal hold sessions; the trainer typed there is the work."""
    server = Process(21, 20, "MainThread", "code-server")  # Node 24 names its main thread so
    pty_host = Process(22, 21, "MainThread", "code-server", holds_terminal=True)
    processes = table(server, pty_host, shell(23, 22), python(24, 23, TORCHRUN, "torchrun"), python(25, 24))
    plan = look(processes, CONTAINER)
    assert plan.signal == (25,) and plan.work == {24, 25}
    assert user_work(table(server, pty_host, shell(23, 22)), CONTAINER) == set(), "an idle editor is no work"
    users_node = Process(30, 0, "MainThread", "node")
    assert look(table(users_node), CONTAINER).signal == (30,), "another Node program is work"


def test_torchruns_workers_are_signalled_instead_of_torchrun():
    processes = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13), python(15, 13))
    assert look(processes, CONTAINER).signal == (14, 15)


def test_torchrun_below_a_wrapper_has_its_workers_signalled_and_the_wrapper_left_alone():
    wrapper = python(101, 100, "python /opt/scripts/multinode/torchrun_node.py --nnodes=1 /opt/scripts/train_ddp.py")
    agent = python(102, 101, "/usr/bin/python -m torch.distributed.run --nnodes=1 /opt/scripts/train_ddp.py",
                   "pt_elastic")
    processes = table(shell(100, SUPERVISOR), wrapper, agent, python(103, 102), python(104, 102), python(105, 103))
    assert look(processes, CONTAINER).signal == (103, 104)


def test_a_sweep_that_runs_torchrun_through_a_shell_is_signalled_with_torchruns_workers():
    """subprocess.run("torchrun ...", shell=True): the shell between them makes torchrun a top of its own,
    so the sweep gets its SIGTERM too and starts no next trial."""
    sweep = python(101, 100, "python sweep.py")
    processes = table(shell(100, 10), sweep, Process(102, 101, "sh", "dash"), python(103, 102, TORCHRUN, "torchrun"),
                      python(104, 103), python(105, 103))
    assert look(processes, CONTAINER).signal == (101, 104, 105)


def test_torchrun_in_its_rendezvous_without_workers_is_signalled_itself():
    processes = table(python(13, SUPERVISOR, TORCHRUN, "torchrun"))
    assert look(processes, CONTAINER).signal == (13,)


@pytest.mark.parametrize("name", ["bash", "sleep", "tmux: server", "sshd"])
def test_a_trainer_named_like_a_holder_is_told_apart_by_its_executable(name):
    """setproctitle and prctl rename a process, and its command line; its executable stays python."""
    processes = table(shell(12, 10), python(13, 12, command=name, name=name))
    assert look(processes, CONTAINER).signal == (13,)


def test_a_holder_whose_executable_cannot_be_read_is_told_by_its_name():
    processes = table(Process(12, 10, "bash", None), python(13, 12))
    assert look(processes, CONTAINER).signal == (13,)


def test_work_whose_launcher_exited_is_a_new_top_signalled_in_its_turn():
    """flock, or a sweep script's subprocess.run, dies of the SIGTERM and does not pass it on."""
    first = table(shell(12, 10), Process(13, 12, "flock", "flock"), python(14, 13))
    plan = look(first, CONTAINER)
    assert plan.signal == (13,)
    orphaned = table(shell(12, 10), python(14, SUPERVISOR))  # the subreaper inherited it
    assert look(orphaned, CONTAINER, Progress(tops=plan.tops)).signal == (14,)


def test_workers_torchrun_restarted_after_the_stop_began_are_signalled_at_the_next_look():
    """torchrun --max-restarts=3 whose rank exited 1 on its SIGTERM starts new workers under the same agent;
    they save only if they get a SIGTERM of their own, not step 3's."""
    processes = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13))
    plan = look(processes, CONTAINER)
    restarted = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(24, 13), python(25, 13))
    assert look(restarted, CONTAINER, Progress(tops=plan.tops, signalled=frozenset({14}))).signal == (24, 25)
    between = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"))  # no workers: the agent is left alone
    assert look(between, CONTAINER, Progress(tops=plan.tops, signalled=frozenset({14}))).signal == ()


def test_a_top_handled_already_is_not_signalled_again():
    """torchrun waiting for its signalled workers must not get a SIGTERM of its own on the next pass."""
    processes = table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun"), python(14, 13))
    plan = look(processes, CONTAINER)
    assert look(table(shell(12, 10), python(13, 12, TORCHRUN, "torchrun")), CONTAINER, Progress(tops=plan.tops)).signal == ()


@pytest.mark.parametrize("reader", ["tee", "grep", "ts"])
def test_any_reader_at_the_end_of_a_pipeline_is_left_to_drain_in_a_shell_without_job_control(reader):
    # bash -c 'torchrun ... | sed s/x/y/ | READER log': every stage is a child of bash, in bash's group.
    stages = table(shell(100, SUPERVISOR), python(101, 100, TORCHRUN, "torchrun", outputs=frozenset({"pipe:[1]"})),
                   python(102, 101, outputs=frozenset({"pipe:[1]"})),
                   Process(103, 100, "sed", "sed", stdin="pipe:[1]", outputs=frozenset({"pipe:[2]"})),
                   Process(104, 100, reader, reader, stdin="pipe:[2]"))
    plan = look(stages, CONTAINER)
    assert plan.signal == (102,)
    assert plan.readers == {103: frozenset({101, 102}), 104: frozenset({103})}


def test_a_reader_is_signalled_only_once_its_writers_have_been_gone_for_the_drain_time():
    """A reader that does not end at the end of its input (a trainer fed by `yes |`) is signalled then."""
    progress = Progress(readers={103: frozenset({101, 102})})
    due, progress = drain(progress, {101, 103}, now=0.0)
    assert due == []
    due, progress = drain(progress, {103}, now=10.0)
    assert due == [] and progress.writers_gone_at == {103: 10.0}
    before = progress
    due, progress = drain(progress, {103}, now=10.0 + READER_DRAIN_S)
    assert due == [103] and 103 in progress.signalled
    assert before.writers_gone_at == {103: 10.0} and 103 not in before.signalled, "a progress is never changed"
    assert drain(progress, set(), now=20.0 + READER_DRAIN_S)[0] == []


def test_a_pipe_written_only_by_a_holder_makes_no_reader():
    """`while ...; done | python train.py`: the loop is a shell, stopped last, so the trainer is a top."""
    loop = shell(101, 100, outputs=frozenset({"pipe:[3]"}))
    processes = table(shell(100, SUPERVISOR), loop, python(102, 100, stdin="pipe:[3]"))
    assert look(processes, CONTAINER).signal == (102,)


def test_a_pipe_from_a_file_or_a_terminal_makes_no_reader():
    processes = table(shell(100, 10), Process(101, 100, "tee", "tee", stdin="/dev/pts/0"),
                      Process(102, 100, "cat", "cat", stdin="pipe:[9]"))
    assert look(processes, CONTAINER).signal == (101, 102)


def test_the_services_and_holders_are_not_work_but_are_stopped_last():
    processes = table(shell(12, 10), python(13, 12), Process(30, SUPERVISOR, "python3", "python3.11",
                                                             "python3 /opt/scripts/gpu_exporter.py"))
    container = Container(SUPERVISOR, frozenset({10, 20, 30}))
    assert user_work(processes, container) == {13}
    assert everything_left(processes, container) == [10, 12, 13, 20, 30]


def test_a_pid_of_a_service_that_ended_is_work_when_it_comes_back_as_a_trainer():
    processes = table(shell(12, 10), python(30, 12))
    assert look(processes, Container(SUPERVISOR, frozenset({10, 20, 30}))).signal == (30,)


def test_in_the_hosts_pid_namespace_only_the_supervisors_descendants_count():
    host = Container(supervisor=600, own_pid_namespace=False)
    processes = {1: Process(1, 0, "systemd", "systemd"), 2: Process(2, 0, "kthreadd", None, kernel_thread=True),
                 3: Process(3, 2, "kworker/u8:0-ext4-rsv-conversion", None, kernel_thread=True),
                 400: shell(400, 1), 401: python(401, 400), 600: Process(600, 1, "python3", "python3.11"),
                 601: shell(601, 600), 602: python(602, 601)}
    assert look(processes, host).signal == (602,)
    assert everything_left(processes, host) == [601, 602]


def test_step_3_hangs_up_the_shells_but_not_a_trainer_named_like_one():
    """An interactive shell ignores SIGTERM; a shell of `docker exec -it` has its terminal outside."""
    processes = table(shell(12, 0), Process(13, 12, "sh", None), python(14, 12, name="bash"))
    assert shells(processes, everything_left(processes, CONTAINER)) == [12, 13]


def test_kernel_threads_are_never_signalled():
    processes = table(Process(2, 0, "kthreadd", None, kernel_thread=True))
    assert 2 not in everything_left(processes, CONTAINER)


@pytest.mark.parametrize(("number", "command_mode", "meaning"), [
    (signal.SIGTERM, False, "stop"), (signal.SIGINT, True, "stop"),
    # docker kill -s HUP, QUIT, a power-failure signal, a derived image's STOPSIGNAL: the orderly stop, not
    # the sudden end of everything their default action was.
    (signal.SIGHUP, False, "stop"), (signal.SIGQUIT, False, "stop"), (signal.SIGPWR, False, "stop"),
    (signal.SIGRTMIN + 3, False, "stop"), (signal.SIGUSR1, False, "stop"),
    # Beside a command, USR1 and USR2 go on to its work, as a batch scheduler's to a job.
    (signal.SIGUSR1, True, "pass on"), (signal.SIGUSR2, True, "pass on"),
    (signal.SIGWINCH, False, "ignore"), (signal.SIGTSTP, True, "ignore"), (signal.SIGCHLD, False, "ignore"),
])
def test_every_signal_an_operator_may_send_has_a_meaning(number, command_mode, meaning):
    assert signal_meaning(number, command_mode) == meaning


@pytest.mark.parametrize(("code", "sender", "own_namespace", "descends", "inside"), [
    (0, 1, True, False, False),         # tini passing docker stop on
    (0x80, 0, True, False, False),      # the kernel: a terminal's Ctrl-C
    (0, 0, True, False, False),         # a sender outside the PID namespace
    (0, 345, True, False, True),        # a user's `pkill python` (Kubeflow's runAsUser: the same uid)
    (-6, 345, True, False, True),       # sigqueue from inside
    (0, 4242, False, False, False),     # the host's PID namespace: a host process, not ours
    (0, 601, False, True, True),        # ... one of the supervisor's descendants
])
def test_only_the_runtime_stops_the_container_never_a_process_of_its_own(code, sender, own_namespace, descends,
                                                                        inside):
    assert sent_from_inside(code, sender, 1, own_namespace, descends) is inside


@pytest.mark.parametrize(("number", "sender", "requested_by", "command_mode", "action"), [
    (signal.SIGTERM, 0, None, False, "stop"),                  # docker stop, from outside
    (signal.SIGWINCH, 345, None, False, "ignore"),             # ignored before anything else is asked
    (signal.SIGTERM, SUPERVISOR, "jupyter", False, "asked by a service"),  # before "from inside": it is
    (signal.SIGTERM, 345, "jupyter", False, "from inside"),    # a user's `pkill python` while a request waits
    (signal.SIGUSR1, 345, None, True, "from inside"),          # passed on only when the runtime sends it
    (signal.SIGUSR1, 1, None, True, "pass on"),                # docker kill -s USR1 beside a command
    (signal.SIGUSR1, 1, None, False, "stop"),                  # ... beside the services
])
def test_a_signal_is_judged_in_one_order_ignored_a_services_request_from_inside_then_its_meaning(
        number, sender, requested_by, command_mode, action):
    assert decide(number, 0, sender, supervisor=SUPERVISOR, parent=1, command_mode=command_mode,
                  requested_by=requested_by, own_pid_namespace=True, sender_descends=False) == action


def pty_host(pid: int, parent: int, program: str = "script", command: str = "") -> Process:
    return Process(pid, parent, program, program, command, holds_terminal=True)


def test_a_terminal_held_by_a_program_of_any_name_is_not_hung_up_on_its_trainer():
    # sshd's shell (12) runs `script -qfc 'python train_ddp.py'`: script (13) holds the trainer's (14)
    # terminal. Signalled first, it would exit and the terminal would hang up on the trainer mid-save.
    processes = table(Process(11, 10, "sshd", None), shell(12, 11), pty_host(13, 12), python(14, 13),
                      python(15, 14))
    plan = look(processes, CONTAINER)
    assert plan.signal == (14,) and 13 in plan.work
    # Once the trainer has ended, the holder is the top of what is left, signalled in its turn.
    after = table(Process(11, 10, "sshd", None), shell(12, 11), pty_host(13, 12))
    assert look(after, CONTAINER, Progress(tops=plan.tops)).signal == (13,)


def test_who_may_hold_a_terminal_is_a_parent_of_a_session_on_another_terminal_and_no_holder_by_name():
    # (parent, name, session, controlling terminal): script (13) runs a session (14) on pts/5, its own on
    # pts/1; sshd (10) and tmux (20) do the same, but are holders by name; a shell's job (16) is in its
    # shell's session (15), on the same terminal.
    rows = {10: (1, "sshd", 10, 0), 11: (10, "bash", 11, 34817), 13: (11, "script", 11, 34817),
            14: (13, "bash", 14, 34821), 20: (1, "tmux: server", 20, 0), 21: (20, "bash", 21, 34822),
            15: (1, "bash", 15, 34818), 16: (15, "python3", 15, 34818)}
    assert terminal_host_candidates(rows) == [13]


def test_the_work_above_a_terminal_with_work_in_it_waits_too():
    # An editor's server (node 13) runs its terminal host (node 14, holding the pty) whose shell (15) runs
    # a trainer (16): neither node is signalled while the trainer runs.
    editor = [Process(13, 12, "node", "node"), pty_host(14, 13, "node"), shell(15, 14), python(16, 15)]
    processes = table(shell(12, 1), *editor)
    assert look(processes, CONTAINER).signal == (16,)
    idle = table(shell(12, 1), Process(13, 12, "node", "node"), pty_host(14, 13, "node"), shell(15, 14))
    assert look(idle, CONTAINER).signal == (13,)


def test_a_python_pty_host_is_a_holder_by_what_it_does_not_by_its_name():
    processes = table(shell(12, 1), pty_host(13, 12, "python3.11", "python3 pty_host.py"), shell(14, 13),
                      python(15, 14, TORCHRUN), python(16, 15), python(17, 15))
    assert look(processes, CONTAINER).signal == (16, 17)


def test_step_3_signals_the_trainer_below_a_launcher_that_ignored_its_sigterm_before_its_workers():
    # A sweep launcher (13) that caught step 1's SIGTERM runs a trainer (14) with DataLoader workers (15, 16):
    # the trainer is told first, alone, so its workers are not killed under it mid-save.
    launcher = "python3 sweep.py"
    processes = table(shell(12, 1), python(13, 12, launcher), python(14, 13), python(15, 14), python(16, 14))
    assert look(processes, CONTAINER).signal == (13,)
    assert look(processes, CONTAINER, Progress(signalled=frozenset({13})).past_the_timeout()).signal == (14,)
    orphans = table(shell(12, 1), python(13, 12, launcher), python(15, SUPERVISOR), python(16, SUPERVISOR))
    assert look(orphans, CONTAINER, Progress(signalled=frozenset({13, 14})).past_the_timeout()).signal == (15, 16)


# ---- JupyterLab ending before the stop -----------------------------------------------------------

def test_only_the_supervisors_own_sigterm_relaying_a_services_request_starts_the_stop_from_inside():
    assert asked_by_a_service(signal.SIGTERM, SUPERVISOR, SUPERVISOR, "jupyter")  # File > Shut Down
    assert not asked_by_a_service(signal.SIGTERM, SUPERVISOR, SUPERVISOR, None)
    assert not asked_by_a_service(signal.SIGTERM, 4242, SUPERVISOR, "jupyter")  # a user's `pkill python`
    assert not asked_by_a_service(signal.SIGUSR1, SUPERVISOR, SUPERVISOR, "jupyter")


SERVICE_ENDED_AT = 100.0


def test_work_that_ended_with_a_holder_is_named_and_its_holders_and_the_stops_own_endings_are_not():
    ended = [Ended(30, "bash", 129, SERVICE_ENDED_AT),            # the terminal's shell: a holder
             Ended(31, "python3", 129, SERVICE_ENDED_AT + 0.1),   # its job, killed by the hang-up
             Ended(32, "python", 1, SERVICE_ENDED_AT + 0.2),      # a kernel that ended with its server
             Ended(33, "python3", 0, SERVICE_ENDED_AT + 5),       # a trainer that saved on its SIGHUP
             Ended(34, "python3", 143, SERVICE_ENDED_AT + 6),     # work that died of the stop's SIGTERM
             Ended(35, "python3", 0, SERVICE_ENDED_AT + 6),       # work that saved on the stop's SIGTERM
             Ended(36, "python3", 137, SERVICE_ENDED_AT - 50)]    # long before: not the service's doing
    ended.append(Ended(37, "torchrun", 1, SERVICE_ENDED_AT + 1))  # its agent's 1 after its workers saved
    lost = lost_with_a_holder(ended, SERVICE_ENDED_AT, told={33, 34, 35})
    assert [process.pid for process in lost] == [31, 32]


def test_work_the_stop_signalled_but_a_hang_up_killed_first_is_still_named():
    """The hang-up and step 1 race: a SIGTERM sent to a process already dying of SIGHUP saves nothing."""
    lost = lost_with_a_holder([Ended(31, "python3", 129, SERVICE_ENDED_AT)], SERVICE_ENDED_AT, told={31})
    assert [process.pid for process in lost] == [31]
