"""Start-up hooks of the user's own (/etc/container/start.d): they run, by name, after the core steps,
which no mount can remove.

    make test-image PYTEST_ARGS="tests/image/test_start_hooks.py"
"""
from __future__ import annotations

import pathlib
import uuid

import pytest

from tests.support.containers import docker, run_container_to_completion
from tests.support.ssh_client import generate_key, public_line, run, ssh_session

pytestmark = pytest.mark.tier("full")

HOOKS_DIR = "/etc/container/start.d"


def write_hook(folder: pathlib.Path, name: str, body: str) -> pathlib.Path:
    folder.mkdir(exist_ok=True)
    hook = folder / name
    hook.write_text(body)
    return hook


def test_the_image_ships_the_hook_folder_empty(image):
    result = run_container_to_completion(image, command=["ls", "-A", HOOKS_DIR], options=["--shm-size=1g"])
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


@pytest.mark.tier("landing")
def test_a_hook_mounted_as_a_file_runs_is_logged_by_name_and_can_export(image, tmp_path):
    hook = write_hook(tmp_path, "10-team.sh", 'export TEAM_DATASET=/data/imagenet\n')
    result = run_container_to_completion(
        image, command=["bash", "-c", "echo $TEAM_DATASET; id -un"], options=[
            "--shm-size=1g", "--volume", f"{hook}:{HOOKS_DIR}/10-team.sh:ro"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/data/imagenet", "dev"]
    assert f"[start] running start-up hook {HOOKS_DIR}/10-team.sh" in result.stderr


def test_a_folder_mounted_over_start_d_keeps_the_user_ssh_and_jupyter(containers, tmp_path):
    hooks = tmp_path / "hooks"
    write_hook(hooks, "10-first.sh", "touch /tmp/first-hook-ran\n")
    write_hook(hooks, "20-second.sh", "test -e /tmp/first-hook-ran && touch /tmp/second-hook-ran\n")
    key = generate_key()
    container = containers(options=["--volume", f"{hooks}:{HOOKS_DIR}:ro", "--publish", "127.0.0.1::2222",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"])
    container.wait_until_healthy()
    assert container.run("test -e /tmp/second-hook-ran").rc == 0, "hooks run in name order"
    logs = container.logs()
    assert "started: ssh jupyter" in logs
    assert logs.index("10-first.sh") < logs.index("20-second.sh")
    processes = container.run("ps -eo user:16,comm= | grep -E 'jupyter|sleep' || true", user=None).stdout
    assert all(line.split()[0] == "dev" for line in processes.splitlines() if "jupyter" in line), processes
    with ssh_session(container.published_port(2222), key=key) as client:
        status, out, _ = run(client, "id -un")
    assert (status, out.strip()) == (0, "dev")


def test_a_command_never_runs_as_root_with_start_d_replaced(image, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_container_to_completion(image, command=["id", "-u"],
                                         options=["--shm-size=1g", "--volume", f"{empty}:{HOOKS_DIR}:ro"])
    assert result.returncode == 0 and result.stdout.strip() == "1000", result.stdout + result.stderr


@pytest.mark.parametrize("body, message", [
    ("false\n", "start-up hook /etc/container/start.d/50-broken.sh failed (exit status 1)"),
    ("exit 0\n", "start-up hook /etc/container/start.d/50-broken.sh called exit"),
    ('fatal "DATA_DIR is not set; set it in .env"\n', "DATA_DIR is not set; set it in .env"),
])
def test_a_hook_that_fails_or_exits_stops_start_up_with_one_line_naming_it(image, tmp_path, body, message):
    hook = write_hook(tmp_path, "50-broken.sh", body)
    result = run_container_to_completion(image, command=["echo", "the command ran"], options=[
        "--shm-size=1g", "--volume", f"{hook}:{HOOKS_DIR}/50-broken.sh:ro"])
    assert result.returncode != 0 and "the command ran" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr


def test_a_file_that_is_not_a_shell_script_is_ignored_with_a_warning(image, tmp_path):
    note = write_hook(tmp_path, "README", "hooks for our team\n")
    result = run_container_to_completion(image, command=["true"], options=[
        "--shm-size=1g", "--volume", f"{note}:{HOOKS_DIR}/README:ro"])
    assert result.returncode == 0
    assert f"start-up hook {HOOKS_DIR}/README is ignored: only *.sh files run" in result.stderr


def test_a_derived_image_adds_a_hook_with_one_copy(image, tmp_path):
    write_hook(tmp_path, "30-derived.sh", 'export FROM_DERIVED_IMAGE=yes\n')
    (tmp_path / "Dockerfile").write_text(f"FROM {image}\nCOPY 30-derived.sh {HOOKS_DIR}/\n")
    derived = f"pytorch-dev-derived-test:{uuid.uuid4().hex[:8]}"
    docker("build", "--quiet", "--tag", derived, str(tmp_path), timeout=300)
    try:
        result = run_container_to_completion(derived, command=["bash", "-c", "echo $FROM_DERIVED_IMAGE; id -un"],
                                             options=["--shm-size=1g"])
        assert result.stdout.split() == ["yes", "dev"], result.stderr
    finally:
        docker("image", "rm", "--force", derived, check=False)
