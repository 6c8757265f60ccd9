"""A full or unwritable disk at start-up costs no file and gets the right advice: a full workspace
leaves no cut-short sample notebook (JupyterLab's default page), an empty one left earlier is replaced,
a full cache is told to free space (not to "make it writable"), and a token that could not be kept is
not said to be in its file.

    make test-image PYTEST_ARGS=tests/image/test_start_hints.py
"""
from __future__ import annotations

import uuid

import pytest

from tests.support.containers import docker

pytestmark = pytest.mark.tier("full")

NOTEBOOK = "/workspace/examples/ddp_quickstart.ipynb"
FULL_TMPFS = "size=4k,uid=1000,gid=1000"  # smaller than the notebook: cp fails with ENOSPC


@pytest.fixture
def workspace_volume():
    name = f"pt-workspace-{uuid.uuid4().hex[:8]}"
    yield name
    docker("volume", "rm", "--force", name, check=False)


def test_a_full_workspace_leaves_no_cut_short_notebook_and_says_it_is_full(containers):
    container = containers(options=["--tmpfs", f"/workspace:{FULL_TMPFS}", "--env", "ENABLE_SSH=0"])
    warning = [line for line in container.logs().splitlines() if "could not copy the sample notebook" in line]
    assert len(warning) == 1 and "/workspace is full; free some space there" in warning[0], container.logs()
    left = container.run("ls -A /workspace/examples")
    assert left.rc == 0 and left.stdout.strip() == "", left.stdout  # neither the notebook nor its partial copy


def test_an_empty_sample_notebook_from_an_earlier_start_is_replaced(containers, workspace_volume, image):
    docker("run", "--rm", "--user", "1000:1000", "--entrypoint", "bash", "--volume", f"{workspace_volume}:/workspace",
           image, "-c", f"mkdir -p /workspace/examples && : > {NOTEBOOK}")
    container = containers(options=["--volume", f"{workspace_volume}:/workspace", "--env", "ENABLE_SSH=0"])
    assert container.run(f"python3 -c 'import json; json.load(open(\"{NOTEBOOK}\"))'").rc == 0, container.logs()


def test_a_full_cache_is_told_to_free_space(containers):
    container = containers(options=["--tmpfs", f"/home/dev/.cache:{FULL_TMPFS}", "--env", "ENABLE_JUPYTER=0"])
    result = container.run("user-packages path")
    assert result.rc != 0 and "is full: free some space there" in result.stderr, result.stderr
    assert "writable" not in result.stderr, result.stderr


def test_a_token_that_could_not_be_kept_is_not_said_to_be_in_its_file(containers):
    container = containers(options=["--tmpfs", "/home/dev/.jupyter:ro", "--env", "ENABLE_SSH=0"])
    url = [line for line in container.logs().splitlines() if "JupyterLab: http://" in line]
    assert "could not keep the Jupyter token" in container.logs(), container.logs()
    assert len(url) == 1 and "token also in" not in url[0] and "only in this log" in url[0], container.logs()
