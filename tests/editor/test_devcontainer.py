"""VS Code Dev Containers: .devcontainer/ opened with the real Dev Containers CLI (`devcontainer up`, then
`devcontainer exec`, what VS Code runs), on the CPU configuration; the GPU one is checked for its shape.

    make test-image PYTEST_ARGS=tests/editor/test_devcontainer.py

The CLI comes from npm into .build/tools (`make devcontainer-cli`, which this test runs when needed).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, STARTS_S
from tests.support.compose import CPU_FILES, compose
from tests.support.containers import engine_memlock_limit, free_port, memlock_is_limited_here
from tests.support.host_tools import skip_where_missing
from tests.support.release import environment_without_make
from tests.support.training import TINY_MODEL, trainer_command
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

CLI = REPO_ROOT / ".build" / "tools" / "devcontainer" / "node_modules" / ".bin" / "devcontainer"
CPU_CONFIG = ".devcontainer/cpu/devcontainer.json"
GPU_CONFIG = ".devcontainer/gpu/devcontainer.json"
TOKEN = "devcontainer-test-token-81c2"
# A uid that is not root's, as on a workstation (the test may run as root).
HOST_UID = os.getuid() or 1234
TORCHRUN_SMOKE = trainer_command(f"{TINY_MODEL} --max-steps 3 --batch-size 8 --num-workers 0 --device cpu")


@pytest.fixture(scope="module")
def devcontainer_cli() -> str:
    if not CLI.exists():
        if not shutil.which("npm"):
            skip_where_missing("Node.js is not installed (the Dev Containers CLI is an npm package): "
                               "apt-get install nodejs npm")
        subprocess.run(["make", "-s", "devcontainer-cli"], cwd=REPO_ROOT, env=environment_without_make(),
                       check=True, timeout=600)
    return str(CLI)


def run_cli(cli: str, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args, "--workspace-folder", str(REPO_ROOT)], cwd=REPO_ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


def compose_files(config: str) -> list[str]:
    # The configuration is JSON with comments; the CLI reads it as VS Code does.
    text = subprocess.run([str(CLI), "read-configuration", "--workspace-folder", str(REPO_ROOT), "--config", config],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    return [os.path.basename(path) for path in json.loads(text)["configuration"]["dockerComposeFile"]]


def test_the_gpu_configuration_is_the_gpu_service_and_the_cpu_one_drops_the_reservation(devcontainer_cli):
    assert compose_files(GPU_CONFIG) == ["compose.yaml", "compose.devcontainer.yaml"]
    assert compose_files(CPU_CONFIG) == ["compose.yaml", "compose.cpu.yaml", "compose.devcontainer.yaml"]


@pytest.fixture
def devcontainer_env(image, tmp_path):
    name, tag = image.rsplit(":", 1)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    if os.geteuid() == 0:
        os.chown(workspace, HOST_UID, HOST_UID)
    env = {"COMPOSE_PROJECT_NAME": f"pt-devc-{uuid.uuid4().hex[:8]}", "IMAGE": name, "TAG": tag,
           "JUPYTER_PORT": str(free_port()), "SSH_PORT": str(free_port()), "JUPYTER_TOKEN": TOKEN,
           "WORKSPACE": str(workspace), "PUID": str(HOST_UID), "PGID": str(HOST_UID), "SHM_SIZE": "1g"}
    if memlock_is_limited_here():
        env["MEMLOCK_LIMIT"] = str(engine_memlock_limit())
    yield env
    compose("down", "--volumes", "--timeout", "10", files=[*CPU_FILES, ".devcontainer/compose.devcontainer.yaml"],
            env=env)


def test_devcontainer_up_and_exec_work_as_the_user_with_the_services_running(devcontainer_cli, devcontainer_env):
    env = devcontainer_env
    up = run_cli(devcontainer_cli, "up", "--config", CPU_CONFIG, env=env)
    assert up.returncode == 0 and '"outcome":"success"' in up.stdout, up.stdout[-3000:] + up.stderr[-3000:]

    def exec_in(command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_cli(devcontainer_cli, "exec", "--config", CPU_CONFIG, "bash", "-c", command, env=env,
                       timeout=timeout)

    who = exec_in("id -un; id -u; pwd; python -c 'import torch; print(torch.__version__)'")
    assert who.returncode == 0, who.stderr
    assert who.stdout.split()[:3] == ["dev", str(HOST_UID), "/workspace"], who.stdout
    smoke = exec_in(TORCHRUN_SMOKE)
    assert smoke.returncode == 0, smoke.stdout[-2000:] + smoke.stderr[-2000:]
    made = exec_in("touch /workspace/made-in-the-devcontainer")
    assert made.returncode == 0, made.stderr
    owner = os.stat(os.path.join(env["WORKSPACE"], "made-in-the-devcontainer"))
    assert (owner.st_uid, owner.st_gid) == (HOST_UID, HOST_UID)
    # The image's entrypoint and services are kept: JupyterLab answers, behind its token.
    jupyter = f"http://127.0.0.1:{env['JUPYTER_PORT']}/api/contents"

    def jupyter_status(params: dict[str, str]) -> int | None:
        try:
            return requests.get(jupyter, params=params, timeout=HTTP_TIMEOUT_S).status_code
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            return None
    assert wait_until(lambda: jupyter_status({"token": TOKEN}), STARTS_S, failure="JupyterLab did not answer") == 200
    assert jupyter_status({}) == 403
