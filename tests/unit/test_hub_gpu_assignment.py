"""deploy/jupyterhub/gpu_assignment.py: which GPUs each user's container gets (HUB_GPUS).

    make test-unit PYTEST_ARGS=tests/unit/test_hub_gpu_assignment.py
"""
from __future__ import annotations

import pytest

from gpu_assignment import GpuAssignmentError, device_requests, gpus_for, parse_assignments

MAPPING = '{"default": 1, "users": {"alice": "0,1"}, "groups": {"interns": "none", "ml": "all"}}'


@pytest.mark.parametrize(("user", "groups", "expected"), [
    ("alice", ["interns"], "0,1"),       # a user's own entry wins over their groups'
    ("bob", ["ml", "interns"], "none"),  # the first group in name order that has an entry
    ("carol", ["ml"], "all"),
    ("dave", [], 1),                     # no entry: the default
])
def test_a_user_gets_their_own_entry_then_their_groups_then_the_default(user, groups, expected):
    assert gpus_for(parse_assignments(MAPPING), user, groups) == expected


def test_without_a_mapping_everyone_gets_every_gpu():
    assert gpus_for(parse_assignments(""), "anyone", []) == "all"


@pytest.mark.parametrize(("gpus", "expected"), [
    ("all", [{"driver": "nvidia", "capabilities": [["gpu"]], "count": -1}]),
    (2, [{"driver": "nvidia", "capabilities": [["gpu"]], "count": 2}]),
    ("0,3", [{"driver": "nvidia", "capabilities": [["gpu"]], "device_ids": ["0", "3"]}]),
    ("GPU-5f2c1a9e-0b7d", [{"driver": "nvidia", "capabilities": [["gpu"]], "device_ids": ["GPU-5f2c1a9e-0b7d"]}]),
    ("none", []),
    (0, []),
])
def test_values_become_docker_device_requests(gpus, expected):
    assert device_requests(gpus) == expected


@pytest.mark.parametrize("text", [
    "all",                                   # not JSON
    '["all"]',                               # not an object
    '{"defaults": "all"}',                   # a misspelt key would be ignored silently
    '{"users": {"alice": "0;1"}}',           # not device ids
    '{"users": {"alice": -2}}',
    '{"default": true}',
])
def test_a_bad_mapping_fails_when_the_hub_starts_with_one_line(text):
    with pytest.raises(GpuAssignmentError, match="HUB_GPUS"):
        parse_assignments(text)


@pytest.mark.parametrize("text", [
    '{"users": null}',                       # not an object of names
    '{"users": []}',
    '{"groups": "x"}',
    '{"default": "all,none"}',               # words are not device ids
    '{"users": {"alice": "-"}}',
    '{"users": {"alice": "0,,1"}}',
    '{"users": {"alice": 1, "Alice": 2}}',   # one user twice, once folded
])
def test_a_mapping_docker_would_refuse_at_each_spawn_fails_at_start(text):
    with pytest.raises(GpuAssignmentError, match="HUB_GPUS"):
        parse_assignments(text)


def test_user_keys_are_folded_to_lowercase_with_a_warning_and_group_keys_are_kept():
    warnings: list[str] = []
    assignments = parse_assignments('{"users": {"Alice": "none", "bob": 1}, "groups": {"ML": "all"}}', warnings.append)
    assert gpus_for(assignments, "alice", []) == "none"  # JupyterHub's alice, who logged in as Alice
    assert gpus_for(assignments, "carol", ["ML"]) == "all"
    assert warnings == ["HUB_GPUS user 'Alice' is read as 'alice': JupyterHub folds user names to lowercase"]


@pytest.mark.parametrize("gpus", ["0:1", "MIG-5f2c1a9e-0b7d", "GPU-5f2c1a9e-0b7d,1"])
def test_mig_and_uuid_device_ids_are_device_ids(gpus):
    assert device_requests(gpus)[0]["device_ids"] == gpus.split(",")
