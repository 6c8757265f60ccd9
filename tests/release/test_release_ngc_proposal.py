"""The scheduled NGC proposal (`make ngc-proposal`, tools/release/propose_ngc.py) against a registry on
127.0.0.1 that lists newer NGC-style tags: it names the newest release, resolves its digest and torch from
the image, and changes the Dockerfile's NGC_TAG and NGC_TORCH_VERSION lines and nothing else.

    make test PYTEST_ARGS="tests/release/test_release_ngc_proposal.py"
"""
from __future__ import annotations

import difflib
import hashlib
import json
import pathlib
import re
import subprocess

import pytest

from tests.support import REPO_ROOT
from tests.support.local_registry import local_registry, put_blob, put_manifest
from tests.support.release import environment_without_make

pytestmark = pytest.mark.tier("landing")

REPOSITORY = "nvidia/pytorch"
TORCH_BY_TAG = {"25.12-py3": "2.10.0a0+b4e4ee81d3", "26.01-py3": "2.10.0a0+1111111111",
                "26.03-py3": "2.11.0a0+3333333333", "26.02-py3-igpu": "2.11.0a0+2222222222",
                "latest": "2.11.0a0+4444444444", "9.12-py3": "0.4.0"}


OLDEST_LISTED = "25.12-py3"


def dockerfile_at(ngc_tag: str) -> str:
    """The Dockerfile with its NGC_TAG line set to NGC_TAG."""
    return re.sub(r"^ARG NGC_TAG=.*$", f"ARG NGC_TAG={ngc_tag}", (REPO_ROOT / "Dockerfile").read_text(), count=1,
                  flags=re.M)


def push_image(address: str, tag: str, torch: str, architecture: str = "amd64") -> dict:
    """A one-layer image whose config sets PYTORCH_VERSION, as NGC's do; returns its manifest's descriptor."""
    layer = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # empty gzip
    config = json.dumps({"architecture": architecture, "os": "linux", "config": {"Env": [f"PYTORCH_VERSION={torch}"]},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(b"").hexdigest()]}}).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": dict(put_blob(address, REPOSITORY, config), mediaType="application/vnd.oci.image.config.v1+json"),
                "layers": [dict(put_blob(address, REPOSITORY, layer), mediaType="application/vnd.oci.image.layer.v1.tar+gzip")]}
    return put_manifest(address, REPOSITORY, tag, manifest)


def propose(dockerfile: pathlib.Path, address: str) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", "tools/release/propose_ngc.py", str(dockerfile), str(dockerfile.parent / "pr.md")],
                          cwd=REPO_ROOT, env={**environment_without_make(), "NGC_REGISTRY": address},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def ngc_registry(tmp_path_factory: pytest.TempPathFactory):
    with local_registry(tmp_path_factory.mktemp("ngc-registry")) as address:
        digests = {tag: push_image(address, tag, torch)["digest"] for tag, torch in TORCH_BY_TAG.items()}
        yield address, digests


def test_the_proposal_names_the_newest_release_and_changes_only_its_two_lines(ngc_registry, tmp_path):
    address, digests = ngc_registry
    dockerfile = tmp_path / "Dockerfile"
    original = dockerfile_at(OLDEST_LISTED)  # the fake registry's releases are newer than it, whatever ours is
    dockerfile.write_text(original)
    result = propose(dockerfile, address)
    assert result.returncode == 0, result.stderr
    changed = [line for line in difflib.unified_diff(original.splitlines(), dockerfile.read_text().splitlines(),
                                                     lineterm="", n=0) if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    removed = ["-" + line for line in original.splitlines() if line.startswith(("ARG NGC_TAG=", "ARG NGC_TORCH_VERSION="))]
    added = ["+ARG NGC_TAG=26.03-py3", f"+ARG NGC_TORCH_VERSION={TORCH_BY_TAG['26.03-py3']}"]
    assert sorted(changed) == sorted(removed + added), changed
    text = (tmp_path / "pr.md").read_text()
    assert "26.03-py3" in text and digests["26.03-py3"] in text, text


@pytest.mark.tier("full")
def test_on_the_newest_release_the_proposal_changes_nothing(ngc_registry, tmp_path):
    address, _ = ngc_registry
    dockerfile = tmp_path / "Dockerfile"
    newest = dockerfile_at("26.03-py3")
    dockerfile.write_text(newest)
    result = propose(dockerfile, address)
    assert result.returncode == 0 and "nothing to propose" in result.stdout, result.stdout + result.stderr
    assert dockerfile.read_text() == newest and not (tmp_path / "pr.md").exists()


@pytest.mark.parametrize("index_type", ["application/vnd.oci.image.index.v1+json",
                                        "application/vnd.docker.distribution.manifest.list.v2+json"])
def test_a_multi_platform_release_is_pinned_by_its_index_with_its_amd64_torch(index_type, tmp_path):
    """NGC publishes each release for amd64 and arm64: one index. The proposal pins the index's digest (a
    `FROM ...@digest` that builds on both) and reads torch from the amd64 image, here listed second."""
    (tmp_path / "registry").mkdir()
    with local_registry(tmp_path / "registry") as address:
        push_image(address, OLDEST_LISTED, TORCH_BY_TAG[OLDEST_LISTED])
        platforms = [dict(push_image(address, f"26.06-py3-{architecture}", torch, architecture),
                          platform={"architecture": architecture, "os": "linux"})
                     for architecture, torch in (("arm64", "2.12.0a0+arm64build"), ("amd64", "2.12.0a0+amd64build"))]
        index = put_manifest(address, REPOSITORY, "26.06-py3",
                             {"schemaVersion": 2, "mediaType": index_type, "manifests": platforms}, index_type)
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(dockerfile_at(OLDEST_LISTED))
        result = propose(dockerfile, address)
    assert result.returncode == 0, result.stderr
    assert "ARG NGC_TAG=26.06-py3\n" in dockerfile.read_text()
    assert "ARG NGC_TORCH_VERSION=2.12.0a0+amd64build\n" in dockerfile.read_text()
    assert index["digest"] in (tmp_path / "pr.md").read_text(), (tmp_path / "pr.md").read_text()
