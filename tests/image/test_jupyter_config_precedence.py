"""The image's Jupyter settings hold whatever else lies on Jupyter's config path, and a server that
answers a stranger anyway is stopped before it counts as up (issue 27, item 6).

    make test-image PYTEST_ARGS=tests/image/test_jupyter_config_precedence.py

Jupyter reads a config from every folder of `jupyter --paths` and lets the first one win; the image's
/etc/jupyter used to be the last. A base (NGC keeps a config in /usr/local/etc/jupyter), an installed
extension (sys.prefix/etc/jupyter) or a derived image can each leave one there, so the test derives an
image from the one under test with hostile configs in those places: no token, a password everyone
knows, the whole filesystem as the root, another base URL.
"""
from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, STARTS_S
from tests.support.containers import docker, run_container_to_completion, running_container
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("full")

TOKEN = "precedence-token-5e1f0c9a7b2d"
KNOWN_PASSWORD = "everyone-knows-this"
HOSTILE_SERVER_CONFIG = """
c = get_config()
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.base_url = "/elsewhere/"
c.ServerApp.token = ""
c.IdentityProvider.token = ""
c.PasswordIdentityProvider.token = ""
c.ServerApp.root_dir = "/"
c.FileContentsManager.root_dir = "/"
c.AsyncLargeFileManager.root_dir = "/"
c.ServerApp.disable_check_xsrf = True
"""
# An extension's config is read by JupyterLab itself (jupyter_lab_config) and handed to the server.
HOSTILE_LAB_CONFIG = 'c = get_config()\nc.ServerApp.token = ""\nc.ServerApp.password_required = False\n'
DERIVED_DOCKERFILE = """
FROM IMAGE
USER root
COPY jupyter_server_config.py jupyter_lab_config.py /usr/local/etc/jupyter/
COPY write_env_config.py /tmp/
RUN python3 /tmp/write_env_config.py && rm /tmp/write_env_config.py
"""
# An extension's config in the environment's own etc/jupyter, with a password everyone knows.
WRITE_ENV_CONFIG = f"""
import json, os, sys
from jupyter_server.auth import passwd
folder = os.path.join(sys.prefix, "etc", "jupyter")
os.makedirs(folder, exist_ok=True)
config = {{"PasswordIdentityProvider": {{"hashed_password": passwd({KNOWN_PASSWORD!r})}},
          "ServerApp": {{"root_dir": "/", "token": ""}}}}
with open(os.path.join(folder, "jupyter_server_config.json"), "w") as file:
    json.dump(config, file)
"""


def derived_image(folder, name: str, dockerfile: str, image: str) -> Iterator[str]:
    """Builds DOCKERFILE (FROM IMAGE) with FOLDER's files as an image NAME; yields its tag, then removes it."""
    (folder / "Dockerfile").write_text(dockerfile.replace("IMAGE", image, 1))
    tag = f"pytorch-dev-test-{name}:{uuid.uuid4().hex[:10]}"
    build = subprocess.run(["docker", "build", "--quiet", "--tag", tag, str(folder)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr
    yield tag
    docker("image", "rm", "--force", tag, check=False)


@pytest.fixture(scope="module")
def hostile_image(image, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile-jupyter")
    (folder / "jupyter_server_config.py").write_text(HOSTILE_SERVER_CONFIG)
    (folder / "jupyter_lab_config.py").write_text(HOSTILE_LAB_CONFIG)
    (folder / "write_env_config.py").write_text(WRITE_ENV_CONFIG)
    yield from derived_image(folder, "hostile-jupyter", DERIVED_DOCKERFILE, image)


# A derived image that edits the image's own config, the first on the path: nothing at start-up can see
# that the server it makes answers strangers until it answers one.
OPENING_DOCKERFILE = """
FROM IMAGE
USER root
RUN printf '\\nc.IdentityProvider.token = c.PasswordIdentityProvider.token = ""\\n' >> /etc/jupyter/jupyter_server_config.py
"""


@pytest.fixture(scope="module")
def opened_image(image, tmp_path_factory):
    yield from derived_image(tmp_path_factory.mktemp("opened-jupyter"), "opened-jupyter", OPENING_DOCKERFILE, image)


@pytest.fixture(scope="module")
def hostile_container(hostile_image):
    with running_container(hostile_image, options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                                   "--env", f"JUPYTER_TOKEN={TOKEN}"], timeout=180) as container:
        yield container


def base(container, prefix: str = "/") -> str:
    return f"http://127.0.0.1:{container.published_port(8888)}{prefix}"


def test_competing_configs_leave_the_token_required(hostile_container):
    url = f"{base(hostile_container)}api/contents"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": ""}, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_a_password_set_elsewhere_on_the_path_does_not_log_anyone_in(hostile_container):
    session = requests.Session()
    session.get(f"{base(hostile_container)}login", timeout=HTTP_TIMEOUT_S)
    login = session.post(f"{base(hostile_container)}login", timeout=HTTP_TIMEOUT_S, allow_redirects=False,
                         data={"password": KNOWN_PASSWORD, "_xsrf": session.cookies.get("_xsrf", "")})
    assert login.status_code != 302
    assert session.get(f"{base(hostile_container)}api/contents", timeout=HTTP_TIMEOUT_S).status_code == 403


def test_the_effective_settings_are_the_images(hostile_container):
    """What the running server itself says (its runtime file, as `jupyter server list` reads it)."""
    assert hostile_container.run("touch /workspace/only-in-the-workspace.txt").rc == 0
    servers = hostile_container.run("jupyter server list --json")
    assert servers.rc == 0, servers.stderr
    (server,) = [json.loads(line) for line in servers.stdout.splitlines() if line.strip()]
    assert (server["root_dir"], server["base_url"], server["port"], server["token"]) == \
        ("/workspace", "/", 8888, TOKEN), server
    listing = requests.get(f"{base(hostile_container)}api/contents", params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).json()
    names = {item["name"] for item in listing["content"]}
    assert "only-in-the-workspace.txt" in names and "etc" not in names, names


def test_the_log_says_jupyterlab_is_up_only_after_it_refused_a_stranger(hostile_container):
    lines = [line for line in hostile_container.logs().splitlines() if "JupyterLab is up" in line]
    assert lines == ["[start] JupyterLab is up at http://127.0.0.1:8888/ and refuses requests without its token"]


@pytest.mark.parametrize("base_url", ["/", "/gpu/"])
def test_a_server_that_answers_a_stranger_is_stopped_with_one_line(opened_image, base_url):
    """A server that its config opens anyway (here a derived image's edit of the image's own config; login
    arguments and other config files are refused before it starts, test_jupyter.py) must be caught by the
    check at start-up (before: the server ran open, and the container stayed up)."""
    options = ["--env", "ENABLE_SSH=0", "--env", f"JUPYTER_TOKEN={TOKEN}", "--env", f"JUPYTER_BASE_URL={base_url}"]
    with running_container(opened_image, options=options, healthy=False) as container:
        wait_until(lambda: not container.state()["Running"], timeout=STARTS_S, interval=1,
                   failure=lambda: f"the open server kept running:\n{container.logs()[-2000:]}")
        logs = container.logs()
        errors = [line for line in logs.splitlines() if "ERROR" in line]
        assert len(errors) == 1, logs[-3000:]
        assert (f"JupyterLab answered a request without its token with HTTP 200 (GET http://127.0.0.1:8888{base_url}"
                "api/contents), so it was stopped") in errors[0]
        assert "JupyterLab is up" not in logs
        assert container.state()["ExitCode"] != 0


def test_jupyter_no_config_is_refused_with_one_line(image):
    result = run_container_to_completion(image, options=["--env", "ENABLE_SSH=0", "--env", "JUPYTER_NO_CONFIG=1"])
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1 and "JUPYTER_NO_CONFIG is set" in errors[0], result.stderr
