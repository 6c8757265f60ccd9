"""The JupyterHub of deploy/jupyterhub (its image, compose file and config, its authenticator as shipped),
run for a test or a benchmark: one container of the image under test per user, people who sign up, an
admin who authorizes them, and the way a browser opens a user's JupyterLab through the hub's proxy.

The hub image is built as HUB_TEST_IMAGE (default pytorch-dev-hub:test): give a tag of your own to test
a changed hub beside another run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import pathlib
import re
import secrets
import tempfile
import uuid
from collections.abc import Iterator

import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.compose import compose
from tests.support.containers import docker, engine_memlock_limit, free_port, host_has_nvidia_runtime
from tests.support.jupyter_websockets import JupyterAccess
from tests.support.waiting import wait_until

HUB_DIR = REPO_ROOT / "deploy" / "jupyterhub"
HUB_IMAGE = os.environ.get("HUB_TEST_IMAGE", "pytorch-dev-hub:test")
ADMIN = "hubadmin"
USERS = ("alice", "bob")
SPAWN_TIMEOUT_S = 240


@dataclasses.dataclass
class Hub:
    url: str  # http://127.0.0.1:PORT/
    run: str  # the prefix of every container, volume and network this hub made
    admin_password: str
    compose_args: tuple[tuple[pathlib.Path, ...], dict[str, str]]  # the files and environment of `compose`
    passwords: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def container(self) -> str:
        return f"{self.run}-hub"

    def container_of(self, user: str) -> str:
        return f"{self.run}-{user}"

    def workspace_volume_of(self, user: str) -> str:
        return f"{self.run}-{user}"

    def network_of(self, user: str) -> str:
        return f"{self.run}-net-{user}"

    def logs(self) -> str:
        return docker("logs", self.container, check=False).stderr[-4000:]


def build_hub_image() -> None:
    """The hub image of deploy/jupyterhub, with the build's extra CA (CA_BUNDLE) as the Makefile passes it.
    One build at a time: pytest's workers build it each, and two exporting one tag at once can fail."""
    ca_bundle = os.environ.get("CA_BUNDLE", "")
    secret = ["--secret", f"id=ca_bundle,src={ca_bundle}"] if ca_bundle else []
    lock_path = pathlib.Path(tempfile.gettempdir()) / f"pytorch-dev-tests-{os.getuid()}-hub-image.lock"
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = docker("build", "--quiet", "--tag", HUB_IMAGE, *secret, str(HUB_DIR), timeout=900, check=False)
    assert result.returncode == 0, f"building the hub image failed:\n{result.stderr[-3000:]}"


def site_config(run: str) -> str:
    """What a test site adds in /etc/jupyterhub/conf.d: names of its own for the users' containers and
    volumes, so the test's never meet anyone else's. Nothing about who may log in."""
    return "\n".join([
        f'c.DockerSpawner.name_template = "{run}-{{username}}"',
        f'c.DockerSpawner.volumes = {{"{run}-{{username}}": "/workspace",'
        f' "{run}-{{username}}-cache": "/home/dev/.cache"}}',
    ])


@contextlib.contextmanager
def running_hub(image: str, folder: pathlib.Path, **settings: str) -> Iterator[Hub]:
    """deploy/jupyterhub's compose file up, spawning IMAGE, with ADMIN as its admin (and SETTINGS as
    further variables of its .env); everything it made goes after."""
    build_hub_image()
    run, admin_password = f"pt-hub-{uuid.uuid4().hex[:8]}", secrets.token_hex(12)
    (folder / "conf.d").mkdir()
    (folder / "conf.d" / "test.py").write_text(site_config(run))
    (folder / "admin-password").write_text(admin_password + "\n")
    override = folder / "compose.override.yaml"
    files = (HUB_DIR / "compose.yaml", override)
    override.write_text(f"services:\n  hub:\n    volumes:\n      - {folder / 'conf.d'}:/etc/jupyterhub/conf.d:ro\n")
    user_image, tag = image.rsplit(":", 1)
    port = free_port()
    env = {"HUB_IMAGE": HUB_IMAGE, "HUB_CONTAINER_NAME": f"{run}-hub",
           "HUB_NETWORK": f"{run}-net", "HUB_PORT": str(port), "IMAGE": user_image, "TAG": tag,
           "HUB_ADMIN_USERS": ADMIN, "HUB_ADMIN_PASSWORD_FILE": str(folder / "admin-password"),
           "HUB_GPUS": "" if host_has_nvidia_runtime() else '{"default": "none"}',
           "SHM_SIZE": "1g", "MEMLOCK_LIMIT": str(engine_memlock_limit()), **settings}
    hub = Hub(f"http://127.0.0.1:{port}/", run, admin_password, (files, env))
    started = compose("--project-name", run, "up", "--detach", files=files, env=env)
    try:
        assert started.returncode == 0, started.stderr
        wait_until(lambda: hub_answers(hub), SETTLES_S, failure=hub.logs)
        yield hub
    finally:
        users = {ADMIN, *USERS, *hub.passwords}
        for user in users:
            docker("rm", "--force", f"{run}-{user}", check=False)
        compose("--project-name", run, "down", "--volumes", files=files, env=env)
        for user in users:
            docker("volume", "rm", f"{run}-{user}", f"{run}-{user}-cache", check=False)
            docker("network", "rm", hub.network_of(user), check=False)


def hub_answers(hub: Hub) -> bool:
    try:
        return requests.get(hub.url + "hub/api/", timeout=HTTP_TIMEOUT_S).status_code == 200
    except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
        return False


def form_xsrf(session: requests.Session, url: str) -> str:
    """The _xsrf a page's form carries, as a browser would post it back."""
    page = session.get(url, timeout=HTTP_TIMEOUT_S)
    page.raise_for_status()
    match = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    assert match, f"no _xsrf in the form of {url}"
    return match.group(1)


def sign_up(hub: Hub, user: str, password: str) -> requests.Response:
    """USER signs up on the hub's sign-up page (the answer holds the page's message)."""
    session = requests.Session()
    xsrf = form_xsrf(session, hub.url + "hub/signup")
    return session.post(hub.url + "hub/signup", timeout=HTTP_TIMEOUT_S, data={
        "username": user, "signup_password": password, "signup_password_confirmation": password, "_xsrf": xsrf})


def try_log_in(hub: Hub, user: str, password: str, then: str = "") -> tuple[requests.Session, requests.Response]:
    """Posts the hub's login form, as a browser does; THEN is the page to go to (the default spawns the
    user's server)."""
    session = requests.Session()
    xsrf = form_xsrf(session, hub.url + "hub/login")
    response = session.post(hub.url + "hub/login" + (f"?next={then}" if then else ""), timeout=HTTP_TIMEOUT_S,
                            data={"username": user, "password": password, "_xsrf": xsrf})
    return session, response


def logged_in(response: requests.Response) -> bool:
    return response.ok and "hub/login" not in response.url


def log_in(hub: Hub, user: str, password: str | None = None) -> requests.Session:
    """USER logged in, their server spawning; the admin (with the password of HUB_ADMIN_PASSWORD_FILE)
    logged in on the authorization page, without a server."""
    password = password or (hub.admin_password if user == ADMIN else hub.passwords[user])
    session, response = try_log_in(hub, user, password, "/hub/authorize" if user == ADMIN else "")
    assert logged_in(response), (response.status_code, response.url, response.text[-2000:])
    return session


def admin_action(hub: Hub, admin: requests.Session, action: str, user: str) -> requests.Response:
    """The admin presses a button of /hub/authorize (ACTION: authorize or discard) for USER."""
    xsrf = form_xsrf(admin, hub.url + "hub/authorize")
    return admin.post(hub.url + f"hub/{action}/{user}", data={"_xsrf": xsrf}, timeout=HTTP_TIMEOUT_S)


def add_user(hub: Hub, user: str, admin: requests.Session | None = None) -> None:
    """USER signs up with a password of their own, and the admin authorizes them."""
    hub.passwords[user] = secrets.token_hex(12)
    signed_up = sign_up(hub, user, hub.passwords[user])
    assert signed_up.ok and "sent to the admin" in signed_up.text, signed_up.text[-2000:]
    authorized = admin_action(hub, admin or log_in(hub, ADMIN), "authorize", user)
    assert authorized.ok, (authorized.status_code, authorized.text[-2000:])


def open_jupyterlab(hub: Hub, user: str, session: requests.Session, poll_s: float = 2) -> JupyterAccess:
    """Opens /user/USER/lab every POLL_S seconds until the user's own server answers it (the hub spawns it
    after login)."""
    lab = hub.url + f"user/{user}/lab"

    def lab_page() -> bool:
        response = session.get(lab, timeout=HTTP_TIMEOUT_S)
        return response.status_code == 200 and response.url.startswith(lab) and "JupyterLab" in response.text
    wait_until(lab_page, SPAWN_TIMEOUT_S, interval=poll_s, failure=hub.logs)
    return JupyterAccess(hub.url + f"user/{user}/", session=session)
