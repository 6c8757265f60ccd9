"""Kubernetes' "restricted" Pod Security Standard, and OpenShift's arbitrary uid in group 0, reproduced with
docker flags: a non-root uid, every capability dropped, no privilege escalation, a read-only root with
an emptyDir wherever deploy/kubernetes gives one, the checkpoint volume with fsGroup (tests/support/runtime_rules.py).

    make test-image PYTEST_ARGS=tests/runtimes/test_kubernetes_restricted.py
"""
from __future__ import annotations

import pytest

from tests.support.runtime_rules import (FS_GROUP, KUBERNETES_POD_USER, OPENSHIFT_UID, SERVICE_OPTIONS, TRAIN,
                                          check_services_run_as, checkpoints, fs_group_volume,
                                          kubernetes_restricted_flags, owners)
from tests.support.containers import docker, run_container_to_completion

pytestmark = pytest.mark.tier("full")

# The uid:gid each platform runs the pod as: the image's user, or OpenShift's arbitrary uid in group 0.
# (tests/deploy/test_kubernetes.py checks that every pod under deploy/ runs as KUBERNETES_POD_USER.)
PLATFORMS = {"kubernetes": KUBERNETES_POD_USER, "openshift": (OPENSHIFT_UID, 0)}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_kubernetes_restricted_services_serve_jupyter_with_its_token_as_the_pods_user(containers, tmp_path, platform):
    uid, gid = PLATFORMS[platform]
    container = containers(options=[*kubernetes_restricted_flags(uid, gid, fs_group_volume(tmp_path)),
                                    *SERVICE_OPTIONS])
    check_services_run_as(container, uid)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_kubernetes_restricted_command_trains_two_ranks_into_the_checkpoint_volume(image, tmp_path, platform):
    uid, gid = PLATFORMS[platform]
    volume = fs_group_volume(tmp_path)
    result = run_container_to_completion(
        image, options=["--shm-size=1g", *kubernetes_restricted_flags(uid, gid, volume)],
        command=["bash", "-c", f"cd /workspace && {TRAIN}"], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    # The trainer's default --ckpt-dir, in the volume; fsGroup's setgid folder gives its files that group.
    saved = checkpoints(volume / "checkpoints")
    assert saved and owners(saved) == {(uid, FS_GROUP)}, result.stdout[-2000:]


def test_openshift_arbitrary_uid_writes_the_images_workspace_and_home_and_gets_a_clean_login_shell(containers):
    """Without volumes: the image's own /workspace and home are group 0's with the owner's rights (g=u)."""
    container = containers(command=["sleep", "infinity"], options=["--user", f"{OPENSHIFT_UID}:0"])
    made = docker("exec", container.name, "bash", "-c",
                  'touch /workspace/made /home/dev/made && echo made', check=False)
    assert made.returncode == 0 and made.stdout.splitlines()[-1] == "made", made.stdout + made.stderr
    login = docker("exec", container.name, "bash", "-lc", "python -c 'import torch' && echo ok", check=False)
    assert login.stdout.strip() == "ok" and login.stderr == "", login.stderr
    assert "PUID" not in container.logs(), container.logs()
