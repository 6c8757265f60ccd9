#!/usr/bin/env python3
"""torchrun for one node of a multi-node job, with a clean end: takes exactly torchrun's arguments.

    python torchrun_node.py --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:29400 --rdzv-id=JOB train_ddp.py ...

Why it exists: with the c10d rendezvous, the torchrun agent on HOST also hosts the rendezvous store,
inside its own process. At the end of a job every agent closes the rendezvous through that store, and
when HOST's agent exits first the others log "RendezvousConnectionError ... has failed to shutdown the
rendezvous" for a job that succeeded (torch's DynamicRendezvousHandler.shutdown; nothing in torch
keeps the store up for them). This is a workaround of torch's internals: docs/torch-workarounds.md,
"the c10d store dies with the host agent", says how to tell when it can go.

What it does instead: on the node named by --rdzv-endpoint, this process hosts the store itself and
starts torchrun with `is_host=false`, like every other node. Each node's wrapper registers in that store
and beats while its torchrun runs; when torchrun has exited, the wrapper marks the node done. The host
keeps the store up until every registered node is done or has stopped beating (a lost node), at most
TORCHRUN_NODE_LINGER_S seconds. Any other rendezvous backend runs torchrun unchanged.

Environment: RDZV_IS_HOST=1|0 overrides the "is the endpoint this machine?" guess (for NAT or
aliases); TORCHRUN_NODE_LINGER_S (default 60) bounds the host's wait.
"""
from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time

BEAT_INTERVAL_S = 1.0
LOST_AFTER_S = 10.0  # a node whose beat has not moved for this long was killed or lost its network
DEFAULT_PORT = 29400  # torchrun's default for the c10d rendezvous


def log(message: str) -> None:
    print(f"[torchrun_node] {message}", file=sys.stderr, flush=True)


def first_line(error: BaseException) -> str:
    """An error's type and first line: torch's store errors carry a C++ stack trace after it."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def option_value(args: list[str], name: str) -> str | None:
    """The value of torchrun option NAME (--a-b) in ARGS, in any spelling torchrun accepts."""
    spellings = {name, name.replace("-", "_").replace("__", "--")}
    for index, arg in enumerate(args):
        if arg in spellings and index + 1 < len(args):
            return args[index + 1]
        key, _, value = arg.partition("=")
        if key in spellings and _:
            return value
    return None


def with_client_rendezvous(args: list[str]) -> list[str]:
    """ARGS with is_host=false added to --rdzv-conf, so torchrun connects to our store instead of hosting."""
    for index, arg in enumerate(args):
        key, sep, value = arg.partition("=")
        if key in ("--rdzv-conf", "--rdzv_conf"):
            if sep:
                return [*args[:index], f"{key}={value},is_host=false", *args[index + 1:]]
            return [*args[:index + 1], f"{args[index + 1]},is_host=false", *args[index + 2:]]
    return ["--rdzv-conf=is_host=false", *args]


def is_this_machine(host: str) -> bool:
    """Whether HOST names this machine: it does when one of its addresses can be bound here."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror:
        return False
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 0))
                return True
            except OSError:
                continue
    return False


def open_store(host: str, port: int, is_host: bool, timeout_s: float):
    from torch.distributed import TCPStore  # imported late: `--help`-style failures stay fast

    return TCPStore(host, port, is_master=is_host, multi_tenant=True, wait_for_workers=False,
                    timeout=datetime.timedelta(seconds=timeout_s))


class NodeRegistry:
    """The nodes' presence in the rendezvous store: registration, beats and a done mark per node."""

    def __init__(self, store, run_id: str) -> None:
        self.store = store
        self.prefix = f"torchrun_node/{run_id}"

    def register(self) -> int:
        return self.store.add(f"{self.prefix}/nodes", 1)

    def beat(self, node: int) -> None:
        self.store.add(f"{self.prefix}/beat/{node}", 1)

    def mark_done(self, node: int) -> None:
        self.store.set(f"{self.prefix}/done/{node}", "1")

    def wait_until_all_left(self, linger_s: float) -> None:
        """Returns once every registered node is done or lost, or after LINGER_S seconds."""
        deadline = time.monotonic() + linger_s
        last_beat: dict[int, tuple[int, float]] = {}
        while time.monotonic() < deadline:
            count = self.store.add(f"{self.prefix}/nodes", 0)  # adding 0 reads without blocking
            waiting = []
            for node in range(1, count + 1):
                if self.store.check([f"{self.prefix}/done/{node}"]):
                    continue
                beat = self.store.add(f"{self.prefix}/beat/{node}", 0)
                seen, since = last_beat.get(node, (-1, time.monotonic()))
                if beat != seen:
                    last_beat[node] = (beat, time.monotonic())
                elif time.monotonic() - since > LOST_AFTER_S:
                    continue  # stopped beating: that node is gone and will not close anything
                waiting.append(node)
            if not waiting:
                return
            time.sleep(0.5)
        log(f"stopped waiting for the other nodes to leave the rendezvous after {linger_s:.0f} s")


def beat_until(registry: NodeRegistry, node: int, finished: threading.Event) -> None:
    while not finished.wait(BEAT_INTERVAL_S):
        try:
            registry.beat(node)
        except Exception as error:  # the host went away: torchrun itself reports what that means for the job
            log(f"stopped beating: the rendezvous host does not answer ({first_line(error)})")
            return


STOP_SIGNALS_RECEIVED: list[str] = []


def run_torchrun(args: list[str]) -> int:
    """Runs torchrun ARGS as a child, passing SIGTERM, SIGINT and SIGHUP on; returns its exit status.

    A signal this process ignores stays ignored, here and in torchrun, which inherits it (`nohup` leaves
    SIGHUP so: give torchrun --signals-to-handle=SIGTERM,SIGINT,SIGQUIT too, or it takes SIGHUP back)."""
    ignored = [number for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
               if signal.getsignal(number) is signal.SIG_IGN]
    child = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args])

    def forward(signum: int, frame: object) -> None:
        STOP_SIGNALS_RECEIVED.append(signal.Signals(signum).name)
        if child.poll() is None:
            child.send_signal(signum)

    for stop_signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if stop_signal not in ignored:
            signal.signal(stop_signal, forward)
    status = child.wait()
    return 128 - status if status < 0 else status  # killed by signal N: report 128+N, as a shell does


def main(args: list[str]) -> int:
    endpoint = option_value(args, "--rdzv-endpoint")
    if option_value(args, "--rdzv-backend") != "c10d" or not endpoint:
        return run_torchrun(args)  # nothing of ours to host: torchrun as it is
    host, _, port_text = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    host = host.strip("[]")
    port = int(port_text) if port_text else DEFAULT_PORT
    forced = os.environ.get("RDZV_IS_HOST", "")
    if forced not in ("", "0", "1"):
        sys.exit(f"torchrun_node: RDZV_IS_HOST={forced!r} must be 1 (this node hosts the rendezvous), 0, or unset")
    is_host = forced == "1" if forced else is_this_machine(host)
    run_id = option_value(args, "--rdzv-id") or "none"
    linger_s = float(os.environ.get("TORCHRUN_NODE_LINGER_S", "60"))

    registry = None
    if is_host:
        try:
            registry = NodeRegistry(open_store(host, port, is_host=True, timeout_s=60), run_id)
        except Exception as error:
            sys.exit(f"torchrun_node: cannot host the rendezvous on port {port} ({first_line(error)}); "
                     "is another job using it? pick another port in --rdzv-endpoint")
    finished = threading.Event()
    beats = threading.Thread(target=join_and_beat, args=(host, port, is_host, registry, run_id, finished),
                             daemon=True)
    beats.start()
    status = run_torchrun(with_client_rendezvous(args))
    finished.set()
    beats.join(timeout=10)
    if registry is not None:
        registry.wait_until_all_left(linger_s)
    if STOP_SIGNALS_RECEIVED:
        # torchrun itself exits 1 with a SignalException traceback when stopped; the trainer has saved.
        log(f"stopped by {STOP_SIGNALS_RECEIVED[0]} (torchrun status {status}); the trainer saved a checkpoint "
            "on the way out: run the same command again to resume from it")
    elif status != 0:
        log(ended_message(args, status))
    return status


def ended_message(args: list[str], status: int) -> str:
    """The last line of a failed node: what the usual cause of each failure means for the user."""
    min_nodes = (option_value(args, "--nnodes") or "1").split(":")[0]
    conf = dict(item.partition("=")[::2] for item in (option_value(args, "--rdzv-conf") or "").split(",") if item)
    join_timeout = conf.get("join_timeout", "600")
    return (f"the job ended with status {status} on this node; above, RendezvousTimeoutError means fewer than "
            f"{min_nodes} node(s) (--nnodes) were up within join_timeout={join_timeout} s: start the missing "
            "node(s) and run the same command again, it resumes from the newest checkpoint")


def join_and_beat(host: str, port: int, is_host: bool, registry: NodeRegistry | None, run_id: str,
                  finished: threading.Event) -> None:
    """Registers this node (connecting to the host's store first on other nodes), beats, marks it done."""
    try:
        if registry is None:
            registry = NodeRegistry(open_store(host, port, is_host=False, timeout_s=600), run_id)
        node = registry.register()
    except Exception as error:  # no store: torchrun fails to join as well and says why
        log(f"not registered with the rendezvous host, so it will not wait for this node ({first_line(error)})")
        return
    beat_until(registry, node, finished)
    try:
        registry.mark_done(node)
    except Exception as error:  # the host left already: it waits for nobody, so nothing is lost
        log(f"could not mark this node done: the rendezvous host has gone ({first_line(error)})")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
