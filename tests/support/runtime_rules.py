"""The rules other container runtimes start the image under, reproduced with `docker run` flags.

Enroot/Pyxis and Apptainer are in neither Debian nor PyPI, and no cluster runs here, so each runtime's
rules are the flags below (docs/runtimes.md says which behaviour each one stands for). A test names its
runtime, starts the image with these flags, and checks what a user of that runtime relies on.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess

import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import Container, docker
from tests.support.training import trainer_command

# A caller of Slurm or of a cluster: an id the image has no passwd entry for.
CALLER_UID = 4242
CALLER_GID = 4243
OPENSHIFT_UID = 1000680000  # from an OpenShift project's range; the group is always 0
FS_GROUP = 2000             # Kubernetes' fsGroup: the group every volume of the pod is given

# The 2-rank run each runtime's job makes: seconds on a CPU, one checkpoint at its end.
TRAIN = trainer_command("--model tiny --image-size 16 --synthetic-samples 64 --batch-size 8 --max-steps 4 --log-every 1",
                        nproc=2, timeout_s=150)


@dataclasses.dataclass
class Home:
    """A caller's home on the host, mounted at the same path, as Enroot and Apptainer mount $HOME."""
    path: pathlib.Path
    uid: int
    gid: int

    def own(self, *paths: pathlib.Path) -> None:
        for path in paths:
            os.chown(path, self.uid, self.gid)


def make_home(parent: pathlib.Path, uid: int = CALLER_UID, gid: int = CALLER_GID) -> Home:
    home = Home(parent / "home" / "caller", uid, gid)
    home.path.mkdir(parents=True)
    home.own(home.path)
    return home


def poison_user_site(home: Home) -> None:
    """A ~/.local torch that raises on import, for every Python 3 the image might have: what a cluster's
    shared home often holds (`pip install --user` on the login node)."""
    for minor in range(8, 16):
        package = home.path / ".local" / "lib" / f"python3.{minor}" / "site-packages" / "torch"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('the torch in ~/.local shadowed the image')\n")
    for folder in [home.path / ".local", *(home.path / ".local").rglob("*")]:
        home.own(folder)


def enroot_flags(home: Home) -> list[str]:
    """Enroot/Pyxis (and `apptainer exec`): no entrypoint, the caller's ids without a passwd entry, the
    home mounted with HOME on it, a read-only image with a writable /tmp, the job in the caller's folder."""
    return ["--entrypoint", "", "--user", f"{home.uid}:{home.gid}", "--read-only", "--tmpfs", "/tmp",
            "--volume", f"{home.path}:{home.path}", "--env", f"HOME={home.path}", "--workdir", str(home.path)]


def apptainer_run_flags(home: Home) -> list[str]:
    """`apptainer run --writable-tmpfs --bind "$PWD:/workspace"` from the home: the entrypoint runs as the
    caller, on the read-only image with the home mounted; the writable tmpfs is reproduced by tmpfs mounts
    where start-up writes (stricter)."""
    return ["--user", f"{home.uid}:{home.gid}", "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/run/container",
            "--volume", f"{home.path}:{home.path}", "--env", f"HOME={home.path}",
            "--volume", f"{home.path}:/workspace"]


# Kubernetes' restricted Pod Security Standard as the pods in deploy/kubernetes ask for it: an emptyDir
# at each tmpfs below (the manifests name the same paths), the checkpoint volume at /workspace.
KUBERNETES_TMPFS = ["/tmp", "/run/container", "/home/dev"]
KUBERNETES_POD_USER = (1000, 1000)  # runAsUser and runAsGroup of every pod in deploy/kubernetes


def kubernetes_restricted_flags(uid: int, gid: int, workspace: pathlib.Path) -> list[str]:
    # With fsGroup, an emptyDir belongs to that group, which may write it. (Docker gives a tmpfs the mode of
    # the image's folder under it, whatever mode= says; gid= it honours.)
    tmpfs = [flag for path in KUBERNETES_TMPFS for flag in ("--tmpfs", f"{path}:gid={FS_GROUP}")]
    return ["--user", f"{uid}:{gid}", "--group-add", str(FS_GROUP), "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--read-only", *tmpfs, "--volume", f"{workspace}:/workspace"]


def fs_group_volume(parent: pathlib.Path) -> pathlib.Path:
    """A volume as Kubernetes gives it with fsGroup: group FS_GROUP, group-writable, setgid."""
    volume = parent / "volume"
    volume.mkdir()
    os.chown(volume, 0, FS_GROUP)
    volume.chmod(0o2775)
    return volume


def run(image: str, flags: list[str], script: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs SCRIPT with bash in a new container of IMAGE under FLAGS; returns when it ends."""
    return docker("run", "--rm", "--shm-size=1g", *flags, image, "bash", "-c", script, timeout=timeout, check=False)


def checkpoints(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("step_*"))


def owners(paths: list[pathlib.Path]) -> set[tuple[int, int]]:
    return {(path.stat().st_uid, path.stat().st_gid) for path in paths}


TOKEN = "runtime-rules-token-5c1e9a7d"
SERVICE_OPTIONS = ["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}"]
SSH_OFF_LINE = "SSH is off: sshd must start as root"


def check_services_run_as(container: Container, uid: int) -> None:
    """JupyterLab answers with its token only, SSH is off with one line saying why (and nothing else is
    warned about), and no process of the container runs as root: what services mode promises where the
    runtime starts it as UID."""
    container.wait_until_healthy()
    url = f"http://127.0.0.1:{container.published_port(8888)}/api/status"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).status_code == 200
    warnings = [line for line in container.logs().splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and SSH_OFF_LINE in warnings[0], container.logs()  # HOME, /workspace: no line
    processes = docker("exec", container.name, "ps", "-eo", "uid=,comm=").stdout.splitlines()
    assert {int(line.split()[0]) for line in processes} == {uid}, processes
