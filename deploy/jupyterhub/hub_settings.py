"""The hub's settings: read from its environment (deploy/jupyterhub/compose.yaml passes them) once, at
start, and checked there. A bad value stops the hub with one line that names the variable and says what
to write instead, rather than a traceback at start or a failure at someone's first spawn.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_assignment import GpuAssignmentError, parse_assignments

# One pattern for every user name: it becomes part of a container's, a volume's and a network's name
# and of the hub's URLs, so only characters all of them take, with nothing that looks like another
# letter and nothing a URL reads as a separator (`#`, `?`).
USERNAME = re.compile(r"[a-z][a-z0-9._-]{0,31}")
USERNAME_RULE = ("lowercase letters, digits, '.', '_' and '-', starting with a letter, "
                 "at most 32 characters")
MIN_PASSWORD_LENGTH = 10
# Docker's sizes (--shm-size) and JupyterHub's (mem_limit: K, M, G, T in capitals).
DOCKER_SIZE = re.compile(r"[0-9]+[bkmgBKMG]?")
HUB_SIZE = re.compile(r"[0-9]+(\.[0-9]+)?[KMGT]?")


class SettingsError(ValueError):
    """A setting the hub cannot start with; its text is the one line the hub prints."""


@dataclasses.dataclass(frozen=True)
class HubSettings:
    user_image: str
    network: str
    container_name: str
    admin_users: tuple[str, ...]
    admin_password_file: str
    idle_timeout_s: int
    mem_limit: str
    shm_size: str
    memlock_limit: int
    pids_limit: int
    nccl_debug: str
    gpu_assignments: dict


def is_username(name: str) -> bool:
    return USERNAME.fullmatch(name) is not None


def read_settings(env: Mapping[str, str], warn: Callable[[str], None]) -> HubSettings:
    """Every setting of the hub from ENV; raises SettingsError on the first bad one."""
    try:
        gpu_assignments = parse_assignments(env.get("HUB_GPUS", ""), warn)
    except GpuAssignmentError as error:
        raise SettingsError(str(error)) from error
    return HubSettings(
        user_image=required(env, "HUB_USER_IMAGE", "the image each user's container runs (IMAGE:TAG)"),
        network=required(env, "HUB_NETWORK", "the Docker network of the hub"),
        container_name=env.get("HUB_CONTAINER_NAME", "jupyterhub"),
        admin_users=admin_users(env.get("HUB_ADMIN_USERS", "")),
        admin_password_file=admin_password_file(env.get("HUB_ADMIN_PASSWORD_FILE", "")),
        idle_timeout_s=whole_number(env, "HUB_IDLE_TIMEOUT", "3600", "seconds (3600 for an hour; 0: never)"),
        mem_limit=matching(env, "HUB_MEM_LIMIT", "", HUB_SIZE, "a size like 64G (K, M, G, T in capitals), or empty"),
        shm_size=matching(env, "SHM_SIZE", "16g", DOCKER_SIZE, "a size like 16g"),
        memlock_limit=memlock_limit(env.get("MEMLOCK_LIMIT", "-1")),
        pids_limit=whole_number(env, "HUB_PIDS_LIMIT", "8192", "processes and threads, like 8192", minimum=64),
        nccl_debug=env.get("NCCL_DEBUG", "WARN"),
        gpu_assignments=gpu_assignments,
    )


def required(env: Mapping[str, str], name: str, what: str) -> str:
    if not env.get(name, "").strip():
        raise SettingsError(f"{name} is not set; set it to {what} (deploy/jupyterhub/compose.yaml passes it)")
    return env[name].strip()


def admin_users(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise SettingsError("HUB_ADMIN_USERS is empty; name the hub's admins, comma-separated "
                            "(HUB_ADMIN_USERS=alice): the first gets the password of HUB_ADMIN_PASSWORD_FILE")
    for name in names:
        if not is_username(name):
            raise SettingsError(f"HUB_ADMIN_USERS names {name!r}, which is not a user name; use {USERNAME_RULE}")
    return names


def admin_password_file(path: str) -> str:
    """The file holding the first admin's password: it must be readable and the password long enough."""
    if not path:
        raise SettingsError("HUB_ADMIN_PASSWORD_FILE is not set; set it to a file holding the first admin's "
                            f"password (at least {MIN_PASSWORD_LENGTH} characters)")
    try:
        password = read_password(path)
    except OSError as error:
        raise SettingsError(f"HUB_ADMIN_PASSWORD_FILE {path} cannot be read ({error.strerror}); "
                            "give the hub a readable file holding the first admin's password") from error
    if len(password) < MIN_PASSWORD_LENGTH:
        raise SettingsError(f"HUB_ADMIN_PASSWORD_FILE holds a password of {len(password)} characters; "
                            f"write one of at least {MIN_PASSWORD_LENGTH} into it")
    return path


def read_password(path: str) -> str:
    """The file's text without the line ending an editor or `echo` adds."""
    return Path(path).read_text(encoding="utf-8").rstrip("\r\n")


def whole_number(env: Mapping[str, str], name: str, default: str, what: str, minimum: int = 0) -> int:
    text = env.get(name, "").strip() or default
    if not text.isdigit() or int(text) < minimum:
        raise SettingsError(f"{name}={text!r} is not a whole number of {what}"
                            + (f", at least {minimum}" if minimum else ""))
    return int(text)


def matching(env: Mapping[str, str], name: str, default: str, pattern: re.Pattern, what: str) -> str:
    text = env.get(name, "").strip() or default
    if text and not pattern.fullmatch(text):
        raise SettingsError(f"{name}={text!r} is not {what}")
    return text


def memlock_limit(text: str) -> int:
    text = text.strip() or "-1"
    if not re.fullmatch(r"-1|[0-9]+", text):
        raise SettingsError(f"MEMLOCK_LIMIT={text!r} is not a number of bytes; use -1 for unlimited "
                            "(what NCCL over InfiniBand wants) or a number like 67108864")
    return int(text)
