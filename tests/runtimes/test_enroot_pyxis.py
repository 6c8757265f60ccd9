"""Enroot/Pyxis (`srun --container-image=...`) and `apptainer exec`: the image's ENV alone, no entrypoint,
the caller's ids without a passwd entry, the cluster home mounted, a read-only image (tests/support/runtime_rules.py).

    make test-image PYTEST_ARGS=tests/runtimes/test_enroot_pyxis.py
"""
from __future__ import annotations

import json
import re

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import docker
from tests.support.runtime_rules import (TRAIN, checkpoints, enroot_flags, make_home, owners, poison_user_site,
                                          run)

pytestmark = pytest.mark.tier("landing")

# What start-up may set that a job does not need: who the user is, and the start-up's own switches.
# CONTAINER_WORKSPACE: where start-up found the user's work kept, for JupyterLab, which a job does not run.
START_UP_ONLY = {"HOME", "USER", "LOGNAME", "HOSTNAME", "CONTAINER_MODE", "PWD", "SHLVL", "_",
                 "LD_PRELOAD", "NSS_WRAPPER_PASSWD", "NSS_WRAPPER_GROUP", "CONTAINER_WORKSPACE"}


def test_enroot_pyxis_and_apptainer_exec_train_two_ranks_into_the_home_with_the_images_torch(image, tmp_path):
    """One run for both: `apptainer exec` starts the image under the same rules as Enroot. The home holds
    a ~/.local torch that raises, which must not shadow the image's."""
    home = make_home(tmp_path)
    poison_user_site(home)
    script = (f'python -c "import torch; print(\'torch from\', torch.__file__)" && '
              f'{TRAIN} --ckpt-dir "$HOME/ckpt"')
    result = run(image, enroot_flags(home), script)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "torch from /opt/" in result.stdout or "torch from /usr/" in result.stdout, result.stdout[:500]
    saved = checkpoints(home.path / "ckpt")
    assert saved, result.stdout[-2000:]
    assert owners([home.path / "ckpt", *saved]) == {(home.uid, home.gid)}


@pytest.mark.flavor_difference
def test_enroot_pyxis_job_finds_in_env_every_variable_start_up_would_give_it(image):
    """Enroot takes the environment from the image's ENV alone: what the entrypoint adds or changes for a
    command (PATH, NGC's CUDA_*, NCCL_* and LD_LIBRARY_PATH on the GPU flavor...) must already be there."""
    started = docker("run", "--rm", image, "env", "-0").stdout
    skipped = docker("run", "--rm", "--entrypoint", "", "--user", "4242:4243", image, "env", "-0").stdout
    with_entrypoint = dict(item.split("=", 1) for item in started.split("\0") if "=" in item)
    without = dict(item.split("=", 1) for item in skipped.split("\0") if "=" in item)
    missing = {name: value for name, value in with_entrypoint.items()
               if name not in START_UP_ONLY and without.get(name) != value}
    assert not missing, f"set only by start-up, so an Enroot job lacks them: {missing}"
    env = json.loads(docker("image", "inspect", "--format", "{{json .Config.Env}}", image).stdout)
    assert "PYTHONNOUSERSITE=1" in env


# docs/runtimes.md's placeholders, as train.sbatch names them.
SBATCH_NAMES = {"REGISTRY#IMAGE": "$CONTAINER_IMAGE", "pytorch-dev.sif": "$CONTAINER_IMAGE", "CKPT": "$CKPT_DIR"}


def test_enroot_pyxis_and_apptainer_modes_of_train_sbatch_launch_as_docs_runtimes_md_says():
    """The flags the runtime tests reproduce are the ones train.sbatch passes: the documented commands,
    word for word (placeholders aside), appear in its pyxis and apptainer modes."""
    docs = (REPO_ROOT / "docs" / "runtimes.md").read_text()
    sbatch = (REPO_ROOT / "deploy" / "slurm" / "train.sbatch").read_text().replace('"', "")
    documented = [re.search(r"`(srun --container-image=\S+ .*?) torchrun \.\.\.`", docs)[1],
                  re.search(r"`(apptainer exec .*?) torchrun \.\.\.`", docs)[1]]
    for command in documented:
        words = [word for word in command.split() if word != "srun"]
        for placeholder, name in SBATCH_NAMES.items():
            words = [word.replace(placeholder, name) for word in words]
        assert " ".join(words) in " ".join(sbatch.split()), command
