"""`docker compose`, wrapped once for every suite: run with the files a test names, the test's variables
over this process's environment, and a timeout; and the container compose started for a service,
registered so that a failing test shows its logs (tests/conftest.py).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Mapping, Sequence

from tests.support import REPO_ROOT
from tests.support.containers import LIVE_CONTAINERS, Container, docker

COMPOSE_TIMEOUT_S = 180
CPU_FILES = ("compose.yaml", "compose.cpu.yaml")  # what a host without GPUs runs


def compose(*args: str, files: Sequence[str | pathlib.Path] = (), env: Mapping[str, str | None] | None = None,
            cwd: pathlib.Path = REPO_ROOT, timeout: float = COMPOSE_TIMEOUT_S,
            check: bool = False) -> subprocess.CompletedProcess:
    """Runs `docker compose -f FILE... ARGS` in CWD. ENV's values override this process's variables, and
    a None removes one. With CHECK, a failure raises with compose's own message."""
    environment = {**os.environ, **(env or {})}
    command = ["docker", "compose", *(option for file in files for option in ("-f", str(file))), *args]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                            env={name: value for name, value in environment.items() if value is not None})
    if check and result.returncode != 0:
        raise AssertionError(f"docker compose {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def compose_config(files: Sequence[str | pathlib.Path], env: Mapping[str, str | None] | None = None,
                   options: Sequence[str] = ()) -> dict:
    """The project as compose resolves it (`docker compose OPTIONS config --format json`); OPTIONS are
    compose's own, such as --env-file FILE or --profile NAME."""
    return json.loads(compose(*options, "config", "--format", "json", files=files, env=env, check=True).stdout)


def service_container(service: str, files: Sequence[str | pathlib.Path], env: Mapping[str, str | None] | None = None,
                      cwd: pathlib.Path = REPO_ROOT) -> Container:
    """The container compose runs for SERVICE, registered in LIVE_CONTAINERS. compose can exit 0 while a
    service failed to start, so a test checks this container's state, not compose's status."""
    container_id = compose("ps", "--quiet", service, files=files, env=env, cwd=cwd).stdout.strip()
    assert container_id, f"compose runs no container for the service {service}"
    container = Container(docker("inspect", "--format", "{{.Name}}", container_id).stdout.strip().lstrip("/"))
    LIVE_CONTAINERS[container.name] = container
    return container
