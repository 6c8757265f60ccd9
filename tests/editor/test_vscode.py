"""VS Code in the browser: the -vscode variant (`make build VSCODE=1`), code-server behind JupyterLab's
login at /vscode/. Built here from this checkout, once for the module: a slow proof, so the full tier.

    make test-all PYTEST_ARGS="tests/editor/test_vscode.py"

A real browser (Debian's Chromium, Playwright) walks as a user does: JupyterLab, the launcher's VS Code
tile, a file of /workspace opened through Quick Open, a 2-rank torchrun typed in VS Code's terminal, and
its checkpoint. The walk passes with the token, behind nginx under /gpu/ (docs/reverse-proxy.md), for a
JupyterHub user (whose /vscode/ another hub user cannot open) and under Kubeflow's NB_PREFIX with
JUPYTER_AUTH=platform. `docker stop` saves a trainer started there; a theme chosen in VS Code outlives
the container on the user's cache volume, and so does an extension an admin baked into a derived image,
installed on the user's first visit and never again.
"""
from __future__ import annotations

import json
import re
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S, STARTS_S
from tests.support.browser import chromium, screenshot
from tests.support.containers import Container, docker, running_container
from tests.support.hub import ADMIN, add_user, log_in, logged_in, open_jupyterlab, running_hub, try_log_in
from tests.support.release import build_variables, make, split_image_ref
from tests.support.reverse_proxy import PREFIX, nginx_in_front_of
from tests.support.stopping import docker_stop_saves, endless_run_command
from tests.support.training import TINY_RUN, trainer_command
from tests.support.waiting import wait_until
from tests.team.test_kubeflow import KUBEFLOW_LIKE, PLATFORM_AUTH
from tests.team.test_kubeflow import PREFIX as NB_PREFIX

pytestmark = pytest.mark.tier("full")

TOKEN = "vscode-test-token-3c1f9e"
BUILD_TIMEOUT_S = 3600  # code-server's install compiles its native modules: many minutes on 2 cores
VARIANT_LABEL = "dev.pytorch-dev.vscode"
CODE_SERVER_VERSION = re.search(r"^ARG CODE_SERVER_VERSION=(\S+)$", (REPO_ROOT / "Dockerfile").read_text(),
                                re.M).group(1)
BROWSER_WAIT_MS = SETTLES_S * 1000
CODE_SERVER_NODE = "/opt/code-server/libexec/code-server"  # Node, under the name the stop knows it by
VIEWPORT = {"width": 1400, "height": 1000}
PICKER_PROBE_MS = 5000  # how long one try of a picker waits for its row before the keys are pressed again
SHORT_RUN = f"{TINY_RUN} --max-steps 4 --save-every 2"  # a checkpoint within seconds of its start
# JupyterLab alone, on a port of the host's loopback, behind the token
WITH_THE_TOKEN = ["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0", "--env", f"JUPYTER_TOKEN={TOKEN}"]


def on_a_cache_volume(volume: str) -> list[str]:
    """Options of a container whose user cache (compose.yaml's user-cache: VS Code's settings and
    extensions) is the named VOLUME, so that a new container of the same volume finds them."""
    return [*WITH_THE_TOKEN, "--volume", f"{volume}:/home/dev/.cache"]


@pytest.fixture(scope="module")
def variant(image: str, flavor: str) -> str:
    """The -vscode variant of the image under test, built from this checkout with the same inputs."""
    name, tag = split_image_ref(image)
    built = make("build", image, flavor, "VSCODE=1", f"TAG={tag}-vscode", *build_variables(), timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return f"{name}:{tag}-vscode"


@pytest.fixture(scope="module")
def editor(variant: str) -> Iterator[Container]:
    with running_container(variant, options=WITH_THE_TOKEN) as container:
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


def vscode_from_the_launcher(page, lab_url: str):
    """Opens JupyterLab at LAB_URL in PAGE, clicks the launcher's VS Code tile and returns the tab it
    opens, once VS Code's workbench shows there."""
    page.goto(lab_url)
    tile = page.locator(".jp-LauncherCard", has_text="VS Code")
    tile.wait_for(timeout=BROWSER_WAIT_MS)
    with page.context.expect_page(timeout=BROWSER_WAIT_MS) as opened:
        tile.click()
    vscode = opened.value
    vscode.set_viewport_size(VIEWPORT)
    vscode.locator(".monaco-workbench").wait_for(timeout=BROWSER_WAIT_MS)
    return vscode


def pick_until_shown(page, keys: tuple[str, ...], text: str, row: str) -> None:
    """Presses KEYS, one after the other (a chord), and types TEXT into the picker they open, until its list
    shows ROW focused, the one Enter picks: the workbench shows before it has loaded its keybindings and its
    built-in extensions (the themes among them), and a picker opened before then stays short of them."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    def shown() -> bool:
        for key in keys:
            page.keyboard.press(key)
        page.keyboard.type(text)
        try:
            page.locator(".quick-input-list .monaco-list-row.focused", has_text=row).wait_for(timeout=PICKER_PROBE_MS)
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
            return False
        return True
    wait_until(shown, SETTLES_S, interval=1, failure=f"{'+'.join(keys)} and {text!r} never showed {row!r}")


def choose_the_theme(page, container: Container, label: str, settings_id: str) -> None:
    """Picks the theme LABEL in VS Code's theme picker (Ctrl+K Ctrl+T) until CONTAINER's settings hold its
    SETTINGS_ID. Now and then, on these machines, a pick made as the picker opens saves another value
    ("__vs") while it shows the theme picked: that is the picker's, not the settings' volume, so pick again."""
    saved = f"grep -rqsF --include=settings.json '\"workbench.colorTheme\": \"{settings_id}\"' ~ /tmp"

    def chosen() -> bool:
        pick_until_shown(page, ("Control+K", "Control+T"), label, label)
        page.keyboard.press("Enter")
        try:
            wait_until(lambda: container.run(saved).rc == 0, PICKER_PROBE_MS / 1000, interval=0.5)
        except AssertionError:
            return False
        return True
    wait_until(chosen, SETTLES_S, interval=1, failure=lambda: "VS Code never saved the theme; its settings: "
               + container.run("grep -rh --include=settings.json colorTheme ~ /tmp").stdout)


def open_through_quick_open(vscode, file_name: str) -> None:
    pick_until_shown(vscode, ("Control+P",), file_name, file_name)
    vscode.keyboard.press("Enter")
    vscode.locator(".tab", has_text=file_name).wait_for(timeout=BROWSER_WAIT_MS)


def run_in_a_new_terminal(vscode, container: Container, command: str) -> None:
    """Opens a terminal of VS Code (a login shell) and types COMMAND at its prompt, once the shell has run
    a command typed there: keys typed while the shell starts can be lost, and a command that lost its
    beginning runs its tail (landing run 65: `bash: chrun: command not found`)."""
    vscode.keyboard.press("Control+Backquote")
    wait_until(lambda: a_terminal_runs(container), SETTLES_S, failure="no terminal started in VS Code")
    # The shell may start before the terminal takes the keyboard from an open file: click into it first.
    terminal = vscode.locator(".terminal-wrapper.active .xterm").first
    terminal.click()
    vscode.wait_for_function("document.activeElement?.classList.contains('xterm-helper-textarea')",
                             timeout=BROWSER_WAIT_MS)
    answered = f"/tmp/terminal-answered-{uuid.uuid4().hex}"

    def the_shell_answers() -> bool:
        vscode.keyboard.type(f"touch {answered}")  # a try that loses keys fails harmlessly; the next one runs
        vscode.keyboard.press("Enter")
        try:
            wait_until(lambda: container.run(f"test -e {answered}").rc == 0, PICKER_PROBE_MS / 1000, interval=0.5)
        except AssertionError:
            return False
        return True
    wait_until(the_shell_answers, SETTLES_S, interval=1,
               failure="VS Code's terminal never ran a command typed into it: see the test's screenshot")
    vscode.keyboard.type(command)
    vscode.keyboard.press("Enter")


def walk_to_a_checkpoint(page, lab_url: str, container: Container, name: str) -> None:
    """The Done-when walk: from JupyterLab at LAB_URL to VS Code, a file of /workspace opened, a 2-rank
    torchrun typed in its terminal, and the checkpoint it saves in /workspace/NAME-ckpt."""
    container.run(f"echo 'print(\"hello from /workspace\")' > /workspace/{name}.py")
    vscode = vscode_from_the_launcher(page, lab_url)
    try:
        open_through_quick_open(vscode, f"{name}.py")
        flags = f"{SHORT_RUN} --ckpt-dir /workspace/{name}-ckpt --metrics-file /workspace/{name}.jsonl"
        run_in_a_new_terminal(vscode, container,
                              f"cd /workspace && {trainer_command(flags, timeout_s=STARTS_S)} > {name}.log 2>&1")
        # The shell creates the log at once: without it the typed command went elsewhere (see NAME.png).
        wait_until(lambda: container.run(f"test -e /workspace/{name}.log").rc == 0, SETTLES_S,
                   failure=f"the command typed into VS Code's terminal never ran: see {name}.png")
        wait_until(lambda: container.run(f"ls /workspace/{name}-ckpt/*.pt").rc == 0, STARTS_S,
                   failure=lambda: container.run(f"cat /workspace/{name}.log").stdout + container.logs()[-2000:])
    finally:
        screenshot(vscode, f"{name}.png")
        vscode.close()


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


def vscode_page(container: Container, within: float = SETTLES_S) -> str:
    """/vscode/ of CONTAINER with the token, once code-server (started by this first visit) answers."""
    def page() -> str | None:
        try:
            answer = requests.get(f"{jupyter_url(container)}/vscode/", headers={"Authorization": f"token {TOKEN}"},
                                  timeout=HTTP_TIMEOUT_S)
        except requests.RequestException:
            return None
        return answer.text if answer.status_code == 200 else None
    return wait_until(page, within, interval=2, failure=lambda: container.logs()[-3000:])


def a_vsix(folder: Path, publisher: str, name: str, version: str, **manifest_fields) -> Path:
    """A minimal extension package as `vsce package` writes one: a zip of its manifest and the extension."""
    vsix = folder / f"{name}-{version}.vsix"
    manifest = {"name": name, "publisher": publisher, "version": version, "displayName": name,
                "engines": {"vscode": "^1.80.0"}, "contributes": {}, **manifest_fields}
    with zipfile.ZipFile(vsix, "w") as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="utf-8"?><Types xmlns='
                         '"http://schemas.openxmlformats.org/package/2006/content-types">'
                         '<Default Extension=".json" ContentType="application/json"/>'
                         '<Default Extension=".vsixmanifest" ContentType="text/xml"/></Types>')
        archive.writestr("extension.vsixmanifest", f'<?xml version="1.0" encoding="utf-8"?><PackageManifest '
                         'Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011"><Metadata>'
                         f'<Identity Language="en-US" Id="{name}" Version="{version}" Publisher="{publisher}"/>'
                         f'<DisplayName>{name}</DisplayName></Metadata><Installation>'
                         '<InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation><Assets>'
                         '<Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json"/>'
                         '</Assets></PackageManifest>')
        archive.writestr("extension/package.json", json.dumps(manifest))
    return vsix


def test_vscode_is_behind_jupyters_login(editor):
    url = f"{jupyter_url(editor)}/vscode/"
    refused = requests.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT_S)
    assert refused.status_code in (302, 403) and "/login" in refused.headers.get("Location", "/login"), refused.status_code
    html = vscode_page(editor)
    assert "code-server" in html or "vscode" in html.lower(), html[:500]
    # code-server's own login is off: the proxy is the only way in, on a socket only the user can open.
    listening = editor.run("ss -ltnpH").stdout
    assert "code-server" not in listening, listening


def test_the_walk_passes_behind_nginx_under_a_prefix(variant):
    """docs/reverse-proxy.md's nginx in front, JupyterLab under /gpu/ (JUPYTER_BASE_URL), TLS: VS Code's
    pages and its terminal's websocket pass nginx and then Jupyter's proxy on their way to code-server."""
    options = [*WITH_THE_TOKEN, "--env", f"JUPYTER_BASE_URL={PREFIX}"]
    with running_container(variant, options=options) as container, \
            nginx_in_front_of(container.published_port(8888)) as (base, _):
        session = chromium()
        context = next(session).new_context(ignore_https_errors=True, viewport=VIEWPORT)  # the test's own CA
        try:
            walk_to_a_checkpoint(context.new_page(), f"{base}lab?token={TOKEN}", container, "vscode-nginx")
        finally:
            context.close()
            next(session, None)


def test_the_walk_passes_for_a_hub_user_and_another_user_is_refused(variant, tmp_path):
    """deploy/jupyterhub spawning the variant: alice logs in on the hub's page and walks; bob, logged in
    too, gets 403 from alice's /vscode/."""
    with running_hub(variant, tmp_path) as hub:
        admin = log_in(hub, ADMIN)
        for user in ("alice", "bob"):
            add_user(hub, user, admin)
        # bob needs only his hub login to be refused: no server of his starts beside alice's on a loaded machine.
        bob, answer = try_log_in(hub, "bob", hub.passwords["bob"], "/hub/home")
        assert logged_in(answer), (answer.status_code, answer.url)
        open_jupyterlab(hub, "alice", log_in(hub, "alice"))  # her server spawned and answering
        session = chromium()
        context = next(session).new_context(viewport=VIEWPORT)
        page = context.new_page()
        try:
            page.goto(hub.url + "hub/login")
            page.fill("input[name=username]", "alice")
            page.fill("input[name=password]", hub.passwords["alice"])
            with page.expect_navigation(timeout=BROWSER_WAIT_MS):
                page.press("input[name=password]", "Enter")
            # ?reset: the login's landing page may have saved an open notebook to her layout before the walk
            # reloads /lab, which would then show the notebook, not the launcher.
            walk_to_a_checkpoint(page, hub.url + "user/alice/lab?reset", Container(hub.container_of("alice")),
                                 "vscode-hub")
        finally:
            screenshot(page, "vscode-hub-lab.png")
            context.close()
            next(session, None)

        refused = bob.get(hub.url + "user/alice/vscode/", timeout=HTTP_TIMEOUT_S)
        assert refused.status_code == 403, (refused.status_code, refused.url, refused.text[:500])
        assert "monaco" not in refused.text and "code-server" not in refused.text


def test_the_walk_passes_under_kubeflows_prefix_with_the_platforms_login(variant):
    """Kubeflow Notebooks' rules (tests/team/test_kubeflow.py): NB_PREFIX, and JUPYTER_AUTH=platform, whose
    host-name check covers /vscode/ as every other page: a page that points its own name at the port is
    refused."""
    with running_container(variant, options=[*KUBEFLOW_LIKE, *PLATFORM_AUTH]) as container:
        base = f"{jupyter_url(container)}{NB_PREFIX}/"
        rebound = requests.get(base + "vscode/", headers={"Host": "rebound.attacker.example"}, timeout=HTTP_TIMEOUT_S)
        assert rebound.status_code == 403, rebound.status_code
        session = chromium()
        context = next(session).new_context(viewport=VIEWPORT)
        try:
            walk_to_a_checkpoint(context.new_page(), base + "lab", container, "vscode-kubeflow")
        finally:
            context.close()
            next(session, None)


def test_a_trainer_in_vscodes_terminal_is_saved_by_docker_stop(variant, editor, tmp_path):
    """The walk with the token, and a trainer that only the stop ends: `docker stop` saves it."""
    browser_session = chromium()
    page = next(browser_session).new_page(viewport=VIEWPORT)
    vscode = None
    try:
        vscode = vscode_from_the_launcher(page, f"{jupyter_url(editor)}/lab?token={TOKEN}")
        run_in_a_new_terminal(vscode, editor, endless_run_command("vscode", 2))
        wait_until(lambda: editor.run("grep -q '\"step\": 2,' /tmp/vscode.jsonl").rc == 0, STARTS_S,
                   failure=lambda: editor.run("cat /tmp/vscode.log").stdout + editor.logs()[-2000:])
    finally:
        screenshot(vscode or page, "vscode-terminal.png")
        page.close()
        next(browser_session, None)

    docker_stop_saves(editor, "vscode", tmp_path)


def test_a_theme_chosen_in_vscode_outlives_the_container(variant):
    """Settings live on the user's cache volume (compose.yaml's user-cache): a theme picked in VS Code's
    theme picker is VS Code's theme in a new container of the same volume, in a browser of its own."""
    volume = f"vscode-cache-{uuid.uuid4().hex[:8]}"
    options = on_a_cache_volume(volume)
    session = chromium()
    browser = next(session)
    try:
        with running_container(variant, options=options) as first:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{jupyter_url(first)}/lab?token={TOKEN}")
            page.goto(f"{jupyter_url(first)}/vscode/")
            page.locator(".monaco-workbench").wait_for(timeout=BROWSER_WAIT_MS)
            assert page.locator(".monaco-workbench.hc-black").count() == 0  # not the default theme
            # Saved wherever VS Code keeps its settings: whether that is the volume is what this test checks.
            choose_the_theme(page, first, "Dark High Contrast", "Default High Contrast")
            page.locator(".monaco-workbench.hc-black").wait_for(timeout=BROWSER_WAIT_MS)
            page.close()
        with running_container(variant, options=options) as second:
            page = browser.new_context(viewport=VIEWPORT).new_page()  # no cookie, no storage of the first
            page.goto(f"{jupyter_url(second)}/lab?token={TOKEN}")
            page.goto(f"{jupyter_url(second)}/vscode/")
            try:
                page.locator(".monaco-workbench.hc-black").wait_for(timeout=BROWSER_WAIT_MS)
            finally:
                screenshot(page, "vscode-theme-kept.png")
    finally:
        next(session, None)
        docker("volume", "rm", "--force", volume, check=False)


def test_an_extension_baked_into_a_derived_image_is_installed_once_and_kept(variant, tmp_path):
    """docs/editors.md's way for machines without Open VSX: an admin's image FROM the variant with a .vsix
    in /usr/local/share/code-server/extensions. The user's first visit of /vscode/ installs it onto the cache
    volume; a new container of the same volume finds it there and installs nothing again."""
    publisher, name, version = "pytorch-dev-tests", "team-snippets", "1.2.3"
    vsix = a_vsix(tmp_path, publisher, name, version)
    (tmp_path / "Dockerfile").write_text(f"FROM {variant}\nCOPY *.vsix /usr/local/share/code-server/extensions/\n")
    derived = f"pytorch-dev-vscode-derived:{uuid.uuid4().hex[:8]}"
    volume = f"vscode-cache-{uuid.uuid4().hex[:8]}"
    options = on_a_cache_volume(volume)
    installed = f"ls ~/.cache/code-server/extensions | grep -x '{publisher}.{name}-{version}'"
    docker("build", "--quiet", "--tag", derived, str(tmp_path), timeout=SETTLES_S)
    try:
        with running_container(derived, options=options) as first:
            assert first.run(installed).rc != 0, "installed before the first visit"
            vscode_page(first)
            assert first.run(installed).rc == 0, first.run("ls -a ~/.cache/code-server/extensions").stdout
            assert f"{vsix.name}' was successfully installed" in first.logs(), first.logs()[-3000:]
        with running_container(derived, options=options) as second:
            vscode_page(second)
            assert second.run(installed).rc == 0, second.run("ls -a ~/.cache/code-server/extensions").stdout
            assert "was successfully installed" not in second.logs(), second.logs()[-3000:]
    finally:
        docker("volume", "rm", "--force", volume, check=False)
        docker("image", "rm", "--force", derived, check=False)


# A proxy as a firewall that drops packets makes one: it accepts every connection and never answers.
SILENT_PROXY = ("import socket\nserver = socket.create_server(('127.0.0.1', 3128), backlog=64)\nheld = []\n"
                "while True:\n    held.append(server.accept())")
BEHIND_THE_SILENT_PROXY = [f"--env={name}=http://127.0.0.1:3128" for name in ("HTTPS_PROXY", "https_proxy")] + [
    f"--env={name}=localhost,127.0.0.1" for name in ("NO_PROXY", "no_proxy")] + [
    "--env=VSCODE_EXTENSION_FETCH_TIMEOUT_S=15"]
# Issue 46: where the network is silent, VS Code opens without waiting for the extension fetch; it used to
# hold /vscode/ until JupyterLab's proxy gave up, after 120 s. The margin above 30 s is for a busy machine.
OPENS_WITHIN_S = 60


def test_a_baked_extension_whose_dependency_cannot_be_fetched_lets_vs_code_open_and_is_named(variant, tmp_path):
    """An extension that needs ms-python.python, behind a proxy that never answers: /vscode/ opens within
    30 s, one line names the extension and what it lacks, and a later visit starts no install again."""
    vsix = a_vsix(tmp_path, "pytorch-dev-tests", "needs-python", "1.0.0", extensionDependencies=["ms-python.python"])
    (tmp_path / "Dockerfile").write_text(f"FROM {variant}\nCOPY *.vsix /usr/local/share/code-server/extensions/\n")
    derived = f"pytorch-dev-vscode-derived:{uuid.uuid4().hex[:8]}"
    volume = f"vscode-cache-{uuid.uuid4().hex[:8]}"
    options = [*on_a_cache_volume(volume), *BEHIND_THE_SILENT_PROXY]
    named = f"code-server: the baked extension {vsix.name} is installed without ms-python.python"
    docker("build", "--quiet", "--tag", derived, str(tmp_path), timeout=SETTLES_S)
    try:
        with running_container(derived, options=options) as first:
            docker("exec", "--detach", first.name, "python3", "-c", SILENT_PROXY)
            listening = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 3128), 2)'"
            wait_until(lambda: first.run(listening).rc == 0, SETTLES_S)
            vscode_page(first, within=OPENS_WITHIN_S)
            assert first.run("ls ~/.cache/code-server/extensions | grep -x 'pytorch-dev-tests.needs-python-1.0.0'").rc == 0
            logs = first.wait_for_log(named, 15 + SETTLES_S)
            assert len([line for line in logs.splitlines() if named in line]) == 1, logs[-3000:]
            # The fetch beside the editor has ended: nothing of it is left unreaped.
            wait_until(lambda: first.run("ps -eo stat= | grep -c '^Z'", user=None).stdout.strip() == "0", SETTLES_S,
                       failure=lambda: first.run("ps -eo pid,ppid,stat,args", user=None).stdout)
        with running_container(derived, options=options) as second:
            vscode_page(second, within=OPENS_WITHIN_S)
            assert second.run("pgrep -f -- '--install-extensio[n]'").rc != 0, "an install started again"
            assert named not in second.logs() and "was successfully installed" not in second.logs()
    finally:
        docker("volume", "rm", "--force", volume, check=False)
        docker("image", "rm", "--force", derived, check=False)


def test_jupyters_token_never_reaches_vs_codes_records(variant):
    """A visit of /vscode/?token=... (a link with the token) leaves the token nowhere on the cache volume, and
    what VS Code records there is its user's alone."""
    with running_container(variant, options=WITH_THE_TOKEN) as container:
        def opened() -> bool:
            try:
                return requests.get(f"{jupyter_url(container)}/vscode/", params={"token": TOKEN},
                                    timeout=HTTP_TIMEOUT_S).status_code == 200
            except requests.RequestException:
                return False
        wait_until(opened, SETTLES_S, interval=2, failure=lambda: container.logs()[-3000:])
        wait_until(lambda: container.run("test -s ~/.cache/code-server/coder.json").rc == 0, SETTLES_S)
        assert TOKEN not in container.run("cat ~/.cache/code-server/coder.json").stdout
        assert container.run("stat -c %a ~/.cache/code-server").stdout.strip() == "700"


def test_vs_code_opens_with_one_line_where_its_cache_cannot_be_written(variant):
    """A cache volume of another uid's: VS Code opens at once with its settings in /tmp, and says so."""
    with running_container(variant, options=[*WITH_THE_TOKEN, "--tmpfs", "/home/dev/.cache:ro"]) as container:
        vscode_page(container, within=OPENS_WITHIN_S)
        container.wait_for_log("code-server: /home/dev/.cache/code-server cannot be written by dev")
