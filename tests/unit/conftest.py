"""The unit tier: pure functions of scripts/ and tools/, imported straight from the checkout.

    make test-unit          # seconds; no Docker engine, no image (the test venv gets a CPU torch)

scripts/, tools/release/, tools/regression/, tools/deploy/, tools/pipeline/, deploy/jupyterhub/ and the container's
supervisor are folders of scripts, not packages: their folders go on sys.path, as they are when the scripts run.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT

for folder in (REPO_ROOT / "scripts", REPO_ROOT / "scripts" / "multinode", REPO_ROOT / "tools" / "release",
               REPO_ROOT / "tools" / "regression", REPO_ROOT / "tools" / "deploy", REPO_ROOT / "tools" / "pipeline",
               REPO_ROOT / "deploy" / "jupyterhub", *(REPO_ROOT / "docker/rootfs/usr/local/lib/container" / kind
                                                   for kind in ("supervisor", "jupyter", "python-hooks"))):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A process group of this process alone (gloo), for code that asks for its rank and world size."""
    import torch.distributed as dist  # only the tests that take this fixture need torch
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
