"""The JupyterHub of deploy/jupyterhub (its image, compose file and config), run for a test or a benchmark:
one container of the image under test per user, a test login on the hub's own page, and the way a
browser opens a user's JupyterLab through the hub's proxy.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import secrets
import uuid
from collections.abc import Iterator

import requests

from tests.support import REPO_ROOT
from tests.support.compose import compose
from tests.support.containers import docker, engine_memlock_limit, free_port, host_has_nvidia_runtime
from tests.support.jupyter_websockets import JupyterAccess
from tests.support.waiting import wait_until

HUB_DIR = REPO_ROOT / "deploy" / "jupyterhub"
HUB_IMAGE = "pytorch-dev-hub:test"
USERS = ("alice", "bob")
SPAWN_TIMEOUT_S = 240


@dataclasses.dataclass
class Hub:
    url: str  # http://127.0.0.1:PORT/
    run: str  # the prefix of every container and volume this hub made
    password: str

    def container_of(self, user: str) -> str:
        return f"{self.run}-{user}"

    def workspace_volume_of(self, user: str) -> str:
        return f"{self.run}-{user}"


def build_hub_image() -> None:
    """The hub image of deploy/jupyterhub, with the build's extra CA (CA_BUNDLE) as the Makefile passes it."""
    ca_bundle = os.environ.get("CA_BUNDLE", "")
    secret = ["--secret", f"id=ca_bundle,src={ca_bundle}"] if ca_bundle else []
    result = docker("build", "--quiet", "--tag", HUB_IMAGE, *secret, str(HUB_DIR), timeout=900, check=False)
    assert result.returncode == 0, f"building the hub image failed:\n{result.stderr[-3000:]}"


def site_config(run: str, password: str) -> str:
    """What a test site adds in /etc/jupyterhub/conf.d: a login anyone with the password passes, and names
    of its own, so the test's containers and volumes never meet anyone else's."""
    return "\n".join([
        'c.JupyterHub.authenticator_class = "dummy"',
        f"c.DummyAuthenticator.password = {password!r}",
        f"c.Authenticator.allowed_users = {set(USERS)!r}",
        f'c.DockerSpawner.name_template = "{run}-{{username}}"',
        f'c.DockerSpawner.volumes = {{"{run}-{{username}}": "/workspace", "{run}-{{username}}-cache": "/home/dev/.cache"}}',
    ])


@contextlib.contextmanager
def running_hub(image: str, folder: pathlib.Path) -> Iterator[Hub]:
    """deploy/jupyterhub's compose file up, spawning IMAGE, with a test login; everything it made goes after."""
    build_hub_image()
    run, password = f"pt-hub-{uuid.uuid4().hex[:8]}", secrets.token_hex(12)
    (folder / "conf.d").mkdir()
    (folder / "conf.d" / "test.py").write_text(site_config(run, password))
    override = folder / "compose.override.yaml"
    files = (HUB_DIR / "compose.yaml", override)
    override.write_text(f"services:\n  hub:\n    volumes:\n      - {folder / 'conf.d'}:/etc/jupyterhub/conf.d:ro\n")
    user_image, tag = image.rsplit(":", 1)
    port = free_port()
    limit = engine_memlock_limit()
    env = {"HUB_IMAGE": HUB_IMAGE, "HUB_CONTAINER_NAME": f"{run}-hub",
           "HUB_NETWORK": f"{run}-net", "HUB_PORT": str(port), "IMAGE": user_image, "TAG": tag,
           "HUB_GPUS": "" if host_has_nvidia_runtime() else '{"default": "none"}',
           "SHM_SIZE": "1g", "MEMLOCK_LIMIT": str(limit)}
    started = compose("--project-name", run, "up", "--detach", files=files, env=env)
    try:
        assert started.returncode == 0, started.stderr
        hub = Hub(f"http://127.0.0.1:{port}/", run, password)
        wait_until(lambda: hub_answers(hub), 120, failure=lambda: docker("logs", f"{run}-hub", check=False).stderr[-3000:])
        yield hub
    finally:
        for user in USERS:
            docker("rm", "--force", f"{run}-{user}", check=False)
        compose("--project-name", run, "down", "--volumes", files=files, env=env)
        for user in USERS:
            docker("volume", "rm", f"{run}-{user}", f"{run}-{user}-cache", check=False)


def hub_answers(hub: Hub) -> bool:
    try:
        return requests.get(hub.url + "hub/api/", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def log_in(hub: Hub, user: str) -> requests.Session:
    """Logs USER in on the hub's login page, as a browser does (the form carries the page's _xsrf)."""
    session = requests.Session()
    session.get(hub.url + "hub/login", timeout=30).raise_for_status()
    response = session.post(hub.url + "hub/login", timeout=60, data={
        "username": user, "password": hub.password, "_xsrf": session.cookies.get("_xsrf", path="/hub/")})
    assert response.ok and "hub/login" not in response.url, (response.status_code, response.url)
    return session


def open_jupyterlab(hub: Hub, user: str, session: requests.Session) -> JupyterAccess:
    """Opens /user/USER/lab until the user's own server answers it (the hub spawns it after login)."""
    lab = hub.url + f"user/{user}/lab"

    def lab_page() -> bool:
        response = session.get(lab, timeout=60)
        return response.status_code == 200 and response.url.startswith(lab) and "JupyterLab" in response.text
    wait_until(lab_page, SPAWN_TIMEOUT_S, interval=2,
               failure=lambda: docker("logs", f"{hub.run}-hub", check=False).stderr[-3000:])
    return JupyterAccess(hub.url + f"user/{user}/", session=session)
