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
