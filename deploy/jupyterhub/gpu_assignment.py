"""Which GPUs each user's container gets, as Docker device requests (the `--gpus` of `docker run`).

The hub reads one mapping (HUB_GPUS, JSON) from its environment:

    {"default": "all", "users": {"alice": "0,1", "bob": 1}, "groups": {"interns": "none"}}

A value is "all", "none", a count (1, 2: Docker picks that many) or device ids ("0,1" or GPU UUIDs).
A user's own entry wins over their groups' (the first group in name order that has one), and the groups'
over the default. Without HUB_GPUS every container gets every GPU, as `make up` does for one person.
User keys are folded to lowercase, as JupyterHub folds the names people log in with (a warning says
so); group keys are kept as written, as JupyterHub keeps group names.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

# One device as `docker run --gpus device=...` names it: an index, a MIG index (0:1), a GPU or MIG UUID.
DEVICE_ID = re.compile(r"[0-9]+(:[0-9]+)?|(GPU|MIG)-[0-9A-Fa-f-]+")


class GpuAssignmentError(ValueError):
    """A HUB_GPUS value that names no GPUs in a form Docker understands."""


def parse_assignments(text: str, warn: Callable[[str], None] = lambda message: None) -> dict:
    """Reads HUB_GPUS; an empty text means every user gets every GPU. Raises GpuAssignmentError; WARN gets
    one line for each user key that changes when folded to lowercase."""
    if not text.strip():
        return {"default": "all", "users": {}, "groups": {}}
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as error:
        raise GpuAssignmentError(f"HUB_GPUS is not JSON ({error}); write it like "
                                 '{"default": "all", "users": {"alice": "0,1"}}') from error
    if not isinstance(mapping, dict) or set(mapping) - {"default", "users", "groups"}:
        raise GpuAssignmentError("HUB_GPUS must be a JSON object with only the keys default, users and groups")
    for key in ("users", "groups"):
        entries = mapping.get(key, {})
        if not isinstance(entries, dict) or not all(isinstance(name, str) and name for name in entries):
            raise GpuAssignmentError(f"HUB_GPUS {key!r} must be a JSON object of names and GPUs, like "
                                     f'{{"{key}": {{"alice": "0,1"}}}}; it is {json.dumps(entries)}')
    assignments = {"default": mapping.get("default", "all"), "users": fold_user_names(mapping.get("users", {}), warn),
                   "groups": mapping.get("groups", {})}
    for value in [assignments["default"], *assignments["users"].values(), *assignments["groups"].values()]:
        device_requests(value)  # fails at start-up, not at someone's first spawn
    return assignments


def fold_user_names(users: dict, warn: Callable[[str], None]) -> dict:
    """USERS with its keys in lowercase: JupyterHub's user names are, and "Alice" would never match."""
    folded: dict = {}
    for name, gpus in users.items():
        if name.lower() in folded:
            raise GpuAssignmentError(f"HUB_GPUS names user {name.lower()!r} twice (in another case); keep one entry")
        if name != name.lower():
            warn(f"HUB_GPUS user {name!r} is read as {name.lower()!r}: JupyterHub folds user names to lowercase")
        folded[name.lower()] = gpus
    return folded


def gpus_for(assignments: dict, user: str, groups: Iterable[str]) -> str | int:
    """The GPUs USER gets: their own entry, else their first group's (in name order), else the default."""
    if user in assignments["users"]:
        return assignments["users"][user]
    for group in sorted(groups):
        if group in assignments["groups"]:
            return assignments["groups"][group]
    return assignments["default"]


def device_requests(gpus: str | int) -> list[dict]:
    """docker-py DeviceRequest arguments for GPUS: all, none, a count, or comma-separated device ids."""
    if isinstance(gpus, bool):
        raise GpuAssignmentError(f"HUB_GPUS value {gpus!r} is not all, none, a count or device ids")
    if gpus == "none" or gpus == 0:
        return []
    request = {"driver": "nvidia", "capabilities": [["gpu"]]}
    if gpus == "all":
        return [{**request, "count": -1}]
    if isinstance(gpus, int) and gpus > 0:
        return [{**request, "count": gpus}]
    if isinstance(gpus, str) and all(DEVICE_ID.fullmatch(device) for device in gpus.split(",")):
        return [{**request, "device_ids": gpus.split(",")}]
    raise GpuAssignmentError(f"HUB_GPUS value {gpus!r} is not all, none, a count or device ids like \"0,1\"")
