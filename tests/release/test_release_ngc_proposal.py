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
import urllib.request

import pytest

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT
from tests.support.local_registry import local_registry
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


def upload(address: str, content: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    start = urllib.request.Request(f"http://{address}/v2/{REPOSITORY}/blobs/uploads/", data=b"", method="POST")
    with urllib.request.urlopen(start, timeout=HTTP_TIMEOUT_S) as response:
        location = response.headers["Location"]
    location = location if location.startswith("http") else f"http://{address}{location}"
    put = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={digest}", data=content,
                                 method="PUT", headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(put, timeout=HTTP_TIMEOUT_S).close()
    return digest


def push_image(address: str, tag: str, torch: str, architecture: str = "amd64") -> str:
    """A one-layer image whose config sets PYTORCH_VERSION, as NGC's do; returns its manifest digest."""
    layer = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # empty gzip
    config = json.dumps({"architecture": architecture, "os": "linux", "config": {"Env": [f"PYTORCH_VERSION={torch}"]},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(b"").hexdigest()]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": upload(address, config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": upload(address, layer), "size": len(layer)}]}).encode()
    put = urllib.request.Request(f"http://{address}/v2/{REPOSITORY}/manifests/{tag}", data=manifest, method="PUT",
                                 headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    urllib.request.urlopen(put, timeout=HTTP_TIMEOUT_S).close()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def propose(dockerfile: pathlib.Path, address: str) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", "tools/release/propose_ngc.py", str(dockerfile), str(dockerfile.parent / "pr.md")],
                          cwd=REPO_ROOT, env={**environment_without_make(), "NGC_REGISTRY": address},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def ngc_registry(tmp_path_factory: pytest.TempPathFactory):
    with local_registry(tmp_path_factory.mktemp("ngc-registry")) as address:
        digests = {tag: push_image(address, tag, torch) for tag, torch in TORCH_BY_TAG.items()}
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
        platforms = []
        for architecture, torch in (("arm64", "2.12.0a0+arm64build"), ("amd64", "2.12.0a0+amd64build")):
            digest = push_image(address, f"26.06-py3-{architecture}", torch, architecture)
            with urllib.request.urlopen(urllib.request.Request(
                    f"http://{address}/v2/{REPOSITORY}/manifests/{digest}",
                    headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}), timeout=HTTP_TIMEOUT_S) as answer:
                size = len(answer.read())
            platforms.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size,
                              "platform": {"architecture": architecture, "os": "linux"}})
        index = json.dumps({"schemaVersion": 2, "mediaType": index_type, "manifests": platforms}).encode()
        urllib.request.urlopen(urllib.request.Request(f"http://{address}/v2/{REPOSITORY}/manifests/26.06-py3", data=index,
                                                      method="PUT", headers={"Content-Type": index_type}),
                               timeout=HTTP_TIMEOUT_S).close()
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(dockerfile_at(OLDEST_LISTED))
        result = propose(dockerfile, address)
    assert result.returncode == 0, result.stderr
    assert "ARG NGC_TAG=26.06-py3\n" in dockerfile.read_text()
    assert "ARG NGC_TORCH_VERSION=2.12.0a0+amd64build\n" in dockerfile.read_text()
    index_digest = "sha256:" + hashlib.sha256(index).hexdigest()
    assert index_digest in (tmp_path / "pr.md").read_text(), (tmp_path / "pr.md").read_text()
