"""`apptainer run`: the image's entrypoint runs as the calling user, on a read-only image with the home
mounted (tests/support/runtime_rules.py). Start-up must not try to change users or ids; JupyterLab starts as that user
with its token; SSH, which needs root, is off with one line. (`apptainer exec` is Enroot's rules:
test_enroot_pyxis.py.)

    make test-image PYTEST_ARGS=tests/runtimes/test_apptainer.py
"""
from __future__ import annotations

import pytest

from tests.support.containers import run_container_to_completion
from tests.support.runtime_rules import (SERVICE_OPTIONS, TRAIN, apptainer_run_flags, check_services_run_as,
                                          checkpoints, make_home, owners)

pytestmark = pytest.mark.tier("full")


def test_apptainer_run_serves_jupyter_as_the_caller_with_its_token_and_says_why_ssh_is_off(containers, tmp_path):
    home = make_home(tmp_path)
    container = containers(options=[*apptainer_run_flags(home), *SERVICE_OPTIONS])
    check_services_run_as(container, home.uid)
    assert "WARNING: PUID" not in container.logs()


def test_apptainer_run_trains_two_ranks_and_checkpoints_as_the_caller(image, tmp_path):
    home = make_home(tmp_path)
    result = run_container_to_completion(image, options=["--shm-size=1g", *apptainer_run_flags(home)],
                                         command=["bash", "-c", f'{TRAIN} --ckpt-dir "$HOME/ckpt"'], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = checkpoints(home.path / "ckpt")
    assert saved and owners(saved) == {(home.uid, home.gid)}, result.stdout[-2000:]
