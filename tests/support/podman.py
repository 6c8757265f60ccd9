"""Rootless Podman, for real: podman run as the unprivileged user that .ci/install-podman.sh sets up
(PODMAN_TEST_USER), with the image under test loaded into that user's store once per test module."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import shutil
import subprocess
import uuid

from tests.support.host_tools import skip_where_missing

PODMAN_USER = os.environ.get("PODMAN_TEST_USER", "podman-test")
PODMAN_COMPOSE_VENV = ".local/podman-compose"  # in the user's home: .ci/install-podman.sh puts it there
PODMAN_TIMEOUT_S = 240
LOAD_TIMEOUT_S = 600


@dataclasses.dataclass
class RootlessPodman:
    user: str
    uid: int
    gid: int
    home: pathlib.Path

    def as_user(self, *args: str, cwd: pathlib.Path | None = None, **env: str) -> list[str]:
        """ARGS as a command line run by the test user in CWD (default: its home, never this process's
        folder: a checkout in a private folder is out of that user's reach), with its own runtime folder,
        podman-compose on PATH and ENV, and nothing of this process's environment (no Docker settings)."""
        path = f"{self.home / PODMAN_COMPOSE_VENV}/bin:/usr/local/bin:/usr/bin:/bin"
        return ["runuser", "-u", self.user, "--", "env", "-i", f"--chdir={cwd or self.home}",
                f"XDG_RUNTIME_DIR=/run/user/{self.uid}", f"HOME={self.home}", f"PATH={path}",
                *(f"{name}={value}" for name, value in env.items()), *args]

    def command(self, *args: str) -> list[str]:
        """ARGS as a podman command line run by the test user."""
        return self.as_user("podman", *args)

    def run(self, *args: str, timeout: float = PODMAN_TIMEOUT_S, check: bool = False,
            stdin: int | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout, check=check,
                              stdin=stdin)

    def folder(self, empty: bool = True) -> pathlib.Path:
        """A new folder of the user's, in its home (a root-only test folder would be out of its reach)."""
        folder = self.home / f"ws-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        if not empty:
            (folder / "notes.txt").write_text("mine\n")
            os.chown(folder / "notes.txt", self.uid, self.gid)
        os.chown(folder, self.uid, self.gid)
        return folder

    def copy_of(self, root: pathlib.Path, names: tuple[str, ...]) -> pathlib.Path:
        """A new folder of the user's holding the files NAMES of ROOT, all the user's: what a user who cloned
        the repository has (the test's own checkout may lie where that user cannot read)."""
        folder = self.folder()
        for name in names:
            shutil.copyfile(root / name, folder / name)
            os.chown(folder / name, self.uid, self.gid)
        return folder

    def remove_folders(self) -> None:
        for folder in self.home.glob("ws-*"):
            shutil.rmtree(folder, ignore_errors=True)


def rootless_podman() -> RootlessPodman:
    """The test user, or a skip (a failure in CI) naming the set-up that is missing."""
    if shutil.which("podman") is None:
        skip_where_missing("podman is not installed: run .ci/install-podman.sh as root")
    try:
        entry = pwd.getpwnam(PODMAN_USER)
    except KeyError:
        skip_where_missing(f"user {PODMAN_USER} does not exist: run .ci/install-podman.sh as root")
    return RootlessPodman(PODMAN_USER, entry.pw_uid, entry.pw_gid, pathlib.Path(entry.pw_dir))


def load_image(podman: RootlessPodman, image: str) -> str:
    """Copies IMAGE from Docker into the user's store (docker save | podman load); returns its id there."""
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    loaded = podman.run("load", "--quiet", stdin=save.stdout, timeout=LOAD_TIMEOUT_S)
    assert save.stdout is not None
    save.stdout.close()
    assert save.wait(timeout=LOAD_TIMEOUT_S) == 0 and loaded.returncode == 0, loaded.stderr
    listed = podman.run("image", "inspect", "--format", "{{.Id}}", loaded.stdout.strip().split()[-1], check=True)
    return listed.stdout.strip()


def reset(podman: RootlessPodman) -> None:
    """Removes every container and image of the user's store (what the suite loaded), and its folders."""
    podman.run("system", "reset", "--force", timeout=LOAD_TIMEOUT_S)
    podman.remove_folders()
