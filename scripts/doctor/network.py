"""Which network NCCL chose, read from its log, against the RDMA devices (InfiniBand, RoCE, EFA) the host
has; and whether the container can use the InfiniBand devices at all."""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from doctor.machine import Machine
from doctor.report import FAIL, PASS, SKIP, WARN, Result, read_text

FABRIC_DEVICES = Path("/sys/class/infiniband")
FABRIC_FIX = ("give the container the fabric: compose.fabric.yaml (InfiniBand, RoCE) or compose.fabric-efa.yaml "
              "(EFA), i.e. the devices in /dev/infiniband, --cap-add=IPC_LOCK and --ulimit memlock=-1 "
              "(docs/scaling-out.md, \"The fabric: InfiniBand, RoCE and EFA\")")
LOUD_FAILURE_HINT = "set NCCL_NET (IB, or the plugin's name) to make NCCL fail instead of falling back"


# ---- Which network NCCL chose, read from the log of a run with NCCL_DEBUG=INFO. Every pattern below is
# one of NCCL's or aws-ofi-nccl's own format strings:
#   "Using network %s"                                   NCCL src/init.cc
#   "NET/IB : Using%s %s; OOB %s:%s" (" [0]mlx5_0:1/IB") NCCL src/transport/net_ib/init.cc
#   "... [send] via NET/%s/%d%s%s%s" ("/GDRDMA")         NCCL src/transport/net.cc
#   "NCCL_NET_PLUGIN set by environment to %s", "Successfully loaded external network plugin %s",
#   "Failed to initialize NET plugin %s"                 NCCL src/plugin/net.cc
#   "NET/Plugin: Could not find:%s%s%s", "NET/Plugin: %s: %s"   NCCL src/plugin/plugin_open.cc
#   "NET/OFI " + "Selected provider is %s, fabric is %s (found %d nics)" (older: "Selected Provider is
#   %s (found %d nics)")                                 aws-ofi-nccl include/nccl_ofi_log.h, src/nccl_ofi_net.cpp
NCCL_INFO_LINE = re.compile(r"NCCL INFO (.*?)\s*$")
NETWORK_IN_USE = re.compile(r"^Using network (.+)$")
IB_DEVICES = re.compile(r"^NET/IB : Using((?: \[\d+\]\S+)*)")
NET_CHANNEL = re.compile(r"\[(?:send|receive)\] via NET/(.+?)/\d+(?:\(\d+\))?(/GDRDMA)?")
PLUGIN_ASKED = re.compile(r"^NCCL_NET_PLUGIN set by environment to (.*)$")
PLUGIN_NOT_FOUND = re.compile(r"^NET/Plugin: Could not find:\s*(.+)$")
PLUGIN_LOAD_ERROR = re.compile(r"^NET/Plugin: (\S+): (.+)$")
PLUGIN_LOADED = re.compile(r"^Successfully loaded external network plugin (.+)$")
PLUGIN_INIT_FAILED = re.compile(r"^Failed to initialize NET plugin (.+)$")
OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is ([^,\s]+)")


@dataclasses.dataclass
class NcclNetworkLog:
    """What one NCCL log says about the network: the last communicator's choice wins."""
    info_lines: int = 0
    network: str = ""
    ib_devices: list[str] = dataclasses.field(default_factory=list)
    channels: int = 0        # channel connections that cross the network
    gdr_channels: int = 0    # ... of them with GPUDirect RDMA
    plugin_asked: str = ""
    plugin_problem: str = ""
    plugin_loaded: str = ""
    ofi_provider: str = ""


def parse_nccl_log(text: str) -> NcclNetworkLog:
    log = NcclNetworkLog()
    for line in text.splitlines():
        info = NCCL_INFO_LINE.search(line)
        if not info:
            continue
        log.info_lines += 1
        message = info.group(1)
        if match := NETWORK_IN_USE.match(message):
            log.network = match.group(1)
        elif match := IB_DEVICES.match(message):
            log.ib_devices = match.group(1).split()
        elif match := NET_CHANNEL.search(message):
            log.channels += 1
            log.gdr_channels += bool(match.group(2))
        elif match := PLUGIN_ASKED.match(message):
            log.plugin_asked = match.group(1).strip()
        elif match := PLUGIN_NOT_FOUND.match(message):
            log.plugin_problem = f"not found: {match.group(1)}"
        elif match := PLUGIN_LOADED.match(message):
            log.plugin_loaded = match.group(1)
        elif match := PLUGIN_INIT_FAILED.match(message):
            log.plugin_problem = f"{match.group(1)} failed to initialize"
        elif match := OFI_PROVIDER.match(message):
            log.ofi_provider = match.group(1)
        elif match := PLUGIN_LOAD_ERROR.match(message):
            log.plugin_problem = f"{match.group(1)}: {match.group(2)}"
    return log


def fabric_devices(root: Path = FABRIC_DEVICES) -> dict[str, str]:
    """{RDMA device: its kernel driver} on this host (mlx5_core for InfiniBand and RoCE, efa for EFA)."""
    if not root.is_dir():
        return {}
    return {device.name: Path(os.path.realpath(device / "device" / "driver")).name for device in sorted(root.iterdir())}


def describe_fabric(devices: dict[str, str]) -> str:
    kinds = "EFA" if all(driver == "efa" for driver in devices.values()) else "InfiniBand/RoCE"
    return f"{kinds} devices ({', '.join(devices)})"


def evaluate_nccl_network(log: NcclNetworkLog, host_devices: dict[str, str]) -> Result:
    """The network check's verdict on a parsed log; HOST_DEVICES are the RDMA devices of the host it ran on."""
    data = dataclasses.asdict(log)
    rerun = "rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS unset, or INIT,NET)"
    if not log.info_lines:
        return Result("network", WARN, "the log has no NCCL INFO line: the run did not set NCCL_DEBUG=INFO", rerun,
                      data)
    if not log.network:
        return Result("network", WARN, "the log does not say which network NCCL chose (no 'Using network' line)",
                      rerun, data)
    problems: list[tuple[str, str]] = []
    if log.plugin_asked and log.plugin_asked.lower() != "none" and not log.plugin_loaded:
        problems.append((f"NCCL_NET_PLUGIN={log.plugin_asked} was asked for but not loaded "
                         f"({log.plugin_problem or 'no plugin loaded'}), so NCCL fell back to {log.network}",
                         "put the plugin's folder on LD_LIBRARY_PATH, or name its file in NCCL_NET_PLUGIN (NCCL "
                         f"looks for libnccl-net-NAME.so); {LOUD_FAILURE_HINT}"))
    if log.ofi_provider and not log.ofi_provider.startswith("efa"):
        problems.append((f"the OFI plugin selected the '{log.ofi_provider}' provider, not EFA",
                         "give the container the EFA devices (compose.fabric-efa.yaml) and set FI_PROVIDER=efa; "
                         "`fi_info -p efa` in the container must list them"))
    fabric = describe_fabric(host_devices) if host_devices else (
        f"InfiniBand/RoCE devices ({' '.join(log.ib_devices)})" if log.ib_devices else "")
    if log.network == "Socket" and fabric:
        problems.append((f"TCP sockets in use although the host has {fabric}: NCCL fell back silently",
                         f"{FABRIC_FIX}; {LOUD_FAILURE_HINT}"))
    if log.network == "IB" and log.gdr_channels < log.channels:
        problems.append((f"InfiniBand without GPUDirect RDMA on {log.channels - log.gdr_channels} of {log.channels} "
                         "inter-node channels: their data goes through host memory",
                         "load nvidia-peermem on the host (modprobe nvidia-peermem), or use DMA-BUF (open GPU kernel "
                         "modules, Linux 5.12+); NCCL_NET_GDR_LEVEL=SYS accepts a GPU and NIC that are far apart"))
    if problems:
        return Result("network", WARN, "; ".join(finding for finding, _ in problems),
                      "; and ".join(fix for _, fix in problems), data)
    return Result("network", PASS, describe_network(log, fabric), data=data)


def describe_network(log: NcclNetworkLog, fabric: str) -> str:
    if log.network == "Socket":
        return "NCCL chose TCP sockets; neither the log nor this host shows InfiniBand or EFA devices"
    chosen = f"NCCL chose {log.network}"
    if log.ib_devices and log.network == "IB":
        chosen += f" ({' '.join(log.ib_devices)})"
    if log.ofi_provider:
        chosen += f" with the {log.ofi_provider} provider"
    if not log.channels:
        return f"{chosen}; no channel crossed the network (a run on one node)"
    return f"{chosen}; {log.channels} inter-node channels, {log.gdr_channels} with GPUDirect RDMA"


def check_network(machine: Machine) -> Result:
    if machine.options.nccl_log is not None:
        path = machine.options.nccl_log
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as error:
            return Result("network", FAIL, f"cannot read the NCCL log {path}: {error.strerror}",
                          "give the path of a readable log of a run with NCCL_DEBUG=INFO")
        return evaluate_nccl_network(parse_nccl_log(text), fabric_devices())
    if not machine.cuda_count:
        return Result("network", SKIP, "needs GPUs: NCCL chooses its network only in a run on GPUs; evaluate the "
                      "log of one with --nccl-log FILE")
    if machine.allreduce_output is None:
        return Result("network", SKIP, "the all-reduce did not run (see the allreduce check)")
    return evaluate_nccl_network(parse_nccl_log(machine.allreduce_output), fabric_devices())


def check_infiniband(machine: Machine) -> Result:
    root = Path("/sys/class/infiniband")
    devices = sorted(root.iterdir()) if root.is_dir() else []
    if not devices:
        return Result("infiniband", PASS,
                      "no InfiniBand devices: NCCL uses TCP sockets between nodes (fine on one node)")
    ports = {f"{device.name}/{port.name}": (read_text(port / "state"), read_text(port / "link_layer"))
             for device in devices for port in sorted((device / "ports").glob("*"))}
    listing = ", ".join(f"{name} {state.split(':')[-1].strip()} {layer}" for name, (state, layer) in ports.items())
    data = {"ports": {name: {"state": state, "link_layer": layer} for name, (state, layer) in ports.items()}}
    if not Path("/dev/infiniband").is_dir():
        return Result("infiniband", WARN, f"{listing}; but /dev/infiniband is missing, so NCCL cannot use them",
                      "docker run --device=/dev/infiniband --cap-add=IPC_LOCK", data)
    if not any(state.endswith("ACTIVE") for state, _ in ports.values()):
        return Result("infiniband", WARN, f"{listing}; no port is ACTIVE",
                      "check the cable and the subnet manager with `ibstat` on the host", data)
    return Result("infiniband", PASS, listing, data=data)
