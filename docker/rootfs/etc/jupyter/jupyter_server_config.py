"""JupyterLab for the container: every interface, /workspace, terminals, and never without auth.

Authentication comes from the environment the entrypoint prepared (/usr/local/lib/container/start/jupyter.sh),
whose JUPYTER_AUTH names who authenticates: `token` (JUPYTER_PASSWORD_HASH for a password login, else
JUPYTER_TOKEN; with neither, the server refuses to start rather than run open), `hub` (a JupyterHub
spawned us: jupyterhub-singleuser takes its address, base URL and logins from the hub's variables),
or `platform` (no login of our own: Kubeflow's Istio or another authenticating proxy in front).

Jupyter reads a config of this name from every folder on its config path (`jupyter --paths`), and the
first folder wins. Start-up puts this file's folder first (JUPYTER_CONFIG_PATH, start/jupyter.sh), so the
settings made here, among them every one that decides who gets in and what the server shows, hold
whatever another config on the path says (NGC's in /usr/local/etc/jupyter, an extension's, a derived
image's). Settings this file does not make stay theirs to make.
"""
import logging
import os
import sys

c = get_config()  # noqa: F821 (injected by Jupyter's config loader)

# A hub's API token means a hub spawned us, whoever chose the command (DockerSpawner's cmd runs
# jupyterhub-singleuser itself). Platform mode only after start-up checked it (start/jupyter.sh marks
# it): `docker run -e JUPYTER_AUTH=platform IMAGE jupyter lab` skips those checks, so it gets a token.
if os.environ.get("JUPYTERHUB_API_TOKEN"):
    auth = "hub"
else:
    auth = os.environ.get("JUPYTER_AUTH", "token")
    if auth == "platform" and os.environ.get("JUPYTER_PLATFORM_AUTH_CHECKED") != "1":
        auth = "token"
if auth != "hub":  # under a hub, JUPYTERHUB_SERVICE_URL and JUPYTERHUB_SERVICE_PREFIX set these
    # Every address of every family: "" binds IPv4 and IPv6 (tornado skips a family the kernel lacks), as
    # sshd does; IPv6-only and dual-stack clusters reach pods by IPv6. ("::" alone would be IPv6 only:
    # tornado sets IPV6_V6ONLY.)
    c.ServerApp.ip = ""
    # For "" (not for "0.0.0.0", which listened as widely) Jupyter warns that the server listens on all
    # addresses without TLS. That is this image's design: a token or password always, TLS at the proxy
    # in front (docs/reverse-proxy.md), so the line would only teach users to ignore warnings.
    logging.getLogger("ServerApp").addFilter(
        lambda record: "is listening on all IP addresses" not in record.getMessage())
    c.ServerApp.port = int(os.environ["JUPYTER_CONTAINER_PORT"])  # set in the Dockerfile
    # Behind a reverse proxy or Kubeflow: JUPYTER_BASE_URL, or NB_PREFIX, as start-up normalized it.
    c.ServerApp.base_url = os.environ.get("JUPYTER_BASE_URL", "/")
    c.ServerApp.sock = ""  # a Unix socket instead of the address above
c.ServerApp.open_browser = False
# The root folder, for the server and for each contents manager Jupyter ships (a setting for a subclass
# would otherwise win over the server's); a hub's Spawner.notebook_dir arrives as JUPYTERHUB_ROOT_DIR.
# Elsewhere start-up's workspace: /workspace, or the volume a platform mounted as a home (start/workspace.sh).
WORKSPACE = os.environ.get("CONTAINER_WORKSPACE") or "/workspace"
ROOT_DIR = os.path.expanduser(os.environ.get("JUPYTERHUB_ROOT_DIR") or WORKSPACE) if auth == "hub" else WORKSPACE
c.ServerApp.root_dir = ROOT_DIR
for manager in ("ContentsManager", "FileContentsManager", "AsyncFileContentsManager", "LargeFileManager",
                "AsyncLargeFileManager"):
    c[manager].root_dir = ROOT_DIR
# Cross-site requests stay refused.
c.ServerApp.disable_check_xsrf = False
c.ServerApp.allow_origin = ""
c.ServerApp.allow_origin_pat = ""
c.ServerApp.terminals_enabled = True
# The browser reaches us through a published port, so the Host header is the docker host's name
# (platform mode, which has no login of its own, narrows this below).
c.ServerApp.allow_remote_access = True
# The sample notebook (copied into the workspace at start, start/notebooks.sh) opens first.
SAMPLE_NOTEBOOK = "examples/ddp_quickstart.ipynb"
if os.path.exists(os.path.join(ROOT_DIR, SAMPLE_NOTEBOOK)):
    c.LabApp.default_url = f"/lab/tree/{SAMPLE_NOTEBOOK}"
# Terminals are login shells, like SSH sessions and tmux windows.
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}

token = os.environ.get("JUPYTER_TOKEN", "")
password_hash = os.environ.get("JUPYTER_PASSWORD_HASH", "")
if auth != "hub":
    # Jupyter's own login, with no password and no way around it unless one of the branches below sets
    # them; each value is set for the class in use too, since a setting for a subclass wins.
    c.ServerApp.identity_provider_class = "jupyter_server.auth.identity.PasswordIdentityProvider"
    c.ServerApp.login_handler_class = "jupyter_server.auth.login.LoginHandler"
    c.PasswordIdentityProvider.hashed_password = ""
    c.PasswordIdentityProvider.password_required = False
if auth == "hub":
    pass  # jupyterhub-singleuser's identity provider asks the hub who is logged in
elif auth == "platform":
    # Start-up checked this mode, logged a warning, and marked it (JUPYTER_PLATFORM_AUTH_CHECKED).
    c.IdentityProvider.token = c.PasswordIdentityProvider.token = ""
    # No login of our own: only the platform's host names (JUPYTER_ALLOWED_HOSTS, checked at start-up) and
    # loopback addresses, so a page that points its own name at a published port cannot use the server.
    c.ServerApp.allow_remote_access = False
    c.ServerApp.local_hostnames = ["localhost", *filter(None, os.environ.get("JUPYTER_ALLOWED_HOSTS", "").split(","))]
elif password_hash:
    c.PasswordIdentityProvider.hashed_password = password_hash
    c.PasswordIdentityProvider.password_required = True
    c.IdentityProvider.token = c.PasswordIdentityProvider.token = token
elif token:
    c.IdentityProvider.token = c.PasswordIdentityProvider.token = token
else:
    raise SystemExit(
        "JupyterLab refuses to start without authentication: set JUPYTER_TOKEN or JUPYTER_PASSWORD_HASH"
    )

# JupyterLab's own shutdowns (File > Shut Down, a terminal or busy kernel shut down) stop the work inside
# first, as docker stop does, and /api/shutdown becomes the container's orderly stop (jupyter_work_first.py).
# Updated, not set: the extensions other configs enable stay enabled.
# Jupyter's token is never forwarded to a proxied server (jupyter_proxy_without_token.py).
sys.path.append("/usr/local/lib/container/jupyter")
c.ServerApp.jpserver_extensions.update({"jupyter_work_first": True, "jupyter_proxy_without_token": True})
# No kernel is restarted once the container's stop has begun (jupyter_work_first.py says why).
c.AsyncIOLoopKernelManager.restarter_class = "jupyter_work_first.RestarterThatStopsWithTheContainer"

# TensorBoard through JupyterLab (jupyter-server-proxy): /tensorboard/ behind the same token or password,
# started on first visit and listening on 127.0.0.1 only, so no other port has to be published.
# It reads TENSORBOARD_LOGDIR, by default the whole workspace (the trainer's --tensorboard-dir lies there).
c.ServerProxy.servers = {
    "tensorboard": {
        "command": ["tensorboard", "--logdir", os.environ.get("TENSORBOARD_LOGDIR", WORKSPACE),
                    "--host", "127.0.0.1", "--port", "{port}", "--path_prefix", "{base_url}tensorboard"],
        # TensorBoard serves its pages under --path_prefix, so the proxy passes the full path on.
        "absolute_url": True,
        "timeout": 120,  # seconds: the first start scans the log folder, slow on a busy machine
        "launcher_entry": {"title": "TensorBoard"},
    },
}

# VS Code in the browser, in the -vscode variant only (make build VSCODE=1): /vscode/ behind the same login,
# started on first visit. It listens on a Unix socket the proxy makes in a private folder, so no port of
# the container reaches it, and its own login is off (/usr/local/lib/container/jupyter/code-server).
CODE_SERVER = "/usr/local/lib/container/jupyter/code-server"
CODE_SERVER_NODE = "/opt/code-server/libexec/code-server"  # what only the variant has
if os.path.exists(CODE_SERVER_NODE):
    c.ServerProxy.servers["vscode"] = {
        "command": [CODE_SERVER, "{unix_socket}", ROOT_DIR],
        "unix_socket": True,
        "timeout": 120,  # seconds: its first start on a busy machine
        "new_browser_tab": True,
        "launcher_entry": {"title": "VS Code", "icon_path": "/usr/local/share/container/vscode.svg"},
    }
