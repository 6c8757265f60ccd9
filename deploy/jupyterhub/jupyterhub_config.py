"""JupyterHub for a team on one GPU host: one container of the pytorch-dev image per user.

Read by the hub image (deploy/jupyterhub/Dockerfile); every setting a site changes comes from the
environment that deploy/jupyterhub/compose.yaml passes (see .env.example there). Files in
/etc/jupyterhub/conf.d/*.py are read last, so a site (or a test) can add settings by mounting one.
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_assignment import device_requests, gpus_for, parse_assignments  # noqa: E402

c = get_config()  # noqa: F821 (injected by JupyterHub's config loader)

# ---- The hub: its proxy on 8000, its API where the users' containers reach it by name.
c.JupyterHub.bind_url = "http://:8000"
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_connect_ip = os.environ.get("HUB_CONTAINER_NAME", "jupyterhub")
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"

# ---- Who may log in: NativeAuthenticator (people sign up at /hub/signup, an admin authorizes them).
# For GitHub, GitLab or OIDC, OAuthenticator is installed too (deploy/jupyterhub/README.md).
c.JupyterHub.authenticator_class = "native"
c.NativeAuthenticator.open_signup = False
c.Authenticator.admin_users = set(filter(None, os.environ.get("HUB_ADMIN_USERS", "").split(",")))
c.Authenticator.allow_all = True  # NativeAuthenticator itself admits only the users an admin authorized

# ---- What each user gets: their own container of the image, on the hub's network.
c.JupyterHub.spawner_class = "docker"
c.DockerSpawner.image = os.environ["HUB_USER_IMAGE"]
c.DockerSpawner.network_name = os.environ["HUB_NETWORK"]
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
c.Spawner.environment = {"NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN")}
if os.environ.get("HUB_MEM_LIMIT"):
    c.Spawner.mem_limit = os.environ["HUB_MEM_LIMIT"]

GPU_ASSIGNMENTS = parse_assignments(os.environ.get("HUB_GPUS", ""))


def host_config_for(spawner) -> dict:
    """shm, ulimits and GPUs of one user's container: what compose.yaml gives one person's container."""
    groups = [group.name for group in spawner.user.groups]
    return {
        "shm_size": os.environ.get("SHM_SIZE", "16g"),
        "ulimits": [{"Name": "memlock", "Soft": int(os.environ.get("MEMLOCK_LIMIT", "-1")),
                     "Hard": int(os.environ.get("MEMLOCK_LIMIT", "-1"))},
                    {"Name": "stack", "Soft": 67108864, "Hard": 67108864}],
        "device_requests": device_requests(gpus_for(GPU_ASSIGNMENTS, spawner.user.name, groups)),
    }


def set_host_config(spawner) -> None:
    """pre_spawn_hook: works out the user's container settings at each spawn (groups may have changed)."""
    spawner.extra_host_config = host_config_for(spawner)


c.Spawner.pre_spawn_hook = set_host_config

# ---- The idle culler stops servers nobody used for HUB_IDLE_TIMEOUT seconds (their volumes stay).
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={int(os.environ.get('HUB_IDLE_TIMEOUT', '3600'))}"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]

for site_config in sorted(glob.glob("/etc/jupyterhub/conf.d/*.py")):
    load_subconfig(site_config)  # noqa: F821 (injected by JupyterHub's config loader)
