"""The run folder's names and the start-up log's prefix have one home each in Python and in shell
(docker/rootfs/usr/local/lib/container/supervisor/run_folder.py and run_folder.sh beside supervisor/): the two
agree, the copies that must stay (the kernel's, which runs in the user's Python) agree with them, and no other file of the
runtime spells them. STOP_TIMEOUT is read once, from the settings start-up wrote.

    make test-unit PYTEST_ARGS=tests/unit/test_run_folder.py
"""
from __future__ import annotations

import ast
import json
import subprocess

import pytest

import run_folder
from tests.support import REPO_ROOT

CONTAINER_LIB = REPO_ROOT / "docker/rootfs/usr/local/lib/container"
SHELL_NAMES = {"RUN_DIR": "RUN_DIR", "SETTINGS_FILE": "SETTINGS", "STARTED_FILE": "STARTED",
               "SERVICES_FILE": "SERVICES", "JUPYTER_URL_FILE": "JUPYTER_URL", "STOP_DIR": "STOP_DIR",
               "STOPPING_FILE": "STOPPING", "LOST_DIR": "LOST_DIR", "LOG_PREFIX": "LOG_PREFIX"}


def shell_values(script: str, names: list[str]) -> dict[str, str]:
    printed = subprocess.run(["bash", "-c", f"source {script}; " + " ".join(f'printf "%s\\n" "${name}";' for name in names)],
                             check=True, capture_output=True, text=True).stdout
    return dict(zip(names, printed.splitlines(), strict=True))


def test_the_shell_and_python_homes_name_the_same_files():
    values = shell_values(str(CONTAINER_LIB / "run_folder.sh"), list(SHELL_NAMES))
    assert values == {name: getattr(run_folder, python_name) for name, python_name in SHELL_NAMES.items()}


def test_the_kernels_copy_of_the_stop_marker_is_the_same():
    """Read, not imported: the file registers itself with the IPython it runs in."""
    tree = ast.parse((CONTAINER_LIB / "python-hooks" / "kernel_stop.py").read_text())
    copies = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and [target.id for target in node.targets if isinstance(target, ast.Name)] == ["STOPPING"]]
    assert copies == [run_folder.STOPPING]


def test_the_default_stop_timeout_is_start_ups():
    values = shell_values(f"{CONTAINER_LIB}/log.sh; source {CONTAINER_LIB}/start/settings.sh",
                          ["DEFAULT_STOP_TIMEOUT_S"])
    assert int(values["DEFAULT_STOP_TIMEOUT_S"]) == run_folder.DEFAULT_STOP_TIMEOUT_S


RUNTIME_FILES = [REPO_ROOT / "entrypoint.sh", REPO_ROOT / "docker/rootfs/usr/local/bin/healthcheck",
                 *sorted(path for path in CONTAINER_LIB.rglob("*") if path.is_file()
                         and path.name not in ("run_folder.py", "run_folder.sh", "kernel_stop.py")
                         and "__pycache__" not in path.parts)]


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_other_file_of_the_runtime_spells_the_run_folder_or_the_log_prefix(path):
    text = path.read_text(errors="replace")
    assert run_folder.RUN_DIR not in text and run_folder.LOG_PREFIX not in text, \
        f"{path.name}: name the run folder's files and the [start] prefix through run_folder.py or run_folder.sh"


def test_stop_timeout_is_read_from_the_settings_start_up_wrote(tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"stop_timeout_s": 0}))
    assert run_folder.stop_timeout_s(str(settings)) == 0  # 0 means 0 s here, as it does to the supervisor
    assert run_folder.stop_timeout_s(str(tmp_path / "missing.json")) == run_folder.DEFAULT_STOP_TIMEOUT_S
