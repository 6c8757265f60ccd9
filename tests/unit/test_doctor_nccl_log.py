"""doctor's reading of an NCCL log: which network NCCL chose, and each way it quietly chose a worse one.

    make test-unit PYTEST_ARGS=tests/unit/test_doctor_nccl_log.py

The logs below are written by hand from the format strings in NCCL's and aws-ofi-nccl's source, filled
in with made-up hosts, devices and addresses (no one's real output):
  - every line: "%s:%d:%d [%d] NCCL INFO " (host, pid, tid, device)          NCCL src/debug.cc
  - "Using network %s"                                                         NCCL src/init.cc
  - "NET/IB : Using%s %s; OOB %s:%s" with " [%d]%s:%d" and "/%s" per device,
    "NET/IB : No device found."                                                NCCL src/transport/net_ib/init.cc
  - "NET/Socket : Using%s" with " [%d]%s:%s" per interface                     NCCL src/transport/net_socket.cc
  - "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"
    ("/GDRDMA", "(PCI)", "/Shared")                                            NCCL src/transport/net.cc
  - "NCCL_NET_PLUGIN set by environment to %s", "Successfully loaded external network plugin %s",
    "Initialized NET plugin %s", "Failed to initialize NET plugin %s"          NCCL src/plugin/net.cc
  - "NET/Plugin: Could not find:%s%s%s" (each name after a space)              NCCL src/plugin/plugin_open.cc
  - "NET/OFI " before every message                                            aws-ofi-nccl include/nccl_ofi_log.h
  - "Selected provider is %s, fabric is %s (found %d nics)"                    aws-ofi-nccl src/nccl_ofi_net.cpp
"""
from __future__ import annotations

import json

import pytest

from doctor import architecture, cli, network, report

PREFIX = "node-a:4242:4250 [0] NCCL INFO "
MLX = {"mlx5_0": "mlx5_core", "mlx5_1": "mlx5_core"}
EFA = {"rdmap16s27": "efa"}


def nccl_log(*messages: str) -> str:
    # NCCL_DEBUG=INFO output is mixed with the program's own lines; those must be ignored.
    return "\n".join(["step 1 loss 2.31", *(PREFIX + message for message in messages), "done"]) + "\n"


IB_WITH_GDR = nccl_log(
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.10.0.1<0>",
    "Using network IB",
    "Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
    "Channel 01/0 : 15[7] -> 0[0] [receive] via NET/IB/1/GDRDMA",
)
IB_WITHOUT_GDR = nccl_log(
    "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.10.0.1<0>",
    "Using network IB",
    "Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0",
    "Channel 01/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
)
SOCKET = nccl_log(
    "NET/IB : No device found.",
    "NET/Socket : Using [0]eth0:10.10.0.1<0>",
    "Using network Socket",
    "Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
)
OFI_EFA = nccl_log(
    "NCCL_NET_PLUGIN set by environment to aws-ofi",
    "Successfully loaded external network plugin /opt/amazon/ofi-nccl/lib/libnccl-net-aws-ofi.so",
    "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
    "Initialized NET plugin AWS Libfabric",
    "Using network AWS Libfabric",
    "Channel 00/0 : 7[7] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA",
)
OFI_TCP = nccl_log(
    "Successfully loaded external network plugin /opt/amazon/ofi-nccl/lib/libnccl-net-aws-ofi.so",
    "NET/OFI Selected provider is tcp, fabric is 10.10.0.0/16 (found 1 nics)",
    "Initialized NET plugin AWS Libfabric",
    "Using network AWS Libfabric",
)
PLUGIN_NOT_FOUND = nccl_log(
    "NCCL_NET_PLUGIN set by environment to aws-ofi",
    "NET/Plugin: Could not find: aws-ofi libnccl-net-aws-ofi.so",
    "NET/IB : No device found.",
    "NET/Socket : Using [0]eth0:10.10.0.1<0>",
    "Using network Socket",
)


def verdict(text: str, host_devices: dict[str, str] | None = None) -> report.Result:
    return network.evaluate_nccl_network(network.parse_nccl_log(text), host_devices or {})


def test_infiniband_with_gpudirect_rdma_on_every_channel_passes():
    result = verdict(IB_WITH_GDR, MLX)
    assert result.status == report.PASS, result
    assert "NCCL chose IB" in result.finding and "2 inter-node channels, 2 with GPUDirect RDMA" in result.finding
    assert result.data["ib_devices"] == ["[0]mlx5_0:1/IB", "[1]mlx5_1:1/IB"]


def test_tcp_while_the_host_has_infiniband_is_the_silent_fallback():
    result = verdict(SOCKET, MLX)
    assert result.status == report.WARN
    assert "TCP sockets in use although the host has InfiniBand/RoCE devices (mlx5_0, mlx5_1)" in result.finding
    assert "compose.fabric.yaml" in result.fix and "NCCL_NET" in result.fix


def test_tcp_while_the_host_has_efa_names_efa():
    result = verdict(SOCKET, EFA)
    assert result.status == report.WARN and "EFA devices (rdmap16s27)" in result.finding


def test_tcp_where_there_is_no_fabric_is_fine():
    result = verdict(SOCKET)
    assert result.status == report.PASS and "TCP sockets" in result.finding, result


def test_infiniband_without_gpudirect_rdma_on_some_channels_warns():
    result = verdict(IB_WITHOUT_GDR, MLX)
    assert result.status == report.WARN
    assert "InfiniBand without GPUDirect RDMA on 1 of 2 inter-node channels" in result.finding
    assert "nvidia-peermem" in result.fix


def test_infiniband_on_one_node_says_no_channel_crossed_the_network():
    result = verdict(nccl_log("NET/IB : Using [0]mlx5_0:1/IB; OOB ib0:10.10.0.1<0>", "Using network IB"), MLX)
    assert result.status == report.PASS and "no channel crossed the network" in result.finding


def test_the_ofi_plugin_with_the_efa_provider_passes():
    result = verdict(OFI_EFA, EFA)
    assert result.status == report.PASS, result
    assert "NCCL chose AWS Libfabric with the efa provider" in result.finding


def test_the_ofi_plugin_with_another_provider_warns():
    result = verdict(OFI_TCP, EFA)
    assert result.status == report.WARN
    assert "the OFI plugin selected the 'tcp' provider, not EFA" in result.finding
    assert "FI_PROVIDER=efa" in result.fix


def test_a_plugin_asked_for_and_not_found_warns_with_what_nccl_looked_for():
    result = verdict(PLUGIN_NOT_FOUND)
    assert result.status == report.WARN
    assert ("NCCL_NET_PLUGIN=aws-ofi was asked for but not loaded (not found: aws-ofi libnccl-net-aws-ofi.so), "
            "so NCCL fell back to Socket") in result.finding
    assert "LD_LIBRARY_PATH" in result.fix


def test_a_plugin_asked_for_that_fails_to_initialize_warns():
    result = verdict(nccl_log("NCCL_NET_PLUGIN set by environment to aws-ofi",
                              "Failed to initialize NET plugin AWS Libfabric", "Using network IB"), MLX)
    assert result.status == report.WARN and "AWS Libfabric failed to initialize" in result.finding


def test_the_plugin_switched_off_on_purpose_is_no_problem():
    result = verdict(nccl_log("NCCL_NET_PLUGIN set by environment to none", "Using network IB"), MLX)
    assert result.status == report.PASS, result


@pytest.mark.parametrize("text, message", [
    ("step 1 loss 2.31\n", "no NCCL INFO line"),
    (nccl_log("NET/IB : No device found."), "does not say which network"),
])
def test_a_log_that_cannot_tell_warns_and_says_how_to_rerun(text, message):
    result = verdict(text)
    assert result.status == report.WARN and message in result.finding and "NCCL_DEBUG=INFO" in result.fix


def test_the_last_communicators_network_counts():
    assert network.parse_nccl_log(SOCKET + IB_WITH_GDR).network == "IB"


def test_the_command_line_reads_a_log_and_exits_by_its_verdict(tmp_path, capsys):
    log = tmp_path / "nccl.log"
    log.write_text(IB_WITHOUT_GDR)
    assert cli.main(["--nccl-log", str(log), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [check["name"] for check in report["checks"]] == ["network"]
    log.write_text(IB_WITH_GDR)
    assert cli.main(["--nccl-log", str(log)]) == 0
    assert cli.main(["--nccl-log", str(tmp_path / "missing.log")]) == 2
    assert "cannot read the NCCL log" in capsys.readouterr().out


def test_fabric_devices_are_read_with_their_drivers(tmp_path):
    drivers = tmp_path / "drivers"
    for name, driver in {"mlx5_0": "mlx5_core", "rdmap16s27": "efa"}.items():
        (drivers / driver).mkdir(parents=True, exist_ok=True)
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "device").mkdir()
        (tmp_path / "class" / name / "device" / "driver").symlink_to(drivers / driver)
    assert network.fabric_devices(tmp_path / "class") == {"mlx5_0": "mlx5_core", "rdmap16s27": "efa"}
    assert network.fabric_devices(tmp_path / "none") == {}


@pytest.mark.parametrize("page_size, sensitive, status", [
    (4096, {"/x/pyarrow.libs/libjemalloc.so.2": "why"}, report.PASS),
    (65536, {}, report.PASS),
    (65536, {"/x/pyarrow.libs/libjemalloc.so.2": "jemalloc built for 4 KiB pages aborts"}, report.WARN),
])
def test_the_platform_check_reports_the_page_size_and_warns_where_large_pages_break_a_library(
        page_size, sensitive, status):
    result = architecture.platform_verdict("aarch64", page_size, sensitive)
    assert result.status == status
    assert result.finding.startswith(f"aarch64, {report.human_bytes(page_size)} pages")
    if status == report.WARN:
        assert "libjemalloc.so.2" in result.finding and "--with-lg-page=16" in result.fix


@pytest.mark.parametrize("arch, names, node", [
    ("aarch64", ["NVIDIA GH200 480GB"], "a Grace Hopper node (GH200)"),
    ("aarch64", ["NVIDIA GB200", "NVIDIA GB200"], "a Grace Blackwell node (GB200)"),
    ("aarch64", ["NVIDIA H100 80GB HBM3"], ""),   # an arm64 server with PCIe GPUs
    ("aarch64", [], ""),                           # a Mac's Docker Desktop: no GPU
    ("x86_64", ["NVIDIA GH200 480GB"], ""),
])
def test_the_platform_check_names_a_grace_node_where_nvidia_smi_says_so(arch, names, node):
    assert architecture.grace_node(arch, names) == node
    finding = architecture.platform_verdict(arch, 65536, {}, node).finding
    assert finding == f"{arch}, 64 KiB pages" + (f", {node}" if node else "")
