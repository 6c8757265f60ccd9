"""Release tags and the SBOM document, computed from an image's labels (tools/release)."""
from __future__ import annotations

import pytest

import sbom
import tags

CPU_LABELS = {
    "dev.pytorch-dev.flavor": "cpu", "dev.pytorch-dev.torch-version": "2.13.0+cpu",
    "dev.pytorch-dev.cuda-version": "none", "dev.pytorch-dev.base-image": "debian:bookworm-slim",
    "org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
    "org.opencontainers.image.created": "2026-11-30T10:00:00Z",
}
GPU_LABELS = dict(CPU_LABELS, **{
    "dev.pytorch-dev.flavor": "gpu", "dev.pytorch-dev.torch-version": "2.8.0a0+34c6371d24",
    "dev.pytorch-dev.cuda-version": "13.0.0.044", "dev.pytorch-dev.base-image": "nvcr.io/nvidia/pytorch:25.08-py3",
})


def test_cpu_tags_state_the_facts_and_move_cpu_latest():
    assert tags.compute_tags(CPU_LABELS) == ["cpu-torch2.13.0-cpu-bookworm-20261130-g0123456", "cpu-latest"]


def test_gpu_tags_come_from_ngc_labels_and_move_latest():
    assert tags.compute_tags(GPU_LABELS) == ["gpu-torch2.8.0a0-cuda13.0-ngc25.08-20261130-g0123456",
                                             "gpu-latest", "latest"]
    pinned = dict(GPU_LABELS, **{"dev.pytorch-dev.base-image": "nvcr.io/nvidia/pytorch:25.08-py3@sha256:" + "a" * 64})
    assert tags.compute_tags(pinned)[0] == "gpu-torch2.8.0a0-cuda13.0-ngc25.08-20261130-g0123456"


def test_a_build_from_a_dirty_tree_is_marked_and_never_latest():
    dirty = dict(GPU_LABELS, **{"dev.pytorch-dev.source-dirty": "true"})
    assert tags.compute_tags(dirty) == ["gpu-torch2.8.0a0-cuda13.0-ngc25.08-20261130-g0123456-dirty"]
    clean = dict(GPU_LABELS, **{"dev.pytorch-dev.source-dirty": "false"})
    assert tags.compute_tags(clean) == tags.compute_tags(GPU_LABELS)


@pytest.mark.parametrize("label, value, message", [
    ("org.opencontainers.image.revision", "", "is not a git commit"),
    ("org.opencontainers.image.created", "yesterday", "is not an RFC 3339 date"),
    ("dev.pytorch-dev.cuda-version", "thirteen", "is not a CUDA version"),
])
def test_a_bad_label_is_one_error_that_says_to_rebuild(label, value, message):
    with pytest.raises(tags.ReleaseError, match=message):
        tags.compute_tags(dict(CPU_LABELS, **{label: value}))


def test_an_image_not_built_here_names_the_missing_labels():
    with pytest.raises(tags.ReleaseError, match="lacks the label.*dev.pytorch-dev.flavor"):
        tags.compute_tags({})


def test_sbom_lists_the_image_its_os_and_every_package_once_with_purls():
    inventory = {
        "os_release": {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12"},
        "debs": [{"name": "tmux", "version": "3.3a-3", "arch": "amd64"},
                 {"name": "openssh-server", "version": "1:9.2p1-2+deb12u3", "arch": "amd64"}],
        "dists": [{"key": "torch", "name": "torch", "version": "2.13.0+cpu", "license_expression": "BSD-3-Clause"}],
    }
    bom = sbom.build_bom("pytorch-dev:cpu-latest", "sha256:" + "b" * 64, CPU_LABELS, inventory)
    assert bom["specVersion"] == "1.5"
    assert bom["metadata"]["component"]["version"] == tags.compute_tags(CPU_LABELS)[0]
    purls = [component.get("purl") for component in bom["components"]]
    assert purls[1:] == [
        "pkg:deb/debian/openssh-server@1%3A9.2p1-2%2Bdeb12u3?arch=amd64&distro=debian-12",
        "pkg:deb/debian/tmux@3.3a-3?arch=amd64&distro=debian-12",
        "pkg:pypi/torch@2.13.0%2Bcpu",
    ]
    assert bom["components"][-1]["licenses"] == [{"expression": "BSD-3-Clause"}]
    # The serial number is derived from the image id, so the same image always gets the same document.
    assert bom == sbom.build_bom("pytorch-dev:cpu-latest", "sha256:" + "b" * 64, CPU_LABELS, inventory)


def test_sboms_of_two_ngc_releases_built_from_one_commit_have_their_own_names():
    next_release = dict(GPU_LABELS, **{"dev.pytorch-dev.base-image": "nvcr.io/nvidia/pytorch:25.09-py3"})
    assert sbom.sbom_file_name(GPU_LABELS) == "sbom-gpu-torch2.8.0a0-cuda13.0-ngc25.08-20261130-g0123456.cdx.json"
    assert sbom.sbom_file_name(next_release) != sbom.sbom_file_name(GPU_LABELS)


@pytest.mark.parametrize(("tag", "moving"), [
    ("latest", True), ("cpu-latest", True), ("gpu-latest-zstd", True), ("latest-zstd", True),
    ("cpu-torch2.13.0-cpu-bookworm-20261130-g0123456", False), ("cpu-torch2.13.0-cpu-bookworm-20261130-g0123456-zstd", False),
    ("latest-dirty", False), ("notlatest", False), ("cpu-latest-vscode", True), ("latest-vscode-zstd", True)])
def test_the_moving_tags_are_latest_and_flavor_latest_with_their_zstd_variants(tag, moving):
    assert tags.is_moving(tag) is moving


def test_the_vscode_variant_gets_every_tag_with_vscode_appended():
    variant = {**GPU_LABELS, "dev.pytorch-dev.vscode": "4.139.1"}
    assert tags.compute_tags(variant) == [tag + "-vscode" for tag in tags.compute_tags(GPU_LABELS)]
