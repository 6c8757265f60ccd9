"""The all-reduce benchmark's arithmetic and flag types (scripts/bench_allreduce.py); tests/image/
test_bench_allreduce.py runs the benchmark itself.

    make test-unit PYTEST_ARGS=tests/unit/test_allreduce_arithmetic.py
"""
from __future__ import annotations

import argparse

import pytest

import bench_allreduce


@pytest.mark.parametrize("text, size", [("8", 8), ("64K", 65536), ("16m", 16 << 20), ("1G", 1 << 30), ("2KB", 2048)])
def test_parse_size_takes_binary_units_as_nccl_tests_does(text, size):
    assert bench_allreduce.parse_size(text) == size


def test_a_bad_size_is_rejected_with_an_example():
    with pytest.raises(argparse.ArgumentTypeError, match="e.g. 64M"):
        bench_allreduce.parse_size("lots")


def test_message_sizes_grow_by_the_factor_and_hold_whole_elements():
    assert bench_allreduce.message_sizes(6, 48, 2, 4) == [4, 12, 24, 48]


@pytest.mark.parametrize("world_size, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_is_the_ring_share_of_the_algorithm_bandwidth(world_size, factor):
    assert bench_allreduce.bus_bandwidth(100.0, world_size) == pytest.approx(100.0 * factor)
