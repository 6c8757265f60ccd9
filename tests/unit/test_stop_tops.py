"""The stop path's choice of what to signal (stop.sh's find_tops and keep_descendants_only), on process
tables written out by hand: pure functions of the arrays scan_processes fills. The real stops are in
tests/image/test_stop*.py.

    make test-unit PYTEST_ARGS=tests/unit/test_stop_tops.py
"""
from __future__ import annotations

import subprocess

from tests.support import REPO_ROOT

STOP_SH = REPO_ROOT / "docker/rootfs/usr/local/lib/container/stop.sh"


def run_stop_functions(table: str, call: str) -> dict[str, str]:
    """Sources stop.sh, sets TABLE's arrays, runs CALL; returns the arrays it prints as NAME=words.
    In TABLE, $$ is the entrypoint: this bash, as it is for stop.sh."""
    script = f"""
set -euo pipefail
log_info() {{ :; }}; log_warn() {{ :; }}
source {STOP_SH}
{table}
{call}
echo "TOPS=${{TOPS[*]-}}"; echo "READERS=${{READERS[*]-}}"; echo "LIVE=${{LIVE[*]-}}"; echo "WORK=${{WORK[*]-}}"
"""
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def test_torchrun_below_a_wrapper_has_its_workers_signalled_and_the_wrapper_left_alone():
    # setpriv's bash (100) runs torchrun_node.py (101), which runs the agent (102) with workers 103, 104,
    # and 103 a DataLoader worker (105).
    table = """
PARENT=([100]=$$ [101]=100 [102]=101 [103]=102 [104]=102 [105]=103)
GROUP=([100]=100 [101]=100 [102]=100 [103]=100 [104]=100 [105]=100)
HOLDER=([100]=1)
COMMAND=([101]="python /opt/scripts/multinode/torchrun_node.py --nnodes=1 /opt/scripts/train_ddp.py"
         [102]="/usr/bin/python -m torch.distributed.run --nnodes=1 /opt/scripts/train_ddp.py")
WORK=(101 102 103 104 105)
"""
    assert run_stop_functions(table, "find_tops")["TOPS"].split() == ["103", "104"]


def test_tee_in_a_shell_without_job_control_is_a_later_stage():
    # bash -c 'torchrun ... | tee log': torchrun (101) and tee (102) share bash's group (100).
    table = """
PARENT=([100]=$$ [101]=100 [102]=100 [103]=101)
GROUP=([100]=100 [101]=100 [102]=100 [103]=100)
HOLDER=([100]=1)
NAMED_READER=([102]=1)
COMMAND=([101]="/usr/bin/python /usr/local/bin/torchrun --standalone /opt/scripts/train_ddp.py")
WORK=(101 102 103)
"""
    arrays = run_stop_functions(table, "find_tops")
    assert (arrays["TOPS"].split(), arrays["READERS"].split()) == (["103"], ["102"])


def test_in_the_hosts_pid_namespace_only_the_entrypoints_descendants_are_kept():
    # 400 and 401 are the host's (a user's shell and its job), 600 and below the container's.
    table = """
OWN_PID_NAMESPACE=0
PARENT=([400]=1 [401]=400 [600]=$$ [601]=600 [602]=601)
LIVE=(400 401 600 601 602) WORK=(401 601 602)
"""
    arrays = run_stop_functions(table, "keep_descendants_only")
    assert (arrays["LIVE"].split(), arrays["WORK"].split()) == (["600", "601", "602"], ["601", "602"])


def test_a_later_scan_signals_only_the_tops_no_earlier_scan_saw():
    # Under the shell 100: flock (101) running a trainer (102, DataLoader worker 103); torchrun (110) with
    # workers 111 and 112; a pipeline typed at the shell, python (130) | tee (131) in 130's group.
    first = """
PARENT=([100]=$$ [101]=100 [102]=101 [103]=102 [110]=100 [111]=110 [112]=110 [130]=100 [131]=100)
GROUP=([100]=100 [101]=101 [102]=101 [103]=101 [110]=110 [111]=110 [112]=110 [130]=130 [131]=130)
HOLDER=([100]=1)
COMMAND=([110]="/usr/bin/python /usr/local/bin/torchrun --standalone /opt/scripts/train_ddp.py")
WORK=(101 102 103 110 111 112 130 131)
"""
    # Then flock died of its SIGTERM (its trainer now PID 1's), torchrun's workers and python 130 ended,
    # and the shell's loop started another trainer (140).
    later = """
PARENT=([100]=$$ [102]=1 [103]=102 [110]=100 [131]=100 [140]=100)
GROUP=([100]=100 [102]=101 [103]=101 [110]=110 [131]=130 [140]=140)
HOLDER=([100]=1)
COMMAND=([110]="/usr/bin/python /usr/local/bin/torchrun --standalone /opt/scripts/train_ddp.py")
WORK=(102 103 110 131 140)
"""
    arrays = run_stop_functions(first, f'find_tops; echo "FIRST=${{TOPS[*]}}"\n{later}\nfind_tops')
    assert arrays["FIRST"].split() == ["101", "111", "112", "130"]
    # Not torchrun, whose workers had the signal, nor tee, left to drain: only the new tops.
    assert (arrays["TOPS"].split(), arrays["READERS"]) == (["102", "140"], "")
