"""Accounts on the hub of deploy/jupyterhub as shipped (its jupyterhub_config.py, NativeAuthenticator with
team_authenticator.py): the admin's account exists from the start, nobody can sign up under an admin's
name or a name that is not a user name, passwords must be long and uncommon, wrong passwords lock a
name, the admin's buttons take a POST with the XSRF token, and cookies stay on the hub's own site. Then
the hub's settings: a bad one stops the hub with one line. No user container is spawned here.

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_hub_accounts.py"
"""
from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import docker
from tests.support.hub import (ADMIN, HUB_IMAGE, Hub, add_user, admin_action, form_xsrf, log_in, logged_in,
                               running_hub, sign_up, try_log_in)

pytestmark = pytest.mark.tier("full")

REFUSED = 400
HOME = "/hub/home"  # where a login goes here: no server is spawned


@pytest.fixture(scope="module")
def hub(image, tmp_path_factory) -> Iterator[Hub]:
    # A user key in another case: the hub reads it in lowercase and says so.
    gpus = '{"default": "none", "users": {"Alice": "none"}}'
    with running_hub(image, tmp_path_factory.mktemp("hub"), HUB_GPUS=gpus) as running:
        yield running


@pytest.fixture(scope="module")
def admin(hub) -> requests.Session:
    return log_in(hub, ADMIN)


def test_the_admin_logs_in_with_the_password_of_its_file_and_nobody_else_does(hub, admin):
    home = admin.get(hub.url + "hub/authorize", timeout=HTTP_TIMEOUT_S)
    assert home.status_code == 200 and "Authorization area" in home.text
    _, wrong = try_log_in(hub, ADMIN, "not-the-password-at-all")
    assert not logged_in(wrong) and "Invalid username or password" in wrong.text, wrong.status_code


@pytest.mark.parametrize("name", [ADMIN, ADMIN.upper(), ADMIN.capitalize()])
def test_a_sign_up_under_an_admins_name_is_refused_in_any_case(hub, name):
    password = secrets.token_hex(8)
    signed_up = sign_up(hub, name, password)
    assert signed_up.status_code == REFUSED and "is an admin" in signed_up.text, signed_up.text[-1500:]
    assert not logged_in(try_log_in(hub, name, password)[1])
    # No admin token for whoever tried either.
    token = requests.post(hub.url + f"hub/api/users/{ADMIN}/tokens", timeout=HTTP_TIMEOUT_S,
                          json={"auth": {"username": name, "password": password}})
    assert token.status_code in (401, 403), token.text


@pytest.mark.parametrize("name", [
    "mallory#x", "eve?x",            # a URL would read them as another account
    "zero\u200bwidth", "\u0430lice",  # a zero-width space, a Cyrillic a
    "tab\tname", "new\nline", "two words",
    "a" * 33,                        # longer than a container or volume name takes here
    "-dash", ".dot", "under_", "a/b",
])
def test_a_name_that_is_not_a_user_name_is_refused_at_sign_up_in_one_line(hub, name):
    signed_up = sign_up(hub, name, secrets.token_hex(8))
    if name == "under_":  # a user name after all: the pattern takes it
        assert signed_up.ok and "sent to the admin" in signed_up.text, signed_up.text[-1500:]
        return
    assert signed_up.status_code == REFUSED and "cannot be a user name here: use lowercase letters" in signed_up.text, \
        signed_up.text[-1500:]


@pytest.mark.parametrize(("password", "why"), [
    ("short1!", "at least 10 characters"),
    ("1234567890", "most common"),
    ("qwertyuiop", "most common"),
])
def test_a_short_or_common_password_is_refused_at_sign_up(hub, password, why):
    signed_up = sign_up(hub, "carol", password)
    assert signed_up.status_code == REFUSED and why in signed_up.text, signed_up.text[-1500:]


def test_wrong_passwords_lock_the_name_for_a_while(hub, admin):
    add_user(hub, "dave", admin)
    assert logged_in(try_log_in(hub, "dave", hub.passwords["dave"], HOME)[1])  # the right password works
    for _ in range(5):
        assert not logged_in(try_log_in(hub, "dave", "wrong-password-0")[1])
    assert not logged_in(try_log_in(hub, "dave", hub.passwords["dave"], HOME)[1]), \
        "five wrong passwords left dave's login open"


def test_authorize_and_discard_change_nothing_on_a_get(hub, admin):
    hub.passwords["eve"] = secrets.token_hex(12)
    assert sign_up(hub, "eve", hub.passwords["eve"]).ok
    # What a link on another site makes a logged-in admin's browser do.
    for page in ("authorize/eve", "discard/eve"):
        clicked = admin.get(hub.url + "hub/" + page, timeout=HTTP_TIMEOUT_S)
        assert clicked.status_code == 405, (page, clicked.status_code, clicked.url)
    _, refused = try_log_in(hub, "eve", hub.passwords["eve"])
    assert "has not been authorized" in refused.text, refused.text[-1500:]  # not authorized, not discarded
    # A POST without the page's XSRF token (a form on another site) is refused too.
    forged = admin.post(hub.url + "hub/authorize/eve", timeout=HTTP_TIMEOUT_S)
    assert forged.status_code == 403, forged.status_code
    assert not logged_in(try_log_in(hub, "eve", hub.passwords["eve"])[1])
    # The admin's own button works.
    assert admin_action(hub, admin, "authorize", "eve").ok
    assert logged_in(try_log_in(hub, "eve", hub.passwords["eve"], HOME)[1])


def test_the_hubs_cookies_stay_on_its_own_site(hub, admin):
    # A user of its own: the tests above tried wrong passwords for the admin's name, which lock it.
    add_user(hub, "frank", admin)
    session = requests.Session()
    page = session.get(hub.url + "hub/login", timeout=HTTP_TIMEOUT_S)
    login = session.post(hub.url + "hub/login", timeout=HTTP_TIMEOUT_S, data={
        "username": "frank", "password": hub.passwords["frank"], "_xsrf": form_xsrf(session, hub.url + "hub/login")})
    cookies = [cookie for response in (page, *login.history, login)
               for cookie in response.raw.headers.getlist("Set-Cookie")]
    assert any(cookie.startswith("jupyterhub-hub-login=") for cookie in cookies), cookies
    assert all("SameSite=Strict" in cookie for cookie in cookies), cookies


def test_a_user_key_of_hub_gpus_in_another_case_is_read_in_lowercase_with_a_warning(hub):
    assert "HUB_GPUS user 'Alice' is read as 'alice'" in docker("logs", hub.container, check=False).stderr


@pytest.mark.parametrize(("name", "value"), [
    ("HUB_GPUS", '{"users": null}'),
    ("HUB_GPUS", "[]"),
    ("HUB_GPUS", '{"groups": "x"}'),
    ("HUB_GPUS", '{"default": "all,none"}'),
    ("HUB_GPUS", '{"users": {"bob": "-"}}'),
    ("HUB_IDLE_TIMEOUT", "1h"),
    ("MEMLOCK_LIMIT", "abc"),
    ("HUB_MEM_LIMIT", "64g"),
    ("HUB_PIDS_LIMIT", "lots"),
    ("HUB_ADMIN_USERS", ""),
    ("HUB_ADMIN_USERS", "Root Admin"),
    ("HUB_ADMIN_PASSWORD_FILE", "/nonexistent"),
])
def test_a_bad_setting_stops_the_hub_with_one_line_naming_it(hub, tmp_path, name, value):
    (tmp_path / "password").write_text(secrets.token_hex(12))
    env = {"HUB_USER_IMAGE": "pytorch-dev:any", "HUB_NETWORK": "any", "HUB_ADMIN_USERS": ADMIN,
           "HUB_ADMIN_PASSWORD_FILE": "/run/secrets/password", name: value}
    options = ["--volume", f"{tmp_path / 'password'}:/run/secrets/password:ro"]
    options += [item for key, setting in env.items() for item in ("--env", f"{key}={setting}")]
    started = docker("run", "--rm", "--network", "none", *options, HUB_IMAGE, timeout=120, check=False)
    lines = started.stderr.strip().splitlines()
    assert started.returncode != 0 and "Traceback" not in started.stderr, started.stderr[-3000:]
    assert lines[-1].startswith("[hub] ERROR: ") and name in lines[-1], started.stderr[-3000:]
