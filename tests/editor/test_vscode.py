"""VS Code in the browser: the -vscode variant (`make build VSCODE=1`), code-server behind JupyterLab's
login at /vscode/. Built here from this checkout, once for the module: a slow proof, so the full tier.

    make test-all PYTEST_ARGS="tests/editor/test_vscode.py"

A real browser (Debian's Chromium, Playwright) opens JupyterLab with the token, opens VS Code from the
launcher, opens a file in /workspace and runs a 2-rank torchrun in VS Code's terminal; `docker stop` then
saves its checkpoint and the container exits 0. Without the token /vscode/ is refused. Behind nginx under
/gpu/ (docs/reverse-proxy.md) the workbench and its terminal work over the proxied websocket.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.browser import chromium, screenshot
from tests.support.containers import Container, docker, running_container
from tests.support.release import build_variables, make, split_image_ref
from tests.support.reverse_proxy import PREFIX, nginx_in_front_of
from tests.support.stopping import docker_stop_saves, endless_run_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("full")

TOKEN = "vscode-test-token-3c1f9e"
BUILD_TIMEOUT_S = 3600  # code-server's install compiles its native modules: many minutes on 2 cores
VARIANT_LABEL = "dev.pytorch-dev.vscode"
CODE_SERVER_VERSION = re.search(r"^ARG CODE_SERVER_VERSION=(\S+)$", (REPO_ROOT / "Dockerfile").read_text(),
                                re.M).group(1)
BROWSER_WAIT_MS = SETTLES_S * 1000
CODE_SERVER_NODE = "/opt/code-server/libexec/code-server"  # Node, under the name the stop knows it by


@pytest.fixture(scope="module")
def variant(image: str, flavor: str) -> str:
    """The -vscode variant of the image under test, built from this checkout with the same inputs."""
    name, tag = split_image_ref(image)
    built = make("build", image, flavor, "VSCODE=1", f"TAG={tag}-vscode", *build_variables(), timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return f"{name}:{tag}-vscode"


@pytest.fixture(scope="module")
def editor(variant: str) -> Iterator[Container]:
    with running_container(variant, options=["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                             "--env", f"JUPYTER_TOKEN={TOKEN}"]) as container:
        yield container


def jupyter_url(container: Container) -> str:
    return f"http://127.0.0.1:{container.published_port(8888)}"


def a_terminal_runs(container: Container) -> bool:
    """Whether a shell runs in one of VS Code's terminals: a bash whose parent is code-server's terminal
    host. (Its screen is drawn on a canvas, so the page holds no text to wait for.)"""
    rows = [line.split(None, 2) for line in container.run("ps -eo pid=,ppid=,args=", user=None).stdout.splitlines()]
    command_of = {row[0]: row[2] for row in rows if len(row) == 3}
    return any(row[2].startswith(("bash", "/bin/bash")) and command_of.get(row[1], "").startswith(CODE_SERVER_NODE)
               for row in rows if len(row) == 3)


def in_the_image(image: str, script: str) -> str:
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", "bash", image, "-c", script], capture_output=True,
                          text=True, timeout=SETTLES_S, check=True).stdout


def test_the_variant_adds_code_server_with_its_own_node_and_nothing_else_runnable(variant, image, flavor):
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", variant).stdout)
    assert labels[VARIANT_LABEL] == CODE_SERVER_VERSION
    assert all(tag.endswith("-vscode") for tag in make("tags", variant, flavor).stdout.split())
    assert in_the_image(variant, f"{CODE_SERVER_NODE} --version").startswith("v24.")
    # No second node or npm on PATH, and the build stage's compilers stayed there.
    probe = "for tool in node npm gcc g++ make; do command -v $tool >/dev/null && echo $tool; done; true"
    assert in_the_image(variant, probe) == in_the_image(image, probe)
    assert not docker("image", "inspect", image, "--format", "{{index .Config.Labels \"" + VARIANT_LABEL + "\"}}"
                      ).stdout.strip(), "the default image must not carry the variant's label"


def test_vscode_is_behind_jupyters_login(editor):
    url = f"{jupyter_url(editor)}/vscode/"
    refused = requests.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT_S)
    assert refused.status_code in (302, 403) and "/login" in refused.headers.get("Location", "/login"), refused.status_code

    def page() -> str | None:
        try:
            answer = requests.get(url, headers={"Authorization": f"token {TOKEN}"}, timeout=HTTP_TIMEOUT_S)
        except requests.RequestException:
            return None
        return answer.text if answer.status_code == 200 else None
    html = wait_until(page, SETTLES_S, interval=2, failure=lambda: editor.logs()[-3000:])
    assert "code-server" in html or "vscode" in html.lower(), html[:500]
    # code-server's own login is off: the proxy is the only way in, on a socket only the user can open.
    listening = editor.run("ss -ltnpH").stdout
    assert "code-server" not in listening, listening


def test_vscode_and_its_websockets_work_behind_nginx_under_a_prefix(variant):
    """docs/reverse-proxy.md's nginx in front, JupyterLab under /gpu/ (JUPYTER_BASE_URL), TLS: the workbench
    and a terminal, both over the websocket that nginx and then Jupyter's proxy carry to code-server."""
    options = ["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0", "--env", f"JUPYTER_TOKEN={TOKEN}",
               "--env", f"JUPYTER_BASE_URL={PREFIX}"]
    with running_container(variant, options=options) as container, \
            nginx_in_front_of(container.published_port(8888)) as (base, _):
        session = chromium()
        context = next(session).new_context(ignore_https_errors=True)  # the test's own certificate
        page = context.new_page()
        page.set_viewport_size({"width": 1400, "height": 1000})
        try:
            page.goto(f"{base}lab?token={TOKEN}")  # the login: a cookie for /gpu/
            page.locator(".jp-LauncherCard", has_text="VS Code").wait_for(timeout=BROWSER_WAIT_MS)
            page.goto(f"{base}vscode/")
            page.locator(".monaco-workbench").wait_for(timeout=BROWSER_WAIT_MS)
            page.keyboard.press("Control+Backquote")
            wait_until(lambda: a_terminal_runs(container), SETTLES_S, failure="no terminal started in VS Code")
        finally:
            screenshot(page, "vscode-behind-nginx.png")
            context.close()
            next(session, None)


def test_a_trainer_in_vscodes_terminal_is_saved_by_docker_stop(variant, editor, tmp_path):
    """The Done-when walk, in Chromium: launcher tile, a file opened, torchrun in the terminal, docker stop."""
    editor.run("printf 'print(\"hello from /workspace\")\\n' > /workspace/hello_vscode.py")
    browser_session = chromium()
    browser = next(browser_session)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    vscode = None
    try:
        page.goto(f"{jupyter_url(editor)}/lab?token={TOKEN}")
        tile = page.locator(".jp-LauncherCard", has_text="VS Code")
        tile.wait_for(timeout=BROWSER_WAIT_MS)
        with page.context.expect_page(timeout=BROWSER_WAIT_MS) as opened:
            tile.click()
        vscode = opened.value
        vscode.set_viewport_size({"width": 1400, "height": 1000})
        vscode.locator(".monaco-workbench").wait_for(timeout=BROWSER_WAIT_MS)
        # A file of /workspace, through Quick Open.
        vscode.keyboard.press("Control+P")
        vscode.keyboard.type("hello_vscode.py")
        vscode.locator(".quick-input-list .monaco-list-row", has_text="hello_vscode.py").first.wait_for(
            timeout=BROWSER_WAIT_MS)
        vscode.keyboard.press("Enter")
        vscode.locator(".tab", has_text="hello_vscode.py").wait_for(timeout=BROWSER_WAIT_MS)
        # A terminal (a login shell), and a 2-rank torchrun typed at its prompt.
        vscode.keyboard.press("Control+Backquote")
        wait_until(lambda: a_terminal_runs(editor), SETTLES_S, failure="no terminal started in VS Code")
        vscode.keyboard.type(endless_run_command("vscode", 2))
        vscode.keyboard.press("Enter")
        wait_until(lambda: editor.run("grep -q '\"step\": 2,' /tmp/vscode.jsonl").rc == 0, SETTLES_S * 2,
                   failure=lambda: editor.run("cat /tmp/vscode.log").stdout + editor.logs()[-2000:])
    finally:
        screenshot(vscode or page, "vscode-terminal.png")
        page.close()
        next(browser_session, None)

    docker_stop_saves(editor, "vscode", tmp_path)
