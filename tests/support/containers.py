"""Real containers for the tests: started with `docker run`, driven through testinfra, removed after.

Every docker call and every command run inside a container has a timeout, so a hung engine or
service fails its test instead of hanging CI.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import resource
import shlex
import socket
import subprocess
import uuid
from collections.abc import Iterator

import testinfra

from tests.support import SETTLES_S
from tests.support.waiting import wait_until

DOCKER_TIMEOUT_S = 120
EXEC_TIMEOUT_S = 120
CONTAINER_USER = "dev"

# Containers alive now, so a failing test can show their logs (see conftest.pytest_runtest_makereport).
LIVE_CONTAINERS: dict[str, "Container"] = {}


def docker(*args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """Runs one docker CLI command with a timeout."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@functools.cache
def host_has_nvidia_runtime() -> bool:
    """Whether the engine can give containers GPUs (asked once per test process)."""
    result = docker("info", "--format", "{{json .Runtimes}}", check=False)
    return "nvidia" in result.stdout


def engine_memlock_limit() -> int:
    """The memlock limit containers can get here: -1 (unlimited, what compose.yaml asks for), or the
    engine's own hard limit where that is lower (8 MiB on the project's CI machines), read from this
    process, which runs under the same limits as the engine."""
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if hard == resource.RLIM_INFINITY else hard


def memlock_option() -> str:
    limit = engine_memlock_limit()
    return "memlock=-1" if limit == -1 else f"memlock={limit}:{limit}"


def memlock_is_limited_here() -> bool:
    return engine_memlock_limit() != -1


# Sockets that hold the ports free_port() handed out, open until the test process ends.
RESERVED_PORTS: list[socket.socket] = []


def free_port() -> int:
    """A TCP port for a service a test starts on 127.0.0.1, reserved for the rest of this test process.

    A socket stays bound to it, so the kernel hands it to no other bind(0): not to another worker's
    free_port(), and not to a client's ephemeral port, while the test has yet to start its service.
    The socket never listens and sets SO_REUSEADDR, so the server the test starts there (docker-proxy,
    docker-registry, Slurm's daemons) can still bind and listen, as Linux allows beside a socket that
    does not listen.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    RESERVED_PORTS.append(sock)
    return sock.getsockname()[1]


# What compose.yaml gives the service, as docker-run options.
COMPOSE_LIKE_OPTIONS = ["--shm-size=1g", "--ulimit", memlock_option(), "--ulimit", "stack=67108864"]


@dataclasses.dataclass
class Container:
    name: str

    def host(self, user: str | None = CONTAINER_USER) -> testinfra.host.Host:
        """A testinfra host whose commands run as USER (the container user by default; None is root)."""
        target = f"{user}@{self.name}" if user else self.name
        return testinfra.get_host(f"docker://{target}")

    def run(self, command: str, user: str | None = CONTAINER_USER, timeout: int = EXEC_TIMEOUT_S):
        """Runs a bash command in the container under `timeout`; returns testinfra's CommandResult."""
        return self.host(user).run(f"timeout {timeout} bash -c {shlex.quote(command)}")

    def logs(self) -> str:
        result = docker("logs", self.name, check=False)
        return result.stdout + result.stderr

    def state(self) -> dict:
        return json.loads(docker("inspect", "--format", "{{json .State}}", self.name).stdout)

    def published_port(self, container_port: int) -> int:
        mapping = docker("port", self.name, str(container_port)).stdout.splitlines()[0]
        return int(mapping.rsplit(":", 1)[1])

    def fail_if_exited(self, during: str) -> None:
        state = self.state()
        if not state["Running"]:
            raise AssertionError(f"{self.name} exited with {state['ExitCode']} {during}:\n{self.logs()[-3000:]}")

    def wait_for_log(self, text: str, timeout: float = SETTLES_S) -> str:
        def logs_with_text() -> str | None:
            logs = self.logs()
            if text in logs:
                return logs
            self.fail_if_exited(f"before logging {text!r}")
            return None
        return wait_until(logs_with_text, timeout, failure=f"{text!r} did not appear in the logs of {self.name}")

    def wait_until_healthy(self, timeout: float = SETTLES_S) -> None:
        def healthy() -> bool:
            if self.state().get("Health", {}).get("Status") == "healthy":
                return True
            self.fail_if_exited("before turning healthy")
            return False
        wait_until(healthy, timeout, interval=1, failure=f"{self.name} did not turn healthy")

    def wait_until_started(self, timeout: float = SETTLES_S) -> None:
        """Waits until the entrypoint finished start-up (it touches /run/container/started)."""
        def started() -> bool:
            if docker("exec", self.name, "test", "-e", "/run/container/started", check=False).returncode == 0:
                return True
            self.fail_if_exited("during start-up")
            return False
        wait_until(started, timeout, interval=0.3, failure=f"{self.name} did not finish start-up")

    def remove(self) -> None:
        LIVE_CONTAINERS.pop(self.name, None)
        docker("rm", "--force", "--volumes", self.name, check=False)


def start_container(image: str, command: list[str] | None = None, options: list[str] | None = None,
                    compose_like: bool = True) -> Container:
    """Starts a detached container of IMAGE with the options compose uses, plus OPTIONS and COMMAND."""
    name = f"pt-test-{uuid.uuid4().hex[:10]}"
    base_options = list(COMPOSE_LIKE_OPTIONS) if compose_like else []
    if host_has_nvidia_runtime():
        base_options.append("--gpus=all")
    container = Container(name)
    LIVE_CONTAINERS[name] = container
    docker("run", "--detach", "--name", name, *base_options, *(options or []), image, *(command or []))
    container.wait_until_started()
    return container


@contextlib.contextmanager
def running_container(image: str, command: list[str] | None = None, options: list[str] | None = None,
                      healthy: bool = True, timeout: float = SETTLES_S) -> Iterator[Container]:
    """A container of IMAGE that finished start-up and, unless HEALTHY is False, turned healthy within
    TIMEOUT seconds; removed when the block ends, however it ends (a fixture's `with ... as c: yield c`).
    A container that never turns healthy fails with its logs, which its removal would otherwise take."""
    container = start_container(image, command=command, options=options)
    try:
        if healthy:
            try:
                container.wait_until_healthy(timeout=timeout)
            except AssertionError as error:
                raise AssertionError(f"{error}\n{container.logs()[-3000:]}") from error
        yield container
    finally:
        container.remove()


def run_container_to_completion(image: str, command: list[str] | None = None, options: list[str] | None = None,
                                timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker run --rm` in the foreground: for start-up errors, which end the container at once."""
    return docker("run", "--rm", *(options or []), image, *(command or []), timeout=timeout, check=False)
