"""Process tables written by hand, for the stop's decisions (stop_policy.py, process_kinds.py) in the unit tier: the
container's own processes, and shells, Python programs, torchrun and a notebook kernel to put below them.
The unit tier's conftest puts the container's library on sys.path, where stop_policy lives."""
from __future__ import annotations

from process_kinds import Container, Process

SUPERVISOR = 7
CONTAINER = Container(supervisor=SUPERVISOR, services=frozenset({10, 20}))
TORCHRUN = "/opt/venv/bin/python3 /opt/venv/bin/torchrun --standalone --nproc-per-node=2 /opt/scripts/train_ddp.py"
TRAINER = "/opt/venv/bin/python3 /opt/scripts/train_ddp.py --max-steps 100"


def table(*processes: Process) -> dict[int, Process]:
    """The table with PID 1 (tini), the supervisor, sshd (10, a service) and JupyterLab (20) in it."""
    base = [Process(1, 0, "tini", "tini"), Process(SUPERVISOR, 1, "python3", "python3.11"),
            Process(10, SUPERVISOR, "sshd", "sshd"),
            Process(20, SUPERVISOR, "jupyter-lab", "python3.11", "python3 /opt/venv/bin/jupyter-lab")]
    return {process.pid: process for process in [*base, *processes]}


def shell(pid: int, parent: int, **fields) -> Process:
    return Process(pid, parent, "bash", "bash", **fields)


def python(pid: int, parent: int, command: str = TRAINER, name: str = "python3", **fields) -> Process:
    return Process(pid, parent, name, "python3.11", command, **fields)


KERNEL = "/home/dev/.cache/user-packages/venv/bin/python -m ipykernel_launcher -f /home/dev/kernel-1.json"

# What Python's multiprocessing starts for a program that uses a fork server (the trainer's DataLoader):
# the server, whose forks (the workers, named pt_data_worker) run its command line, and a resource tracker.
FORK_SERVER = ("/opt/venv/bin/python3 -B -c from multiprocessing.forkserver import main; "
               "main(9, 10, ['torch'], **{'sys_path': ['/opt/scripts']})")
RESOURCE_TRACKER = "/opt/venv/bin/python3 -B -c from multiprocessing.resource_tracker import main;main(8)"


def fork_server_below(parent: int, first_pid: int) -> list[Process]:
    """PARENT's resource tracker (FIRST_PID), fork server (the next PID) and two DataLoader workers."""
    server = first_pid + 1
    return [python(first_pid, parent, RESOURCE_TRACKER), python(server, parent, FORK_SERVER),
            Process(server + 1, server, "pt_data_worker", "python3.11", FORK_SERVER),
            Process(server + 2, server, "pt_data_worker", "python3.11", FORK_SERVER)]
