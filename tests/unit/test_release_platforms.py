"""A release of several platforms (tools/release/platforms.py): which builds are one release, the tags
their index gets, and the index itself. The push, signing and verification of a real two-platform index
through a registry are tests/arm64/test_arm64_release.py."""
from __future__ import annotations

import json

import pytest

import platforms
import sbom
from tags import ReleaseError

AMD64 = {
    "dev.pytorch-dev.flavor": "cpu", "dev.pytorch-dev.torch-version": "2.13.0+cpu",
    "dev.pytorch-dev.cuda-version": "none", "dev.pytorch-dev.base-image": "debian:bookworm-slim",
    "org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
    "org.opencontainers.image.created": "2026-12-06T10:00:00Z",
}
DESCRIPTOR = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": "sha256:" + "a" * 64,
              "size": 1234}


def test_platforms_are_parsed_and_a_wrong_or_repeated_one_is_refused_in_one_line():
    assert platforms.parse_platforms(" linux/amd64, linux/arm64 ,") == ["linux/amd64", "linux/arm64"]
    assert platforms.parse_platforms("linux/arm/v7") == ["linux/arm/v7"]
    for text, message in (("arm64", "not a platform"), ("linux/amd64;rm -rf /", "not a platform"),
                          ("linux/arm64,linux/arm64", "architecture twice")):
        with pytest.raises(ReleaseError, match=message):
            platforms.parse_platforms(text)


def test_builds_of_one_release_get_the_first_platforms_tags():
    labels = {"linux/amd64": AMD64, "linux/arm64": dict(AMD64, **{"org.opencontainers.image.created":
                                                                   "2026-12-06T23:59:00Z"})}
    assert platforms.release_tags(labels) == ["cpu-torch2.13.0-cpu-bookworm-20261206-g0123456", "cpu-latest"]


@pytest.mark.parametrize("label, value, what", [
    ("org.opencontainers.image.revision", "89abcdef0123456789abcdef0123456789abcdef", "commit"),
    ("dev.pytorch-dev.flavor", "gpu", "flavor"),
    ("dev.pytorch-dev.source-dirty", "true", "source state"),
])
def test_builds_of_another_commit_flavor_or_tree_are_never_one_release(label, value, what, monkeypatch):
    monkeypatch.setenv("ALLOW_PLATFORM_DIFFERENCES", "1")  # allows what the tags name, never these
    with pytest.raises(ReleaseError, match=f"not one release: linux/arm64's {what} is {value}"):
        platforms.release_tags({"linux/amd64": AMD64, "linux/arm64": dict(AMD64, **{label: value})})


@pytest.mark.parametrize("label, value, what", [
    ("dev.pytorch-dev.torch-version", "2.10.0", "torch"),
    ("dev.pytorch-dev.base-image", "debian-arm64:bookworm-slim", "base image"),
    ("org.opencontainers.image.created", "2026-12-07T00:01:00Z", "build date"),
])
def test_a_difference_the_tags_name_is_refused_unless_allowed_and_then_said(label, value, what, monkeypatch, capsys):
    labels = {"linux/amd64": AMD64, "linux/arm64": dict(AMD64, **{label: value})}
    monkeypatch.delenv("ALLOW_PLATFORM_DIFFERENCES", raising=False)
    with pytest.raises(ReleaseError, match=f"linux/arm64's {what} is .* ALLOW_PLATFORM_DIFFERENCES=1"):
        platforms.release_tags(labels)
    monkeypatch.setenv("ALLOW_PLATFORM_DIFFERENCES", "1")
    assert platforms.release_tags(labels)[0] == "cpu-torch2.13.0-cpu-bookworm-20261206-g0123456"
    assert capsys.readouterr().err.startswith(f"note: linux/arm64's {what} is ")


def test_the_index_names_each_platform_and_what_it_has():
    arm64 = dict(AMD64, **{"dev.pytorch-dev.torch-version": "2.10.0"})
    other = dict(DESCRIPTOR, digest="sha256:" + "b" * 64)
    index = json.loads(platforms.index_manifest([("linux/amd64", DESCRIPTOR, AMD64), ("linux/arm64", other, arm64)]))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json" and platforms.is_index(index)
    assert platforms.platforms_in(index) == ["linux/amd64", "linux/arm64"]
    entry = platforms.entry_for(index, "linux/arm64")
    assert {key: entry[key] for key in DESCRIPTOR} == other
    assert entry["annotations"]["dev.pytorch-dev.torch-version"] == "2.10.0"
    assert platforms.entry_for(index, "linux/s390x") is None
    assert not platforms.is_index({"mediaType": DESCRIPTOR["mediaType"], "layers": []})


def test_amd64_keeps_the_sbom_name_single_platform_releases_had_and_others_are_named_apart():
    assert sbom.sbom_file_name(AMD64) == sbom.sbom_file_name(AMD64, "linux/amd64")
    arm64_name = "sbom-cpu-torch2.13.0-cpu-bookworm-20261206-g0123456-arm64.cdx.json"
    assert sbom.sbom_file_name(AMD64, "linux/arm64") == arm64_name
