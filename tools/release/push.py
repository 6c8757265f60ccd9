#!/usr/bin/env python3
"""Push a built image under every release tag to a registry; print each reference it pushed.

    python3 tools/release/push.py REGISTRY IMAGE PLATFORMS RELEASE_DIR    # or: make push REGISTRY=host:port

REGISTRY is a host[:port] with an optional namespace (127.0.0.1:5000, ghcr.io/my-team). Each tag of
`tags.py` becomes REGISTRY/<image name>:<tag>; the output is one `reference@digest` a line, so a CI log
records exactly what was published. The same lines go to RELEASE_DIR/pushed-<immutable tag>.txt, the
list `make zstd` and `make sign` work on. Log in first (`docker login HOST`) where the registry asks for it.

PLATFORMS empty pushes IMAGE itself under every tag. PLATFORMS=linux/amd64,linux/arm64 pushes each
platform's build (platforms.py says which) under its own tag, <its immutable tag>-<architecture>, then
puts one OCI index of them under every release tag, so `docker pull` of any tag gets the image of the
puller's platform. The index comes first in the output, then the entries.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from platforms import OCI_INDEX, architecture, index_manifest, local_builds, parse_platforms, release_tags
from registry_api import Registry
from command_line import ReleaseError, run_command
from tags import compute_tags, read_labels

PUSH_TIMEOUT_S = 1800
DIGEST_LINE = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def _repository_name(image: str) -> str:
    """pytorch-dev for pytorch-dev:cpu-latest; team/pytorch-dev for localhost:5000/team/pytorch-dev:x."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    first, _, rest = name.partition("/")
    # A first component with a dot or a port, or "localhost", is a registry host: drop it.
    return rest if rest and ("." in first or ":" in first or first == "localhost") else name


def _docker(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"`docker {' '.join(args)}` failed: {(result.stderr or result.stdout).strip()}")
    return result.stdout


def record_pushed(release_dir: pathlib.Path, immutable_tag: str, lines: list[str]) -> pathlib.Path:
    """Writes what was pushed, whole or not at all (renamed into place), for `make zstd` and `make sign`."""
    release_dir.mkdir(parents=True, exist_ok=True)
    path = release_dir / f"pushed-{immutable_tag}.txt"
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text("".join(f"{line}\n" for line in lines))
    os.replace(partial, path)
    return path


def _repository(registry: str, image: str) -> str:
    registry = registry.strip().rstrip("/")
    if not registry:
        raise ReleaseError("REGISTRY is not set: name where to push, e.g. `make push REGISTRY=127.0.0.1:5000` "
                           "or `make push REGISTRY=ghcr.io/my-team`")
    if "://" in registry:
        raise ReleaseError(f"REGISTRY={registry} has a scheme: give host[:port][/namespace] without http(s)://")
    return f"{registry}/{_repository_name(image)}"


def _push_as(image: str, reference: str) -> str:
    """Pushes IMAGE as REFERENCE; returns reference@digest as the engine reported it."""
    _docker("tag", image, reference)
    digest = DIGEST_LINE.search(_docker("push", reference, timeout=PUSH_TIMEOUT_S))
    return f"{reference}@{digest.group(1)}" if digest else reference


def push(registry: str, image: str, platforms: str, release_dir: str) -> list[str]:
    """Pushes IMAGE (or, with PLATFORMS, one index of its platforms' builds) under every release tag;
    returns the ref@digest lines."""
    repository = _repository(registry, image)
    if platforms.strip():
        return push_index(repository, image, parse_platforms(platforms), release_dir)
    tags = compute_tags(read_labels(image))
    pushed = []
    for tag in tags:
        pushed.append(_push_as(image, f"{repository}:{tag}"))
        print(pushed[-1], flush=True)
    record_pushed(pathlib.Path(release_dir), tags[0], pushed)
    return pushed


def push_index(repository: str, image: str, platforms: list[str], release_dir: str) -> list[str]:
    builds = local_builds(image, platforms)
    labels = {platform: read_labels(build) for platform, build in builds.items()}
    tags = release_tags(labels)  # refuses builds that are not one release
    registry, entries, entry_lines = Registry(repository), [], []
    for platform, build in builds.items():
        entry_tag = f"{compute_tags(labels[platform])[0]}-{architecture(platform)}"
        _push_as(build, f"{repository}:{entry_tag}")
        descriptor = registry.descriptor(entry_tag)[1]  # the registry's own bytes: what the index must name
        entries.append((platform, descriptor, labels[platform]))
        entry_lines.append(f"{repository}:{entry_tag}@{descriptor['digest']}")
    index = index_manifest(entries)
    index_lines = [f"{repository}:{tag}@{registry.put_manifest(tag, index, OCI_INDEX)}" for tag in tags]
    print("\n".join(index_lines + entry_lines), flush=True)
    record_pushed(pathlib.Path(release_dir), tags[0], index_lines + entry_lines)
    return index_lines + entry_lines


def main(argv: list[str]) -> int:
    return run_command(argv, "push.py REGISTRY IMAGE PLATFORMS RELEASE_DIR   (REGISTRY: host[:port][/namespace])", push)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
