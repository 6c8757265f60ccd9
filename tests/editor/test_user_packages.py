"""Packages a user adds without rebuilding stay when the container is recreated, see the image's packages,
honour the base's PIP_CONSTRAINT, and never replace torch (docs/editors.md, "Packages that persist").

    make test-image PYTEST_ARGS=tests/editor/test_user_packages.py

The cache volume is mounted where compose mounts `user-cache`; shells are login shells, as SSH, tmux and
editor terminals start them; notebook code runs in a kernel JupyterLab started. The packages come from
PyPI: small and pure Python.
"""
from __future__ import annotations

import shlex
import uuid

import pytest

from tests.editor.helpers.pip_in_containers import pip_trust_options
from tests.support.containers import docker
from tests.support.notebook_kernel import run_in_a_notebook_kernel

pytestmark = pytest.mark.tier("landing")

PACKAGE, PINNED_VERSION = "tabulate", "0.8.10"
NOTEBOOK_PACKAGE = "xmltodict"  # what a notebook adds with %pip
TOKEN = "user-packages-test-token-5e4d3c2b"
CACHE_MOUNT = "/home/dev/.cache"
# The base's constraints, as NGC ships them (PIP_CONSTRAINT): here they pin the package to an older version.
BASE_CONSTRAINTS = "/etc/pip/base-constraints.txt"
# The image's torchrun (its copy in the user's environment) starts workers that see the user's packages.
TORCHRUN_IMPORT = (f"echo 'import {PACKAGE}' >/tmp/uses_it.py && "
                   "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=1 /tmp/uses_it.py")


def login_shell(container, command: str, timeout: int = 300):
    return container.run(f"bash -lc {shlex.quote(command)}", timeout=timeout)


def one_line(result) -> str:
    """The output of a command that must say what went wrong in exactly one line."""
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def cache_volume():
    """A named volume like compose's user-cache. Tests name it before `containers`, so that it is removed
    after their containers (a volume in use cannot be)."""
    name = f"pt-user-cache-{uuid.uuid4().hex[:8]}"
    yield name
    docker("volume", "rm", "--force", name, check=False)


def test_a_package_installed_as_the_user_survives_recreation_and_honours_the_base_pins(cache_volume, containers,
                                                                                       tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{PACKAGE}=={PINNED_VERSION}\n")
    options = ["--volume", f"{cache_volume}:{CACHE_MOUNT}", "--volume", f"{constraints}:{BASE_CONSTRAINTS}:ro",
               "--env", f"PIP_CONSTRAINT={BASE_CONSTRAINTS}", *pip_trust_options()]
    first = containers(command=["sleep", "infinity"], options=options)
    installed = login_shell(first, f"pip install --quiet {PACKAGE} && python -c 'import {PACKAGE}; "
                                   f"print({PACKAGE}.__version__)'")
    assert installed.rc == 0 and installed.stdout.split()[-1] == PINNED_VERSION, installed.stdout + installed.stderr
    against_the_pin = login_shell(first, f"pip install --quiet '{PACKAGE}>{PINNED_VERSION}'")
    assert against_the_pin.rc != 0
    assert one_line(against_the_pin).count(f"{PACKAGE}=={PINNED_VERSION}") == 1, against_the_pin.stdout
    first.remove()

    second = containers(command=["sleep", "infinity"], options=options)
    again = login_shell(second, f"python -c 'import {PACKAGE}, torch' && {TORCHRUN_IMPORT}")
    assert again.rc == 0, f"gone after recreating the container, or unseen by torchrun: {again.stderr}"
    assert second.run(f"python -c 'import {PACKAGE}'").rc != 0, "the image's own Python stays untouched"


def test_replacing_torch_is_refused_with_one_line(cache_volume, containers):
    container = containers(command=["sleep", "infinity"],
                           options=["--volume", f"{cache_volume}:{CACHE_MOUNT}", *pip_trust_options()])
    before = container.run("python -c 'import torch; print(torch.__version__)'").stdout.strip()
    refused = login_shell(container, "pip install --quiet torch==2.5.0")
    assert refused.rc != 0
    assert "refused" in one_line(refused) and f"torch {before}" in one_line(refused)
    bypass = login_shell(container, "python -m pip install --quiet torch==2.5.0")
    assert bypass.rc != 0, "python -m pip must honour the torch pin too"
    after = login_shell(container, "python -c 'import torch; print(torch.__version__)'").stdout.strip()
    assert after == before


def jupyter_container(containers, *options: str):
    """A container with JupyterLab (no SSH), healthy; returns it and the server's URL."""
    container = containers(options=[*options, "--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0",
                                    "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    return container, f"http://127.0.0.1:{container.published_port(8888)}"


@pytest.mark.tier("full")
def test_a_notebook_kernel_runs_in_the_users_environment_as_a_terminal_does(cache_volume, containers):
    container, base_url = jupyter_container(containers, "--volume", f"{cache_volume}:{CACHE_MOUNT}",
                                            *pip_trust_options())
    installed = login_shell(container, f"pip install --quiet {PACKAGE}")
    assert installed.rc == 0, installed.stdout + installed.stderr

    reply = run_in_a_notebook_kernel(container, base_url, TOKEN, f"import {PACKAGE}, torch")
    assert reply["status"] == "ok", f"a notebook does not see what pip installed in a terminal: {reply}"
    # What a cell's shell commands (!pip, !torchrun) find on PATH is the environment's, as in a terminal.
    cell = ("import subprocess\n"
            "assert '/user-packages/' in subprocess.check_output('command -v pip', shell=True, text=True)\n"
            f"subprocess.run({TORCHRUN_IMPORT!r}, shell=True, check=True)")
    reply = run_in_a_notebook_kernel(container, base_url, TOKEN, cell)
    assert reply["status"] == "ok", reply
    reply = run_in_a_notebook_kernel(container, base_url, TOKEN, f"%pip install --quiet {NOTEBOOK_PACKAGE}")
    assert reply["status"] == "ok", reply
    seen = login_shell(container, f"python -c 'import {NOTEBOOK_PACKAGE}'")
    assert seen.rc == 0, f"%pip in a notebook installed elsewhere than the user's environment: {seen.stderr}"
    assert container.run(f"python -c 'import {NOTEBOOK_PACKAGE}'").rc != 0, "the image's own Python stays untouched"


# A file the user's environment puts before the image's packages, breaking ipykernel (a stray module
# named like one of its dependencies does this as well as a bad upgrade).
BREAK_IPYKERNEL = ("echo 'raise ImportError(\"broken on purpose\")' "
                   "> \"$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')/traitlets.py\"")


# A .pth file in the user's environment that never returns: every start of that Python hangs.
HANG_AT_START = ("echo 'import time; time.sleep(3600)' "
                 "> \"$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')/zz_hang.pth\"")


@pytest.mark.parametrize("cause", ["unwritable cache", "ipykernel broken in the environment", "a .pth that hangs"])
@pytest.mark.tier("full")
def test_a_notebook_kernel_falls_back_to_the_images_python_and_the_log_says_why(cache_volume, containers, cause):
    if cause == "unwritable cache":
        container, base_url = jupyter_container(containers, "--tmpfs", f"{CACHE_MOUNT}:ro")
        reason = f"user-packages: cannot set up {CACHE_MOUNT}/user-packages"
    else:
        container, base_url = jupyter_container(containers, "--volume", f"{cache_volume}:{CACHE_MOUNT}")
        broken = login_shell(container, HANG_AT_START if cause == "a .pth that hangs" else BREAK_IPYKERNEL)
        assert broken.rc == 0, broken.stderr
        reason = ("your environment's Python did not start within 15 s" if cause == "a .pth that hangs"
                  else "ImportError: broken on purpose")
        # The repair tool itself still starts: it runs on the image's Python.
        assert login_shell(container, "user-packages path", timeout=30).rc == 0
    reply = run_in_a_notebook_kernel(container, base_url, TOKEN,
                                     "import sys, torch; assert '/user-packages/' not in sys.prefix, sys.prefix")
    assert reply["status"] == "ok", reply
    logs = container.logs()
    assert reason in logs, logs[-3000:]
    assert "python-kernel: this kernel runs the image's Python, without your own packages" in logs, logs[-3000:]


# What `PIP_CONFIG_FILE=/dev/null pip install torch==...` leaves in the environment, without the download.
OWN_TORCH = ("site=$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))') && "
             "mkdir \"$site/torch-2.5.0.dist-info\" && "
             "printf 'Metadata-Version: 2.1\\nName: torch\\nVersion: 2.5.0\\n' > \"$site/torch-2.5.0.dist-info/METADATA\"")


@pytest.mark.tier("full")
def test_a_torch_installed_past_the_pin_is_warned_about_in_every_new_shell(cache_volume, containers):
    container = containers(options=["--volume", f"{cache_volume}:{CACHE_MOUNT}", "--env", "ENABLE_JUPYTER=0"])
    planted = login_shell(container, OWN_TORCH)
    assert planted.rc == 0, planted.stderr
    shell = login_shell(container, "true")
    warnings = [line for line in shell.stderr.splitlines() if "your environment holds its own torch 2.5.0" in line]
    assert len(warnings) == 1 and "pip uninstall torch" in warnings[0], shell.stderr


def image_has(container, package: str) -> bool:
    return container.run(f"python -c 'import {package}'").rc == 0


@pytest.mark.tier("full")
def test_torchvision_in_the_image_runs_with_its_torch(containers):
    """The build installs the torchvision made for its torch where it can get one (the wheelhouse, or
    torch's own index), else leaves it out in one line of the build's log."""
    container = containers(command=["sleep", "infinity"])
    if not image_has(container, "torchvision"):
        pytest.skip("this image was built without torchvision: neither its wheelhouse nor torch's index had "
                    "the build for its torch (the build's log says so)")
    nms = container.run("python -c 'import torch, torchvision.ops; "
                        "print(torchvision.ops.nms(torch.zeros(1, 4), torch.ones(1), 0.5).tolist())'")
    assert nms.rc == 0 and nms.stdout.split() == ["[0]"], nms.stdout + nms.stderr


def test_pip_install_torchvision_names_the_build_for_the_images_torch_in_one_line(cache_volume, containers):
    """`pip install torchvision` from pip's own index gets a build for another torch, which imports and then
    fails ("operator torchvision::nms does not exist"): refused, naming the build and its index."""
    container = containers(command=["sleep", "infinity"],
                           options=["--volume", f"{cache_volume}:{CACHE_MOUNT}", *pip_trust_options()])
    if image_has(container, "torchvision"):
        pytest.skip("this image has torchvision: the torch pin covers it (test_replacing_torch_is_refused_with_one_line)")
    before = container.run("python -c 'import torch; print(torch.__version__)'").stdout.strip()
    refused = login_shell(container, "pip install --quiet torchvision")
    assert refused.rc != 0
    line = one_line(refused)
    release, _, local = before.partition("+")
    if local != "cpu":  # torch is its base's own build: no index has a torchvision for it
        assert "use an image that includes torchvision" in line, line
    else:
        minor, patch = release.split(".")[1:3]
        assert line.endswith(f"pip install --index-url https://download.pytorch.org/whl/cpu "
                             f"torchvision==0.{int(minor) + 15}.{patch}+cpu"), line
    assert login_shell(container, "python -c 'import torch; print(torch.__version__)'").stdout.strip() == before


def test_torchvision_in_a_requirement_file_is_refused_in_the_same_one_line(cache_volume, containers):
    """`pip install -r requirements.txt` naming torchvision (here in a file the first one names) is the same
    request: one line naming the build for the image's torch, not pip's many lines of a failed resolve."""
    container = containers(command=["sleep", "infinity"],
                           options=["--volume", f"{cache_volume}:{CACHE_MOUNT}", *pip_trust_options()])
    if image_has(container, "torchvision"):
        pytest.skip("this image has torchvision: the torch pin covers it (test_replacing_torch_is_refused_with_one_line)")
    container.run("mkdir -p /tmp/project && printf 'numpy  # ours\n-r vision.txt\n' > /tmp/project/requirements.txt"
                  " && printf 'torchvision>=0.20\n' > /tmp/project/vision.txt")
    refused = login_shell(container, "pip install -r /tmp/project/requirements.txt")
    assert refused.rc != 0
    line = one_line(refused)
    assert "refused" in line and "torchvision" in line and "built for another torch" in line, line
    # An index named in the file is the user's choice: pip asks it, and its answer is pip's (here the index
    # is unreachable); never the refusal of an install from pip's default index.
    container.run("printf -- '--index-url http://127.0.0.1:9/simple\ntorchvision\n' > /tmp/project/vision.txt")
    named = login_shell(container, "pip install --retries 0 --timeout 2 -r /tmp/project/requirements.txt")
    assert named.rc != 0 and "built for another torch" not in named.stdout + named.stderr, named.stdout


OWN_TORCHVISION = (OWN_TORCH.replace("torch-2.5.0", "torchvision-0.20.0").replace("Name: torch", "Name: torchvision")
                   .replace("Version: 2.5.0", "Version: 0.20.0"))


@pytest.mark.tier("full")
def test_a_users_own_package_the_image_lacks_is_not_warned_about_as_hiding_the_images(cache_volume, containers):
    container = containers(command=["sleep", "infinity"], options=["--volume", f"{cache_volume}:{CACHE_MOUNT}"])
    if image_has(container, "torchvision"):
        pytest.skip("this image has torchvision: a copy of the user's does hide it, and is warned about")
    planted = login_shell(container, OWN_TORCHVISION)
    assert planted.rc == 0, planted.stderr
    shell = login_shell(container, "true")
    assert "holds its own" not in shell.stderr, shell.stderr
