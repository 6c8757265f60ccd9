"""Real containers for the tests: started with `docker run`, driven through testinfra, removed after."""
from __future__ import annotations

import dataclasses
import subprocess
import uuid

import testinfra

DOCKER_TIMEOUT_S = 120


def docker(*args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """Runs one docker CLI command with a timeout, so a hung engine fails the test instead of CI."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@dataclasses.dataclass
class Container:
    name: str

    def host(self, user: str | None = None) -> testinfra.host.Host:
        target = f"{user}@{self.name}" if user else self.name
        return testinfra.get_host(f"docker://{target}")

    def logs(self) -> str:
        result = docker("logs", self.name, check=False)
        return result.stdout + result.stderr

    def remove(self) -> None:
        docker("rm", "--force", "--volumes", self.name, check=False)


def start_container(image: str, command: list[str] | None = None, options: list[str] | None = None) -> Container:
    """Starts a detached container of IMAGE with docker-run OPTIONS and an optional COMMAND."""
    name = f"pt-test-{uuid.uuid4().hex[:10]}"
    docker("run", "--detach", "--name", name, "--shm-size=1g", *(options or []), image, *(command or []))
    return Container(name)
