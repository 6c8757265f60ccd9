"""The traits of NGC's PyTorch image that change how our start-up and sessions behave, on the GPU flavor
(built on NGC, or in CI on tests/ngc_standin, which reproduces each trait and names NGC's line for it).

    make ngc-standin NGC_TAG=... && make test-image FLAVOR=gpu NGC_TAG=... PYTEST_ARGS=tests/image/test_ngc_traits.py

- BASH_ENV=/etc/bash.bashrc and ENV=/etc/shinit_v2: every non-interactive bash and interactive sh reads them;
- PATH and LD_LIBRARY_PATH additions (CUDA's tools and libraries) and NVIDIA_*, CUDA_*, NCCL_*,
  PIP_DEFAULT_TIMEOUT: SSH sessions and notebooks get them unchanged;
- the entrypoint prints entrypoint.d/*.txt (the license) as well as sourcing *.sh;
- a world-writable /workspace with content;
- EXPOSE 8888 6006, inherited;
- a Jupyter config of NGC's own in /usr/local/etc/jupyter (the stand-in's is hostile on purpose).
"""
from __future__ import annotations

import json
import shlex

import paramiko
import pytest
import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import docker, run_container_to_completion, running_container
from tests.support.notebook_kernel import run_in_a_notebook_kernel
from tests.support.ssh_client import generate_key, public_line, run, ssh_session

pytestmark = [pytest.mark.tier("landing"), pytest.mark.flavor_difference]

TOKEN = "ngc-traits-token-3c7e9a1f5b"
# Printed variables, in this order, by every kind of session below.
SHOWN = ["BASH_ENV", "ENV", "LD_LIBRARY_PATH", "NCCL_VERSION", "CUDA_HOME", "PIP_DEFAULT_TIMEOUT"]
SHOW = " ".join(f"${{{name}:-unset}}" for name in SHOWN)


@pytest.fixture(scope="module", autouse=True)
def ngc_base(flavor):
    if flavor != "gpu":
        pytest.skip("NGC's traits belong to the GPU flavor's base")


@pytest.fixture(scope="module")
def image_env(image, ngc_base) -> dict[str, str]:
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    return dict(item.split("=", 1) for item in config["Env"])


@pytest.fixture(scope="module")
def user_key() -> paramiko.PKey:
    return generate_key()


@pytest.fixture(scope="module")
def ngc_container(image, user_key, ngc_base):
    with running_container(image, options=["--publish", "127.0.0.1::2222", "--publish", "127.0.0.1::8888",
                                           "--env", f"SSH_AUTHORIZED_KEYS={public_line(user_key)}",
                                           "--env", f"JUPYTER_TOKEN={TOKEN}"], timeout=180) as container:
        yield container


def expected(image_env: dict[str, str]) -> list[str]:
    return [image_env.get(name, "unset") for name in SHOWN]


@pytest.mark.parametrize("command", [
    SHOW,                                             # ssh host CMD: a non-interactive bash
    f"bash -c {shlex.quote('echo ' + SHOW)}",         # a script inside it, which reads BASH_ENV
    f"sh -c {shlex.quote('echo ' + SHOW)}",           # sh, which reads ENV only when interactive
    f"bash -lc {shlex.quote('echo ' + SHOW)}",        # a login shell, as tmux windows and terminals are
], ids=["ssh-command", "nested-bash", "sh", "login-shell"])
def test_ssh_sessions_keep_the_containers_environment(ngc_container, user_key, image_env, command):
    with ssh_session(ngc_container.published_port(2222), key=user_key) as client:
        status, out, err = run(client, f"echo {command}" if command == SHOW else command)
    assert status == 0, err
    assert out.split() == expected(image_env), out


def test_cuda_tools_on_ngcs_path_are_found_over_ssh(ngc_container, user_key, image_env):
    cuda_bin = next(folder for folder in image_env["PATH"].split(":") if folder.endswith("/cuda/bin"))
    with ssh_session(ngc_container.published_port(2222), key=user_key) as client:
        status, out, err = run(client, "echo $PATH; bash -c 'echo $PATH'")
    assert status == 0, err
    for path in out.split():
        assert cuda_bin in path.split(":"), out


def test_notebooks_get_ld_library_path_and_path_unchanged(ngc_container, image_env):
    code = ("import json, os; json.dump({k: os.environ.get(k) for k in ('LD_LIBRARY_PATH', 'PATH', 'NCCL_VERSION')},"
            " open('/workspace/kernel-env.json', 'w'))")
    reply = run_in_a_notebook_kernel(ngc_container, f"http://127.0.0.1:{ngc_container.published_port(8888)}",
                                     TOKEN, code)
    assert reply["status"] == "ok", reply
    seen = json.loads(ngc_container.run("cat /workspace/kernel-env.json").stdout)
    assert seen["LD_LIBRARY_PATH"] == image_env["LD_LIBRARY_PATH"]
    assert seen["NCCL_VERSION"] == image_env.get("NCCL_VERSION")
    # The kernel puts the user's own environment first (user-packages) and keeps the image's PATH after it.
    assert seen["PATH"].endswith(image_env["PATH"]), seen["PATH"]


def test_ngcs_jupyter_config_does_not_open_the_server(ngc_container):
    url = f"http://127.0.0.1:{ngc_container.published_port(8888)}/api/contents"
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 403
    listing = requests.get(url, params={"token": TOKEN}, timeout=HTTP_TIMEOUT_S).json()
    assert "etc" not in {item["name"] for item in listing["content"]}, "the root is / instead of /workspace"


def test_the_entrypoints_text_banners_print_once_per_start(image):
    result = run_container_to_completion(image, command=["true"])
    listing = docker("run", "--rm", "--entrypoint", "sh", image, "-c", "ls /opt/nvidia/entrypoint.d/*.txt").stdout
    assert listing.split(), "the base has no .txt banner to print"
    for banner in listing.split():
        text = docker("run", "--rm", "--entrypoint", "cat", image, banner).stdout
        assert result.stderr.count(text) == 1, f"{banner} is not printed once:\n{result.stderr}"
    assert not result.stdout.strip(), "the banners belong on stderr, stdout to the command"


def test_the_bases_workspace_content_is_writable_by_no_one_else(image):
    result = docker("run", "--rm", "--entrypoint", "find", image, "/workspace", "-perm", "-o+w", "-not", "-type", "l")
    assert result.stdout.strip() == "", f"world-writable in the image's /workspace:\n{result.stdout}"


def test_the_inherited_tensorboard_port_leads_nowhere(ngc_container, image):
    """NGC exposes 6006 for a TensorBoard of its own; ours runs behind Jupyter's token on 127.0.0.1, so
    `docker run -P` publishes a port where nothing answers."""
    exposed = json.loads(docker("image", "inspect", "--format", "{{json .Config.ExposedPorts}}", image).stdout)
    assert "6006/tcp" in exposed
    listening = ngc_container.run("ss -Hltn 'sport = :6006'").stdout
    assert listening.strip() == "", listening
