"""What the built image contains: init, user, packages, Python environment, torch, labels.

    make test PYTEST_ARGS="tests/image/test_image.py"
"""
from __future__ import annotations

import json
import os
import re

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import docker

pytestmark = pytest.mark.tier("landing")

OS_PACKAGES = ["openssh-server", "tmux", "tini", "git", "procps", "iproute2", "curl", "vim-tiny",
               "libnss-wrapper", "ca-certificates", "rsync"]
PYTHON_PACKAGES = ["jupyterlab", "tensorboard", "nvitop", "nvidia-ml-py", "ipywidgets", "matplotlib"]


@pytest.fixture(scope="module")
def container(training_container):
    return training_container


def test_an_init_is_pid_1_and_reaps_for_the_command(container):
    assert container.run("cat /proc/1/comm").stdout.strip() == "tini"
    assert container.run("cat /proc/1/cmdline | tr '\\0' ' '").stdout.startswith("/usr/bin/tini -g")


def test_processes_run_as_the_non_root_user_with_a_home(container):
    assert container.run("id -un; id -u; id -g; echo $HOME").stdout.split() == ["dev", "1000", "1000", "/home/dev"]
    assert container.run("ps -o user= -C sleep").stdout.strip() == "dev", "the command must run as the user"
    assert container.host().file("/home/dev").user == "dev"


@pytest.mark.parametrize("package", OS_PACKAGES)
def test_os_package_is_installed(container, package):
    assert container.host().package(package).is_installed


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_python_package_is_installed(container, package):
    result = container.run(f"pip show {package}")
    assert result.rc == 0, f"{package} is missing: {result.stderr}"


@pytest.mark.flavor_difference
def test_pip_check_is_clean(container):
    result = container.run("pip check")
    assert result.rc == 0, result.stdout + result.stderr


@pytest.mark.flavor_difference
def test_torch_is_the_version_the_flavor_promises(container, labels, flavor):
    version = container.run("python -c 'import torch; print(torch.__version__)'").stdout.strip()
    assert version.startswith(labels["dev.pytorch-dev.torch-version"]), (version, labels)
    if flavor == "cpu":
        # `make test` builds with a TORCH_VERSION and expects it; `make test-pulled` takes the image as it is.
        expected = os.environ.get("EXPECTED_TORCH_VERSION")
        assert not expected or version.split("+")[0] == expected, f"torch {version}, expected {expected}"
        assert version.endswith("+cpu") or "cpu" in container.run(
            "python -c 'import torch; print(torch.version.cuda or \"cpu\")'").stdout


@pytest.mark.flavor_difference
def test_torch_distributed_has_gloo_and_nccl_where_cuda_is_built(container):
    report = json.loads(container.run(
        "python -c 'import json, torch, torch.distributed as d; print(json.dumps({"
        "\"gloo\": d.is_gloo_available(), \"nccl\": d.is_nccl_available(), \"cuda\": torch.version.cuda}))'"
    ).stdout)
    assert report["gloo"] is True
    assert report["nccl"] is (report["cuda"] is not None), report


def test_the_image_carries_no_ssh_host_keys(container):
    result = container.run("ls /etc/ssh/ssh_host_* /etc/ssh/host_keys/* 2>/dev/null | wc -l", user=None)
    assert result.stdout.strip() == "0"


def test_oci_labels_state_source_revision_date_and_versions(labels, flavor):
    for key in ["org.opencontainers.image.source", "org.opencontainers.image.revision",
                "org.opencontainers.image.created", "dev.pytorch-dev.torch-version",
                "dev.pytorch-dev.cuda-version", "dev.pytorch-dev.base-image"]:
        assert key in labels, key
    assert len(labels["org.opencontainers.image.revision"]) == 40, "the revision label is the full git sha"
    assert labels["org.opencontainers.image.created"].endswith("Z")
    assert labels["dev.pytorch-dev.flavor"] == flavor
    assert labels["dev.pytorch-dev.torch-version"]
    if flavor == "cpu":
        assert labels["dev.pytorch-dev.cuda-version"] == "none"


def test_the_trainer_and_doctor_are_where_the_readme_says(container):
    assert container.host().file("/opt/scripts/train_ddp.py").exists
    assert container.run("command -v doctor").stdout.strip() == "/usr/local/bin/doctor"


def test_the_healthcheck_is_declared(image):
    healthcheck = json.loads(docker("image", "inspect", "--format", "{{json .Config.Healthcheck}}", image).stdout)
    assert healthcheck["Test"] == ["CMD", "/usr/local/bin/healthcheck"]


def normalized(name: str) -> str:
    """PEP 503 name: pip list, pip freeze and lock files spell the same package differently."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_versions(requirements_text: str, machine: str = "") -> dict[str, str]:
    """Name: version of every pin; given the MACHINE (uname -m), a pin the lock made for another machine
    (its `platform_machine == '...'` marker: make lock merges each platform's) is left out."""
    pins = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)(.*)$", requirements_text, flags=re.M)
    return {normalized(name): version for name, version, rest in pins
            if not machine or re.search(r"platform_machine == '([^']+)'", rest) is None
            or f"platform_machine == '{machine}'" in rest}


def installed_versions(container) -> dict[str, str]:
    return {normalized(package["name"]): package["version"]
            for package in json.loads(container.run("pip list --format json").stdout)}


def test_every_locked_package_is_installed_at_its_locked_version(container, flavor):
    lock = REPO_ROOT / "docker" / "python" / f"requirements-{flavor}.lock"
    if not lock.exists():
        pytest.skip(f"no {lock.name}: this flavor installs the ranges (make lock FLAVOR={flavor} pins them)")
    machine = container.run("uname -m").stdout.strip()
    locked, installed = pinned_versions(lock.read_text(), machine), installed_versions(container)
    mismatched = {name: (version, installed.get(name)) for name, version in locked.items()
                  if installed.get(name) != version}
    assert len(locked) > 20 and not mismatched, f"locked vs installed: {mismatched}"


@pytest.mark.flavor_difference
def test_the_bases_pip_constraints_still_hold(container):
    constraint_file = container.run("echo ${PIP_CONSTRAINT:-}").stdout.strip()
    if not constraint_file:
        pytest.skip("this base sets no PIP_CONSTRAINT (the CPU flavor)")
    pins = pinned_versions(container.run(f"cat {constraint_file}").stdout)
    installed = installed_versions(container)
    moved = {name: (pin, installed[name]) for name, pin in pins.items() if name in installed and installed[name] != pin}
    assert len(pins) > 10 and not moved, f"pinned vs installed: {moved}"
