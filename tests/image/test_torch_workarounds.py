"""The torch behaviours our workarounds exist for, reproduced without the workaround in the image's torch.

    make test-image PYTEST_ARGS=tests/image/test_torch_workarounds.py

Each test passes while torch still behaves as docs/torch-workarounds.md describes, and fails, saying
which workaround can go, on the day a torch release changes that behaviour. The tests that prove each
workaround works are named in the register.
"""
from __future__ import annotations

import pytest
import testinfra

from tests.support.training import SIGTERM_TO_TORCHRUN, interrupt_when_logged, trainer_command

pytestmark = pytest.mark.tier("full")

REGISTER = "docs/torch-workarounds.md"
ATTEMPT_TIMEOUT_S = 60

# A worker that does what the sample trainer does on SIGTERM: finish, save, and exit 0.
WORKER_THAT_EXITS_0_ON_SIGTERM = '''
import signal, sys, time
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
print("ready", flush=True)
while not stopped:
    time.sleep(0.05)
sys.exit(0)
'''

# One agent's part in a two-node c10d rendezvous, as torchrun plays it: the host agent holds the store
# in its own process; the other closes the rendezvous once the host's process has gone.
RENDEZVOUS_NODE = '''
import logging, os, sys, time
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
logging.basicConfig(level=logging.WARNING)
role, endpoint, host_gone = sys.argv[1:]
handler = get_rendezvous_handler(RendezvousParameters(
    backend="c10d", endpoint=endpoint, run_id="still-needed", min_nodes=2, max_nodes=2,
    is_host=role == "host", join_timeout=60))
handler.next_rendezvous()
# The host leaves only once the other has its rendezvous too: leaving sooner closes the store under the
# other's last reads of the join, the same death one step earlier, and a different line.
joined = host_gone + ".other-joined"
if role == "host":
    while not os.path.exists(joined):
        time.sleep(0.1)
else:
    open(joined, "w").close()
    while not os.path.exists(host_gone):
        time.sleep(0.1)
print(f"{role} closed the rendezvous: {handler.shutdown()}", flush=True)
'''

# Two gloo ranks; rank 1 dies once after joining, so torchrun restarts both with --max-restarts.
RANK_THAT_DIES_ONCE = '''
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and dist.get_rank() == 1:
    os._exit(1)
dist.barrier()
print(f"rank {dist.get_rank()} restarted and joined", flush=True)
dist.destroy_process_group()
'''

# An FSDP2 model, sharded and stepped as the trainer does, then dropped: is it freed by reference
# counting alone, or only by the garbage collector? (gc is off, so only an explicit collection runs.)
FSDP_MODEL_DROPPED = '''
import gc, weakref
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
gc.disable()
dist.init_process_group("gloo")
def sharded_stepped_model():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    model(torch.ones(2, 8)).sum().backward()
    return weakref.ref(model)
model = sharded_stepped_model()
print(f"alive after its last reference: {model() is not None}", flush=True)
gc.collect()
print(f"alive after gc.collect: {model() is not None}", flush=True)
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def scripts(torch_host: testinfra.host.Host) -> str:
    folder = torch_host.check_output("mktemp -d")
    for name, text in [("worker.py", WORKER_THAT_EXITS_0_ON_SIGTERM), ("rendezvous_node.py", RENDEZVOUS_NODE),
                       ("rank_that_dies_once.py", RANK_THAT_DIES_ONCE), ("fsdp_model_dropped.py", FSDP_MODEL_DROPPED)]:
        torch_host.check_output(f"cat > {folder}/{name} <<'PY'\n{text}\nPY")
    return folder


def test_torchrun_signalled_itself_still_exits_1_when_its_workers_exit_0(torch_host, scripts):
    command = trainer_command(nproc=1, script=f"{scripts}/worker.py", timeout_s=ATTEMPT_TIMEOUT_S)
    status, _, log = interrupt_when_logged(torch_host, command, scripts, "torchrun", "ready", SIGTERM_TO_TORCHRUN)
    assert status == 1 and "SignalException" in log, (
        f"torchrun now ends with {status} when SIGTERM reaches it and its workers exit 0: stop_policy.py and the tests "
        f"may signal torchrun itself; the workaround can go ({REGISTER}, 'torchrun exits 1 on SIGTERM')\n{log}")


def test_the_c10d_rendezvous_still_dies_with_the_host_agents_process(torch_host, scripts):
    result = torch_host.run(f"""
cd {scripts}
rm -f host-gone host-gone.other-joined
port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout {ATTEMPT_TIMEOUT_S} python rendezvous_node.py host 127.0.0.1:$port host-gone > host.log 2>&1 &
host=$!
timeout {ATTEMPT_TIMEOUT_S} python rendezvous_node.py other 127.0.0.1:$port host-gone 2>&1 &
other=$!
wait $host
touch host-gone
wait $other
""")
    assert "other closed the rendezvous" in result.stdout, result.stdout + result.stderr
    assert "other closed the rendezvous: False" in result.stdout and "failed to shutdown" in result.stdout, (
        "a node now closes the c10d rendezvous after the host agent's process has exited: torchrun_node.py need "
        f"not host the store; the workaround can go ({REGISTER}, 'the c10d store dies with the host agent')\n"
        + result.stdout[-2000:])


def test_restarted_workers_still_fail_with_the_rendezvous_store_shared(torch_host, scripts):
    """The failure is a race (about half the restarts here): up to 6 attempts must show it once."""
    restart_once = trainer_command(script=f"{scripts}/rank_that_dies_once.py", launcher_options="--max-restarts=1",
                                   timeout_s=30)
    attempts = []
    for _ in range(6):
        result = torch_host.run(f"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0 {restart_once} 2>&1")
        attempts.append(result.rc)
        if result.rc != 0:
            return
    pytest.fail(f"6 restarts in a row succeeded with torchrun's store shared (exit statuses {attempts}): "
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 may no longer be needed; run this test a few times, then the "
                f"workaround can go ({REGISTER}, 'restarted workers and the shared store')")


def test_a_dropped_fsdp_model_still_waits_for_the_garbage_collector(torch_host, scripts):
    """The behaviour behind the SIGABRT at teardown is deterministic even where the crash is not: FSDP2's
    modules outlive their last reference until gc runs, so without finish_process_group's collection they
    can still exist when the process group is destroyed."""
    command = trainer_command(nproc=1, script=f"{scripts}/fsdp_model_dropped.py", timeout_s=ATTEMPT_TIMEOUT_S)
    output = torch_host.run(f"{command} 2>&1").stdout
    assert "alive after gc.collect: False" in output, f"the collection no longer frees the model:\n{output}"
    assert "alive after its last reference: True" in output, (
        "FSDP2's modules are now freed by reference counting alone: finish_process_group's gc.collect() may go; "
        f"run the FSDP tests a few times without it first ({REGISTER}, \"FSDP's reference cycles outlive the process "
        f"group\")\n{output}")
