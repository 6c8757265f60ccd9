"""The multi-node wrapper's rewriting of torchrun's arguments (scripts/multinode/torchrun_node.py)."""
from __future__ import annotations

import pytest

import torchrun_node


@pytest.mark.parametrize("args, value", [
    (["--rdzv-endpoint", "node0:29400"], "node0:29400"),
    (["--rdzv-endpoint=node0:29400"], "node0:29400"),
    (["--rdzv_endpoint", "node0:29400"], "node0:29400"),
    (["--nnodes=2", "train.py"], None),
    (["--rdzv-endpoint"], None),  # a flag without its value is no value
])
def test_option_value_reads_every_spelling_torchrun_accepts(args, value):
    assert torchrun_node.option_value(args, "--rdzv-endpoint") == value


@pytest.mark.parametrize("args, expected", [
    (["--nnodes=2", "train.py"], ["--rdzv-conf=is_host=false", "--nnodes=2", "train.py"]),
    (["--rdzv-conf=timeout=60", "train.py"], ["--rdzv-conf=timeout=60,is_host=false", "train.py"]),
    (["--rdzv_conf", "timeout=60", "train.py"], ["--rdzv_conf", "timeout=60,is_host=false", "train.py"]),
])
def test_client_rendezvous_is_added_to_whatever_rdzv_conf_was_given(args, expected):
    assert torchrun_node.with_client_rendezvous(args) == expected


def test_an_ignored_store_error_is_logged_as_its_type_and_first_line():
    error = RuntimeError("Connection reset by peer\nException raised from recvBytes at Utils.hpp:787")
    assert torchrun_node.first_line(error) == "RuntimeError: Connection reset by peer"
    assert torchrun_node.first_line(TimeoutError()) == "TimeoutError"
