"""The image's layers, as a runtime that stacks them itself sees them: rootless Podman takes the root
folder's mode from the layers (Docker always shows 0755), so a base imported from a 0700 folder, as CI's
offline bases once were, fails every non-root process there with `libc.so.6: Permission denied`. The GPU
flavor's layers include the NGC stand-in's, so this checks that stand-in too.

    make test-image PYTEST_ARGS=tests/runtimes/test_image_layers.py
"""
from __future__ import annotations

import subprocess
import tarfile

import pytest

pytestmark = pytest.mark.tier("full")

ROOT_ENTRIES = {".", "./", "/"}
WORLD_READABLE_ROOT = 0o755


def layer_root_modes(image: str) -> list[int]:
    """The mode of the root folder in each layer of IMAGE that carries one (`docker save`, read as a stream:
    a layer's root entry comes first, so the rest of each layer is skipped)."""
    modes = []
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    assert save.stdout is not None
    with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
        for member in archive:
            if not member.isfile() or not (member.name.endswith("layer.tar") or member.name.startswith("blobs/")):
                continue
            layer = archive.extractfile(member)
            try:
                with tarfile.open(fileobj=layer, mode="r|") as entries:
                    first = next(iter(entries), None)
            except tarfile.ReadError:
                continue  # an OCI blob that is not a layer (a config or a manifest)
            if first is not None and first.name in ROOT_ENTRIES:
                modes.append(first.mode & 0o7777)
    assert save.wait(timeout=300) == 0
    return modes


def test_every_layer_that_carries_the_root_folder_leaves_it_world_readable(image):
    modes = layer_root_modes(image)
    assert modes, "no layer carries the root folder: the base's root entry was not found"
    assert all(mode == WORLD_READABLE_ROOT for mode in modes), [oct(mode) for mode in modes]
