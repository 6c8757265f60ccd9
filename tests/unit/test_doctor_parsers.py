"""doctor's pure parts: which kernels run on a GPU, the topology matrix, and its flag types."""
from __future__ import annotations

import argparse

import pytest

from doctor import cli, gpu, report

TOPOLOGY = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\x1b[0m\n"
    "GPU0\t X \tNV18\tSYS\t0-55\t0\n"
    "GPU1\tNV18\t X \tSYS\t0-55\t0\n"
    "GPU2\tSYS\tSYS\t X \t56-111\t1\n"
    "\nLegend:\n  X    = Self\n"
)


@pytest.mark.parametrize("capability, arch_list, status, how", [
    ((9, 0), ["sm_80", "sm_90"], report.PASS, "native kernels"),
    ((8, 6), ["sm_80"], report.PASS, "runs sm_80 kernels"),
    ((9, 0), ["sm_80", "compute_80"], report.WARN, "JIT-compiles compute_80"),
    ((7, 0), ["sm_80", "compute_80"], report.FAIL, "no kernel image"),
    ((9, 0), ["sm_90a"], report.PASS, "native kernels"),
    ((10, 0), ["sm_90a"], report.FAIL, "no kernel image"),  # arch-specific cubins match exactly only
])
def test_kernel_support_follows_cuda_compatibility_rules(capability, arch_list, status, how):
    result_status, result_how = gpu.kernel_support(capability, arch_list)
    assert result_status == status and how in result_how


def test_parse_arch_reads_cubins_and_ptx_and_rejects_the_rest():
    assert gpu.parse_arch("sm_90a") == ("sm", 9, 0, "a")
    assert gpu.parse_arch("compute_120") == ("compute", 12, 0, "")
    assert gpu.parse_arch("gfx90a") is None


def test_parse_topology_reads_every_pair_once_without_colour_codes():
    links = gpu.parse_topology(TOPOLOGY)
    assert links == {(0, 1): "NV18", (0, 2): "SYS", (1, 2): "SYS"}
    assert gpu.describe_links(links) == "1 pair NV18 (NVLink), 2 pairs SYS (" + gpu.link_meaning("SYS") + ")"


def test_parse_topology_of_no_output_is_empty():
    assert gpu.parse_topology("") == {}


@pytest.mark.parametrize("text", ["0", "65536", "http", "-1"])
def test_a_bad_port_is_rejected_with_the_valid_range(text):
    with pytest.raises(argparse.ArgumentTypeError, match="1 to 65535"):
        cli.port_number(text)


def test_check_names_names_unknown_checks_and_accepts_known_ones():
    assert cli.check_names("allreduce, shm") == {"allreduce", "shm"}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown check nope"):
        cli.check_names("shm,nope")
