"""The container's limits have one source, doctor's constants: the compose files and the test
containers ask for what doctor recommends, and its fixes name the same values."""
from __future__ import annotations

import re

import pytest
import yaml

from doctor import limits
from tests.support import REPO_ROOT
from tests.support.containers import COMPOSE_LIKE_OPTIONS

COMPOSE_FILES_WITH_LIMITS = {"compose.yaml": "dev", "compose.multinode.yaml": "x-node"}


def service_limits(file_name: str, key: str) -> dict:
    document = yaml.safe_load((REPO_ROOT / file_name).read_text(encoding="utf-8"))
    return document[key] if key.startswith("x-") else document["services"][key]


@pytest.mark.parametrize("file_name", COMPOSE_FILES_WITH_LIMITS)
def test_compose_asks_for_the_stack_and_memlock_doctor_recommends(file_name: str) -> None:
    ulimits = service_limits(file_name, COMPOSE_FILES_WITH_LIMITS[file_name])["ulimits"]
    assert ulimits["stack"] == limits.RECOMMENDED_STACK_BYTES, (
        f"{file_name} sets stack {ulimits['stack']}, doctor recommends {limits.RECOMMENDED_STACK_BYTES}: "
        "change RECOMMENDED_STACK_BYTES in scripts/doctor/limits.py or the compose file, so they agree")
    assert str(ulimits["memlock"]).endswith(":--1}"), f"{file_name}: memlock must default to -1 (unlimited)"


def test_compose_gives_the_shm_doctor_recommends() -> None:
    shm = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text(encoding="utf-8"))["services"]["dev"]["shm_size"]
    assert shm == f"${{SHM_SIZE:-{limits.RECOMMENDED_SHM_SIZE}}}", (
        f"compose.yaml's shm_size {shm} differs from doctor's RECOMMENDED_SHM_SIZE {limits.RECOMMENDED_SHM_SIZE}")
    assert f"--shm-size={limits.RECOMMENDED_SHM_SIZE}" in limits.SHM_FIX


def test_the_test_containers_run_with_limits_start_up_does_not_warn_about() -> None:
    options = " ".join(COMPOSE_LIKE_OPTIONS)
    shm_gib = int(re.search(r"--shm-size=(\d+)g", options).group(1))
    assert shm_gib >= limits.MIN_SHM_GIB, "tests/support/containers.py gives less shm than start-up warns about"
    assert f"stack={limits.RECOMMENDED_STACK_BYTES}" in options
