"""compose.multinode.yaml driven as a user drives it, one compose project per test run.

The file is used unchanged; a small override written next to the test's temporary files only makes it
fit a machine without GPUs (no GPU reservation, the engine's memlock limit, a /dev/shm of 1 GiB, the
least start-up accepts without a warning), as compose.cpu.yaml does for compose.yaml. Every call has a
timeout.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
import subprocess
import uuid

from tests.support import REPO_ROOT
from tests.support.compose import compose
from tests.support.containers import docker, engine_memlock_limit
from tests.support.training import TINY_MODEL
from tests.support.waiting import wait_until

COMPOSE_FILE = REPO_ROOT / "compose.multinode.yaml"
NODE_SERVICES = ("node0", "node1")

# The smallest run of the sample trainer that still does real DDP work: global batch 32 (8 per rank on
# 4 ranks), 16x16 images, the tiny CNN, data loaded in the training process.
TINY_TRAINING = f"{TINY_MODEL} --batch-size 8 --warmup-steps 2 --lr 3e-3 --seed 11 --num-workers 0 --device cpu"

# What a node's log must never show at the end of a job that succeeded (torch's log lines start with
# W/E and a date; "terminate called" is a C++ abort).
ERROR_MARKERS = ("Traceback", "Error", "ERROR", "failed to shutdown", "terminate called", "exitcode")


def cpu_override(tmp_dir: pathlib.Path) -> pathlib.Path:
    """An override file with what compose.cpu.yaml changes for compose.yaml, for every node service."""
    memlock = engine_memlock_limit()
    services = "".join(f"  {name}:\n    deploy: !reset {{}}\n    ulimits: {{memlock: {memlock}}}\n"
                       for name in (*NODE_SERVICES, "node"))
    path = tmp_dir / "compose.multinode.cpu-test.yaml"
    path.write_text(f"services:\n{services}")
    return path


@dataclasses.dataclass
class MultinodeJob:
    """One compose project of compose.multinode.yaml; ENV holds its variables (NNODES, TRAIN_ARGS...)."""

    env: dict[str, str]
    override: pathlib.Path
    project: str = dataclasses.field(default_factory=lambda: f"pt-mn-{uuid.uuid4().hex[:8]}")

    def compose(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        env = {"SHM_SIZE": "1g", "OMP_NUM_THREADS": "1", "RDZV_ID": self.project, **self.env}
        return compose("-p", self.project, *args, files=[COMPOSE_FILE, self.override], env=env, timeout=timeout,
                       check=check)

    def start(self, *services: str) -> None:
        self.compose("up", "--detach", "--no-build", *services)

    def container(self, service: str) -> str:
        return f"{self.project}-{service}-1"

    def state(self, service: str) -> dict:
        return json.loads(docker("inspect", "--format", "{{json .State}}", self.container(service)).stdout)

    def logs(self, service: str) -> str:
        result = docker("logs", self.container(service), check=False)
        return result.stdout + result.stderr

    def wait_for_exit(self, services: tuple[str, ...], timeout: float) -> dict[str, int]:
        """Waits until every one of SERVICES has exited; returns their exit codes."""
        def exit_codes() -> dict[str, int] | None:
            states = {service: self.state(service) for service in services}
            if any(state["Running"] for state in states.values()):
                return None
            return {service: state["ExitCode"] for service, state in states.items()}
        return wait_until(exit_codes, timeout, interval=1,
                          failure=lambda: f"{services} still running:\n" + self.all_logs(services))

    def wait_for_log(self, service: str, text: str, timeout: float, count: int = 1) -> None:
        wait_until(lambda: self.logs(service).count(text) >= count, timeout,
                   failure=lambda: f"{text!r} (x{count}) not in the log of {service}:\n" + self.logs(service)[-4000:])

    def all_logs(self, services: tuple[str, ...] = NODE_SERVICES) -> str:
        return "\n".join(f"--- {service} ---\n{self.logs(service)[-4000:]}" for service in services)

    def checkpoint_volume(self) -> str:
        return f"{self.project}_checkpoints"

    def remove(self) -> None:
        self.compose("--profile", "machines", "down", "--volumes", "--timeout", "5", timeout=180, check=False)


def python_in_image(image: str, code: str, volumes: dict[str, str], timeout: float = 120) -> object:
    """Runs CODE in a throwaway container of IMAGE with VOLUMES mounted; returns what it printed, as JSON."""
    mounts = [option for name, target in volumes.items() for option in ("--volume", f"{name}:{target}:ro")]
    result = docker("run", "--rm", *mounts, image, "python", "-c", code, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def final_checkpoints_match(image: str, first_volume: str, second_volume: str) -> dict:
    """Loads the newest checkpoint of each volume (as the trainer does) and compares their models."""
    code = """
import json, pathlib, torch
def newest(root):
    return max(pathlib.Path(root, "checkpoints").glob("step_*.pt"))
a, b = newest("/a"), newest("/b")
ma = torch.load(a, weights_only=True)["model"]
mb = torch.load(b, weights_only=True)["model"]
close = ma.keys() == mb.keys() and all(torch.allclose(ma[k], mb[k], rtol=1e-4, atol=1e-6) for k in ma)
diff = max((ma[k] - mb[k]).abs().max().item() for k in ma)
print(json.dumps({"files": [a.name, b.name], "allclose": close, "max_abs_diff": diff}))
"""
    return python_in_image(image, code, {first_volume: "/a", second_volume: "/b"})


def steps_of_checkpoints(image: str, volume: str) -> list[int]:
    code = ("import json, pathlib; print(json.dumps(sorted(int(p.stem[5:]) for p in "
            "pathlib.Path('/c/checkpoints').glob('step_*.pt'))))")
    return python_in_image(image, code, {volume: "/c"})


def image_env(image: str) -> dict[str, str]:
    name, tag = image.rsplit(":", 1)
    return {"IMAGE": name, "TAG": tag}


def command_of(service_config: dict) -> list[str]:
    """A compose service's command as a list of words (compose config already splits a string)."""
    command = service_config["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)
