"""JupyterHub for a team on one GPU host: one container of the pytorch-dev image per user.

Read by the hub image (deploy/jupyterhub/Dockerfile); every setting a site changes comes from the
environment that deploy/jupyterhub/compose.yaml passes (hub_settings.py checks each at start). Files in
/etc/jupyterhub/conf.d/*.py are read last, so a site (or a test) can add settings by mounting one.
"""
import glob
import os
import sys

from dockerspawner import DockerSpawner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_assignment import device_requests, gpus_for  # noqa: E402
from hub_settings import MIN_PASSWORD_LENGTH, SettingsError, read_settings  # noqa: E402
from server_readiness import wait_until_answers  # noqa: E402
from team_authenticator import TeamAuthenticator  # noqa: E402
from user_networks import connect_hub_to_user_networks, give_user_a_network  # noqa: E402

c = get_config()  # noqa: F821 (injected by JupyterHub's config loader)

try:
    SETTINGS = read_settings(os.environ, lambda warning: print(f"[hub] WARNING: {warning}", file=sys.stderr))
except SettingsError as error:
    sys.exit(f"[hub] ERROR: {error}")

# ---- The hub: its proxy on 8000, its API where the users' containers reach it by name.
c.JupyterHub.bind_url = "http://:8000"
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_connect_ip = SETTINGS.container_name
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"
# The hub's cookies go only with requests the hub's own pages make: a form or link on another site
# carries no login (the OAuth round trip to a user's server stays on this site, so Strict holds for it).
c.JupyterHub.tornado_settings = {"cookie_options": {"samesite": "Strict"}}
# Restarting the hub (docker restart, compose up -d after a .env change, an image update) leaves the
# users' servers running: the new hub finds them by the state it keeps in its database, and its proxy,
# which restarts with it, gets their routes again.
c.JupyterHub.cleanup_servers = False

# ---- Who may log in: people sign up at /hub/signup, an admin authorizes them at /hub/authorize.
# The admins' accounts exist from the start (team_authenticator.py). For GitHub, GitLab or OIDC,
# OAuthenticator is installed too (deploy/jupyterhub/README.md).
c.JupyterHub.authenticator_class = TeamAuthenticator
c.JupyterHub.template_paths = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")]
c.Authenticator.admin_users = set(SETTINGS.admin_users)
c.Authenticator.allow_all = True  # the authenticator itself admits only the users an admin authorized
c.TeamAuthenticator.first_admin = SETTINGS.admin_users[0]
c.TeamAuthenticator.admin_password_file = SETTINGS.admin_password_file
c.NativeAuthenticator.open_signup = False
c.NativeAuthenticator.minimum_password_length = MIN_PASSWORD_LENGTH
c.NativeAuthenticator.check_common_password = True
# Five wrong passwords in a row lock that name's login for ten minutes.
c.NativeAuthenticator.allowed_failed_logins = 5
c.NativeAuthenticator.seconds_before_next_try = 600

# ---- What each user gets: their own container of the image, on a network of their own.
class PromptDockerSpawner(DockerSpawner):
    """DockerSpawner whose start returns once the user's server answers (server_readiness.py), so the
    hub's backoff, which can look 3 s late, finds it up at its first check."""

    async def start(self):
        ip, port = await super().start()
        await wait_until_answers(ip, port, self.server.base_url, self.http_timeout, self.container_runs)
        return ip, port

    async def container_runs(self) -> bool:
        return await self.poll() is None


c.JupyterHub.spawner_class = PromptDockerSpawner
c.DockerSpawner.image = SETTINGS.user_image
c.DockerSpawner.network_name = SETTINGS.network  # each spawn replaces it with the user's own network
c.DockerSpawner.use_internal_ip = True
c.DockerSpawner.name_template = "jupyter-{username}"
c.DockerSpawner.remove = True  # the container goes, the user's volumes stay
c.DockerSpawner.notebook_dir = "/workspace"
# One named volume per user for their work, one for pip's cache, torch.compile's and their own packages.
c.DockerSpawner.volumes = {
    "jupyterhub-user-{username}": "/workspace",
    "jupyterhub-user-{username}-cache": "/home/dev/.cache",
}
# Docker stops with 10 s by default; the image stops trainers first (they checkpoint), then its services,
# in up to 25 s (STOP_TIMEOUT): the same 30 s compose gives.
c.DockerSpawner.extra_create_kwargs = {"stop_timeout": 30}
# First start of a big image on a busy machine: give it time.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120
# JUPYTERHUB_ACTIVITY_INTERVAL: how often the server (and the image's supervisor, which reports the
# user's running work) tells the hub it is in use; well within the culler's timeout.
ACTIVITY_INTERVAL_S = max(10, min(300, SETTINGS.idle_timeout_s // 4)) if SETTINGS.idle_timeout_s else 300
c.Spawner.environment = {"NCCL_DEBUG": SETTINGS.nccl_debug, "JUPYTERHUB_ACTIVITY_INTERVAL": str(ACTIVITY_INTERVAL_S)}
if SETTINGS.mem_limit:
    c.Spawner.mem_limit = SETTINGS.mem_limit


def host_config_for(spawner) -> dict:
    """shm, ulimits, PIDs and GPUs of one user's container: what compose.yaml gives one person's container."""
    groups = [group.name for group in spawner.user.groups]
    return {
        "shm_size": SETTINGS.shm_size,
        "ulimits": [{"Name": "memlock", "Soft": SETTINGS.memlock_limit, "Hard": SETTINGS.memlock_limit},
                    {"Name": "stack", "Soft": 67108864, "Hard": 67108864}],
        # Processes and threads: a fork bomb in one user's container stops there, not at the host's table.
        "pids_limit": SETTINGS.pids_limit,
        "device_requests": device_requests(gpus_for(SETTINGS.gpu_assignments, spawner.user.name, groups)),
    }


async def prepare_spawn(spawner) -> None:
    """pre_spawn_hook: the user's container settings (groups may have changed) and their network."""
    spawner.extra_host_config = host_config_for(spawner)
    await give_user_a_network(spawner, SETTINGS.network, SETTINGS.container_name)


c.Spawner.pre_spawn_hook = prepare_spawn
# A hub container made anew (compose up -d after a settings change) joins the users' networks again,
# so its proxy reaches the servers that kept running.
connect_hub_to_user_networks(SETTINGS.network, SETTINGS.container_name)

# ---- The idle culler stops servers nobody used for HUB_IDLE_TIMEOUT seconds (their volumes stay); a
# server whose user's work runs reports activity (the image's supervisor, supervisor.py), so it is not idle.
if SETTINGS.idle_timeout_s:
    c.JupyterHub.services = [{
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={SETTINGS.idle_timeout_s}",
                    f"--cull-every={max(10, min(300, SETTINGS.idle_timeout_s // 4))}"],
    }]
    c.JupyterHub.load_roles = [{
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }]

for site_config in sorted(glob.glob("/etc/jupyterhub/conf.d/*.py")):
    load_subconfig(site_config)  # noqa: F821 (injected by JupyterHub's config loader)
