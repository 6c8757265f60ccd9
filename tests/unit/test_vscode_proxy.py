"""VS Code's entry in jupyter_server_config.py, read without building the -vscode variant: what
jupyter-server-proxy is told to start, where, on what, and the launcher tile it shows; and that the
default image, which has no code-server, offers neither.

    make test-unit PYTEST_ARGS=tests/unit/test_vscode_proxy.py
"""
from __future__ import annotations

import os
import os.path
from xml.etree import ElementTree
from collections import defaultdict

import pytest

from jupyter_proxy_without_token import without_token
from tests.support import REPO_ROOT

ROOTFS = REPO_ROOT / "docker" / "rootfs"
CONFIG = ROOTFS / "etc" / "jupyter" / "jupyter_server_config.py"
TOKEN_MODE = {"JUPYTER_TOKEN": "a-token-of-24-characters", "JUPYTER_CONTAINER_PORT": "8888"}
HUB_MODE = {"JUPYTERHUB_API_TOKEN": "from-the-hub", "JUPYTERHUB_ROOT_DIR": "/workspace/alice"}


class Section(defaultdict):
    """A stand-in for traitlets' Config: any section, by attribute or by key, made on first use."""

    def __init__(self) -> None:
        super().__init__(Section)

    def __getattr__(self, name: str):
        return self[name]

    def __setattr__(self, name: str, value) -> None:
        self[name] = value


def proxied_servers(monkeypatch, environment: dict[str, str], variant: bool) -> dict:
    """c.ServerProxy.servers as the config file leaves it in ENVIRONMENT, in the variant (code-server's Node
    present) or in the default image."""
    for name in [name for name in os.environ if name.startswith(("JUPYTER", "NB_PREFIX"))]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: variant if path.startswith("/opt/code-server/") else exists(path))
    config = Section()
    exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), {"get_config": lambda: config})
    return config.ServerProxy.servers


def in_the_image(path: str):
    return ROOTFS / path.lstrip("/")


@pytest.mark.parametrize(("environment", "folder"), [(TOKEN_MODE, "/workspace"), (HUB_MODE, "/workspace/alice")],
                         ids=["token", "hub"])
def test_the_variant_serves_code_server_on_a_socket_opened_on_the_servers_folder(monkeypatch, environment, folder):
    vscode = proxied_servers(monkeypatch, environment, variant=True)["vscode"]
    wrapper, socket, opened = vscode["command"]
    assert (wrapper, socket, opened) == ("/usr/local/lib/container/jupyter/code-server", "{unix_socket}", folder)
    assert os.access(in_the_image(wrapper), os.X_OK), "the wrapper must be executable in the image"
    # A socket the proxy makes, and no port: nothing reaches code-server around Jupyter's login.
    assert vscode["unix_socket"] is True and "{port}" not in vscode["command"]
    assert vscode.get("absolute_url", False) is False  # code-server serves relative paths under any prefix
    assert vscode["new_browser_tab"] is True


def test_the_launcher_tile_is_named_vs_code_and_shows_an_icon_the_image_has(monkeypatch):
    tile = proxied_servers(monkeypatch, TOKEN_MODE, variant=True)["vscode"]["launcher_entry"]
    assert tile["title"] == "VS Code"
    assert tile.get("enabled", True) is True
    icon = ElementTree.parse(in_the_image(tile["icon_path"])).getroot()
    assert icon.tag == "{http://www.w3.org/2000/svg}svg" and icon.get("viewBox"), icon.attrib


def test_the_wrapper_turns_code_servers_own_login_off_and_listens_only_on_the_socket():
    wrapper = in_the_image("/usr/local/lib/container/jupyter/code-server").read_text()
    launch = wrapper[wrapper.index("exec "):]
    assert '--socket "$socket"' in launch and "--socket-mode 0600" in launch and "--auth none" in launch
    assert "--bind-addr" not in wrapper and "--port" not in wrapper


def test_the_default_image_offers_no_vscode_and_keeps_tensorboard(monkeypatch):
    servers = proxied_servers(monkeypatch, TOKEN_MODE, variant=False)
    assert set(servers) == {"tensorboard"}


@pytest.mark.parametrize(("asked", "forwarded"), [
    ("http://unix:/s:/?folder=%2Fworkspace&token=abc123", "http://unix:/s:/?folder=%2Fworkspace"),
    ("http://127.0.0.1:6006/tensorboard/?token=abc123&run=a%20b", "http://127.0.0.1:6006/tensorboard/?run=a%20b"),
    ("http://127.0.0.1:6006/data?tok%65n=abc123", "http://127.0.0.1:6006/data"),  # spelled with an escape
    ("http://127.0.0.1:6006/data?tokens=2", "http://127.0.0.1:6006/data?tokens=2"),
    ("http://127.0.0.1:6006/data", "http://127.0.0.1:6006/data"),
])
def test_jupyters_token_is_never_forwarded_to_a_proxied_server(asked, forwarded):
    """/vscode/?token=... handed Jupyter's login to code-server, which kept it in coder.json on the volume."""
    assert without_token(asked) == forwarded
