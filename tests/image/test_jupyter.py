"""JupyterLab is always behind authentication: a given token, a password hash, or a generated token.

    make test PYTEST_ARGS="tests/image/test_jupyter.py"
"""
from __future__ import annotations

import re

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import docker, run_container_to_completion, running_container

pytestmark = pytest.mark.tier("landing")

PUBLISH_JUPYTER = ["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0"]
TOKEN = "test-token-4f9d2c7e81b35a06"


def api_url(container) -> str:
    return f"http://127.0.0.1:{container.published_port(8888)}/api"


@pytest.fixture(scope="module")
def jupyter_with_token(image):
    with running_container(image, options=[*PUBLISH_JUPYTER, "--env", f"JUPYTER_TOKEN={TOKEN}"]) as container:
        yield container


def test_the_api_answers_with_the_token(jupyter_with_token):
    response = requests.get(f"{api_url(jupyter_with_token)}/contents", params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200
    assert response.json()["path"] == ""


def test_the_api_refuses_without_the_token_or_with_a_wrong_one(jupyter_with_token):
    url = f"{api_url(jupyter_with_token)}/contents"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": "wrong"}, timeout=HTTP_TIMEOUT_S).status_code == 403


def test_the_lab_page_sends_a_browser_without_token_to_the_login_page(jupyter_with_token):
    url = api_url(jupyter_with_token).removesuffix("/api") + "/lab"
    response = requests.get(url, timeout=HTTP_TIMEOUT_S, allow_redirects=False)
    assert response.status_code == 302
    assert "/login" in response.headers["Location"]


def test_terminals_are_enabled_and_the_root_is_the_workspace(jupyter_with_token):
    headers = {"Authorization": f"token {TOKEN}"}
    terminal = requests.post(f"{api_url(jupyter_with_token)}/terminals", headers=headers, timeout=HTTP_TIMEOUT_S)
    assert terminal.status_code == 200, terminal.text
    assert jupyter_with_token.run("touch /workspace/seen-by-jupyter.txt").rc == 0
    listing = requests.get(f"{api_url(jupyter_with_token)}/contents", headers=headers, timeout=HTTP_TIMEOUT_S).json()
    assert "seen-by-jupyter.txt" in [item["name"] for item in listing["content"]]


@pytest.mark.parametrize("family, address", [("IPv4", "127.0.0.1"), ("IPv6", "[::1]")])
def test_jupyterlab_answers_on_ipv4_and_ipv6_alike(jupyter_with_token, family, address):
    """IPv6-only and dual-stack clusters reach a pod by IPv6; sshd already listens on both."""
    result = jupyter_with_token.run(f"curl --noproxy '*' -sS -o /dev/null -w '%{{http_code}}' "
                                    f"'http://{address}:8888/api/status?token={TOKEN}'")
    assert result.stdout == "200", f"{family}: {result.stdout} {result.stderr}"


@pytest.mark.parametrize("proxies", [["http_proxy", "https_proxy"], ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]],
                         ids=["lower-case", "upper-case"])
def test_a_proxy_in_the_environment_leaves_the_healthcheck_alone(containers, proxies):
    """A shell behind a corporate proxy passes its proxy variables, often without no_proxy."""
    settings = [option for name in proxies for option in ("--env", f"{name}=http://proxy.invalid:3128")]
    container = containers(options=[*PUBLISH_JUPYTER, "--env", f"JUPYTER_TOKEN={TOKEN}", *settings])
    container.wait_until_healthy()


@pytest.mark.parametrize("arguments", [["--ServerApp.base_url=/test/"], ["--ServerApp.base_url", "/test"]],
                         ids=["joined", "apart"])
def test_a_base_url_among_jupyterlabs_arguments_is_the_one_probed_and_shown(containers, arguments):
    """README: arguments after start-services go to JupyterLab. Its base URL must reach the healthcheck
    and the start line too (before: the probe asked /, and the container never turned healthy)."""
    container = containers(command=["start-services", *arguments],
                           options=[*PUBLISH_JUPYTER, "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    assert "JupyterLab is up at http://127.0.0.1:8888/test/" in container.logs(), container.logs()
    url = f"http://127.0.0.1:{container.published_port(8888)}/test/api/status"
    assert requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_a_base_url_argument_that_disagrees_with_the_setting_stops_the_start_with_one_line(image):
    result = run_container_to_completion(image, command=["start-services", "--ServerApp.base_url=/a/"],
                                         options=["--env", "ENABLE_SSH=0", "--env", "JUPYTER_BASE_URL=/b/"])
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "JUPYTER_BASE_URL=/b/ and JupyterLab's argument --ServerApp.base_url /a/ disagree" in errors[0], errors


@pytest.mark.parametrize("arguments", [
    ["--IdentityProvider.token="],
    pytest.param(["--PasswordIdentityProvider.token", "x"], marks=pytest.mark.tier("full")),
    pytest.param(["--ServerApp.token="], marks=pytest.mark.tier("full")),
    pytest.param(["--ServerApp.password=sha1:0"], marks=pytest.mark.tier("full")),
], ids=["identity-provider", "password-identity-provider", "server-token", "server-password"])
def test_a_login_argument_stops_the_start_with_one_line(image, arguments):
    """`start-services --IdentityProvider.token=''` was overridden by the image's login without a word."""
    result = run_container_to_completion(image, command=["start-services", *arguments],
                                         options=["--env", "ENABLE_SSH=0", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"JupyterLab's argument {arguments[0].split('=')[0]} would be overridden" in errors[0], errors


@pytest.mark.parametrize("arguments", [
    ["--config=/tmp/my_config.py"],
    pytest.param(["--config", "/tmp/my_config.py"], marks=pytest.mark.tier("full")),
    pytest.param(["--ServerApp.config_file_name=mine"], marks=pytest.mark.tier("full")),
], ids=["config", "config-apart", "config-file-name"])
def test_a_config_file_argument_stops_the_start_with_one_line(image, arguments):
    """`start-services --config=FILE` made JupyterLab read FILE instead of the image's config: its token,
    base URL and folder were gone without a word (a base URL other than / hid the open server from the
    start-up's probe)."""
    result = run_container_to_completion(image, command=["start-services", *arguments],
                                         options=["--env", "ENABLE_SSH=0", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"JupyterLab's argument {arguments[0].split('=')[0]} would make it read that file" in errors[0], errors
    assert "/home/dev/.jupyter/jupyter_server_config.py, which it reads" in errors[0]


def test_the_token_is_not_repeated_in_jupyters_own_log_lines(jupyter_with_token):
    logs = jupyter_with_token.logs()
    assert TOKEN not in logs


@pytest.mark.parametrize("token_env", [[], ["--env", "JUPYTER_TOKEN="]], ids=["unset", "empty"])
def test_without_a_token_one_is_generated_printed_once_and_kept_in_a_file(containers, token_env):
    container = containers(options=[*PUBLISH_JUPYTER, *token_env])
    container.wait_until_healthy()
    logs = container.logs()
    tokens = re.findall(r"/\?token=([0-9a-f]{48})\b", logs)
    assert len(tokens) == 1, logs
    token = tokens[0]
    assert container.run("cat ~/.jupyter/token").stdout.strip() == token
    assert container.host().file("/home/dev/.jupyter/token").mode == 0o600
    url = f"{api_url(container)}/contents"
    assert requests.get(url, params={"token": token}, timeout=HTTP_TIMEOUT_S).status_code == 200
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403


def test_a_password_hash_enables_password_login(containers):
    password = "correct horse battery staple"
    hasher = containers(command=["python", "-c", "import time; time.sleep(600)"], options=["--env", "ENABLE_SSH=0"])
    hashed = hasher.run(f"python -c 'from jupyter_server.auth import passwd; print(passwd(\"{password}\"))'").stdout.strip()
    container = containers(options=[*PUBLISH_JUPYTER, "--env", f"JUPYTER_PASSWORD_HASH={hashed}"])
    container.wait_until_healthy()
    base = api_url(container).removesuffix("/api")
    session = requests.Session()
    login_page = session.get(f"{base}/login", timeout=HTTP_TIMEOUT_S)
    xsrf = session.cookies.get("_xsrf")
    assert login_page.status_code == 200 and xsrf
    refused = session.post(f"{base}/login", data={"password": "wrong", "_xsrf": xsrf}, timeout=HTTP_TIMEOUT_S,
                           allow_redirects=False)
    assert refused.status_code != 302
    accepted = session.post(f"{base}/login", data={"password": password, "_xsrf": xsrf}, timeout=HTTP_TIMEOUT_S,
                            allow_redirects=False)
    assert accepted.status_code == 302
    assert session.get(f"{base}/api/contents", timeout=HTTP_TIMEOUT_S).status_code == 200


@pytest.mark.tier("full")
def test_a_malformed_password_hash_stops_the_start_with_one_clear_line(image):
    result = run_container_to_completion(image, options=["--env", "ENABLE_SSH=0",
                                                         "--env", "JUPYTER_PASSWORD_HASH=hunter2"])
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "JUPYTER_PASSWORD_HASH is not a Jupyter password hash" in errors[0], result.stderr


def test_jupyter_started_by_hand_without_auth_refuses_to_run_open(containers):
    container = containers(command=["sleep", "infinity"])
    result = container.run("env -u JUPYTER_TOKEN -u JUPYTER_PASSWORD_HASH jupyter lab --port 8899", timeout=60)
    assert result.rc != 0
    assert "refuses to start without authentication" in result.stdout + result.stderr


def make_password_hash(image: str, password: str) -> str:
    result = run_container_to_completion(image, command=[
        "python", "-c", f"from jupyter_server.auth import passwd; print(passwd({password!r}))"], options=["--shm-size=1g"])
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("variable, value, message", [
    ("JUPYTER_PASSWORD_HASH", "<empty password>", "is the hash of an empty password, which lets anyone in"),
    ("JUPYTER_PASSWORD_HASH", "argon2:$argon2id$v=19$m=10240,t=10,p=8$abc$def", "cannot be checked"),
    ("JUPYTER_PASSWORD_HASH", "sha1:salt:not-hex", "cannot be checked"),
    ("JUPYTER_TOKEN", "short-token", "JUPYTER_TOKEN has 11 characters, too few to be secret"),
    ("JUPYTER_TOKEN", "   ", "JUPYTER_TOKEN is only whitespace"),
])
def test_authentication_that_is_open_or_unusable_stops_the_start_with_one_line(image, variable, value, message):
    if value == "<empty password>":
        value = make_password_hash(image, "")
    result = run_container_to_completion(image, options=["--env", "ENABLE_SSH=0", "--env", f"{variable}={value}"])
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr


@pytest.mark.tier("full")
def test_a_generated_token_survives_a_restart(containers):
    container = containers(options=PUBLISH_JUPYTER)
    container.wait_until_healthy()
    first = re.findall(r"/\?token=([0-9a-f]{48})\b", container.logs())
    docker("restart", "--time", "20", container.name)
    container.wait_until_healthy()
    tokens = re.findall(r"/\?token=([0-9a-f]{48})\b", container.logs())
    assert len(first) == 1 and tokens == first * 2, container.logs()
    assert requests.get(f"{api_url(container)}/contents", params={"token": first[0]}, timeout=HTTP_TIMEOUT_S).status_code == 200


@pytest.mark.tier("full")
def test_a_link_planted_at_the_token_file_never_makes_root_write_through_it(containers):
    container = containers(options=PUBLISH_JUPYTER)
    container.wait_until_healthy()
    passwd_before = container.run("sha256sum /etc/passwd").stdout
    # The user replaces the token file with a link to a file of root's, and the next start writes a token.
    assert container.run("rm ~/.jupyter/token && ln -s /etc/passwd ~/.jupyter/token").rc == 0
    docker("restart", "--time", "20", container.name)
    container.wait_until_healthy()
    assert container.run("sha256sum /etc/passwd").stdout == passwd_before
    assert container.run("getent passwd dev").rc == 0
    token = re.findall(r"/\?token=([0-9a-f]{48})\b", container.logs())[-1]
    assert requests.get(f"{api_url(container)}/contents", params={"token": token}, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_platform_auth_in_a_command_skips_no_check_and_refuses_to_run_open(image):
    """JUPYTER_AUTH=platform turns the token off only after start-up checked it and warned; a command's
    own `jupyter lab` gets neither, so it must behave as token mode (timeout: before, it served open)."""
    result = run_container_to_completion(
        image, command=["timeout", "60", "jupyter", "lab", "--port", "8899"],
        options=["--shm-size=1g", "--env", "JUPYTER_AUTH=platform"])
    assert result.returncode not in (0, 124), result.stderr[-3000:]
    assert "refuses to start without authentication" in result.stdout + result.stderr, result.stderr[-3000:]
