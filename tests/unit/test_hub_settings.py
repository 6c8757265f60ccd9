"""deploy/jupyterhub/hub_settings.py: the hub's settings, checked at start, each bad one ending in one line
that names its variable.

    make test-unit PYTEST_ARGS=tests/unit/test_hub_settings.py
"""
from __future__ import annotations

import pytest

from hub_settings import SettingsError, is_username, read_settings


@pytest.fixture()
def env(tmp_path) -> dict[str, str]:
    (tmp_path / "password").write_text("a-long-enough-password\n")
    return {"HUB_USER_IMAGE": "pytorch-dev:gpu-latest", "HUB_NETWORK": "pytorch-dev-hub",
            "HUB_ADMIN_USERS": "alice, bob", "HUB_ADMIN_PASSWORD_FILE": str(tmp_path / "password")}


def test_defaults(env):
    settings = read_settings(env, warn=print)
    assert settings.admin_users == ("alice", "bob")
    assert (settings.idle_timeout_s, settings.pids_limit, settings.memlock_limit, settings.shm_size) == (3600, 8192, -1, "16g")


@pytest.mark.parametrize(("name", "value"), [
    ("HUB_IDLE_TIMEOUT", "1h"), ("HUB_IDLE_TIMEOUT", "-5"),
    ("MEMLOCK_LIMIT", "abc"), ("MEMLOCK_LIMIT", "-2"),
    ("HUB_MEM_LIMIT", "64g"), ("HUB_MEM_LIMIT", "lots"),
    ("SHM_SIZE", "16 GB"),
    ("HUB_PIDS_LIMIT", "0"), ("HUB_PIDS_LIMIT", "many"),
    ("HUB_ADMIN_USERS", ""), ("HUB_ADMIN_USERS", " , "), ("HUB_ADMIN_USERS", "Alice"), ("HUB_ADMIN_USERS", "a b"),
    ("HUB_ADMIN_PASSWORD_FILE", ""), ("HUB_ADMIN_PASSWORD_FILE", "/nonexistent/password"),
    ("HUB_USER_IMAGE", ""), ("HUB_NETWORK", " "),
    ("HUB_GPUS", '{"users": null}'),
])
def test_a_bad_setting_is_one_line_naming_its_variable(env, name, value):
    with pytest.raises(SettingsError) as raised:
        read_settings({**env, name: value}, warn=print)
    assert name in str(raised.value) and "\n" not in str(raised.value)


def test_a_short_admin_password_is_refused(env, tmp_path):
    (tmp_path / "short").write_text("123456789\n")
    with pytest.raises(SettingsError, match="HUB_ADMIN_PASSWORD_FILE holds a password of 9 characters"):
        read_settings({**env, "HUB_ADMIN_PASSWORD_FILE": str(tmp_path / "short")}, warn=print)


@pytest.mark.parametrize(("name", "valid"), [
    ("alice", True), ("a.b_c-9", True), ("a" * 32, True),
    ("a" * 33, False), ("Alice", False), ("9lives", False), ("-x", False), ("mallory#x", False), ("eve?x", False),
    ("zero\u200bwidth", False), ("\u0430lice", False), ("tab\tx", False), ("alice\n", False), ("", False),
])
def test_one_pattern_for_user_names(name, valid):
    assert is_username(name) is valid
