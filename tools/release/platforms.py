"""A release for several platforms: which local build is each platform's, whether they are one release,
and the OCI index that publishes them under one tag.

    make build FLAVOR=cpu                                   # pytorch-dev:cpu-latest, this engine's platform
    make build FLAVOR=cpu PLATFORM=linux/arm64              # pytorch-dev:cpu-latest-arm64
    make push FLAVOR=cpu REGISTRY=R PLATFORMS=linux/amd64,linux/arm64

A build for a named platform is tagged $(TAG)-<architecture>, so the builds of one TAG sit side by side;
the build of the engine's own platform may keep the plain $(TAG). The builds must come from one commit,
of one flavor; where their torch, CUDA, base or build date differ, the release tags would name only the
first platform's, so the push refuses them unless ALLOW_PLATFORM_DIFFERENCES=1 says it is meant (a
machine that cannot get the pinned torch for every platform), and then the index says, entry by entry,
what each platform has.
"""
from __future__ import annotations

import json
import os
import platform as host
import re
import subprocess
import sys

from command_line import ReleaseError
from tags import (BASE_LABEL, CREATED_LABEL, CUDA_LABEL, DIRTY_LABEL, FLAVOR_LABEL, REVISION_LABEL, TORCH_LABEL,
                  VSCODE_LABEL, compute_tags)

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
INDEX_MEDIA_TYPES = (OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")
PLATFORM_PATTERN = re.compile(r"linux/(amd64|arm64|arm|386|ppc64le|s390x|riscv64)(/v[5-8])?")
# One release means these agree on every platform, always.
SAME_RELEASE = {REVISION_LABEL: "commit", FLAVOR_LABEL: "flavor", DIRTY_LABEL: "source state",
                VSCODE_LABEL: "code-server"}
# These name what the release tags say (tags.py); a difference makes the tags true of one platform only.
NAMED_BY_THE_TAGS = {TORCH_LABEL: "torch", CUDA_LABEL: "CUDA", BASE_LABEL: "base image", CREATED_LABEL: "build date"}
# Copied onto each entry of the index, so `docker buildx imagetools inspect` shows what each platform has.
ENTRY_ANNOTATIONS = (TORCH_LABEL, CUDA_LABEL, BASE_LABEL, REVISION_LABEL)


def parse_platforms(text: str) -> list[str]:
    """['linux/amd64', 'linux/arm64'] for "linux/amd64,linux/arm64"; refuses unknown or repeated names."""
    platforms = [part.strip() for part in text.split(",") if part.strip()]
    for name in platforms:
        if not PLATFORM_PATTERN.fullmatch(name):
            raise ReleaseError(f"PLATFORMS names {name!r}, which is not a platform: give os/architecture, "
                               f"e.g. PLATFORMS=linux/amd64,linux/arm64")
    if len(set(map(architecture, platforms))) != len(platforms):
        raise ReleaseError(f"PLATFORMS={text} names an architecture twice: give each platform once")
    return platforms


def architecture(platform: str) -> str:
    return platform.split("/")[1]


def this_machines_platform() -> str:
    """linux/amd64 or linux/arm64: the image a `docker pull` here gets (a Mac's Docker runs linux/arm64)."""
    machine = host.machine().lower()
    return "linux/" + {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def platform_of(image: str) -> str:
    """linux/arm64 for an image built for it (a variant, where the image has one, is left out)."""
    result = subprocess.run(["docker", "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image],
                            capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"image {image} does not exist here: build it first with `make build`")
    return result.stdout.strip()


def file_suffix(platform: str) -> str:
    """What an SBOM's or provenance's file name gets for PLATFORM: nothing for amd64, the name every
    single-platform release has always used, else -<architecture>."""
    return "" if architecture(platform) == "amd64" else f"-{architecture(platform)}"


def local_builds(image: str, platforms: list[str]) -> dict[str, str]:
    """Each platform's local build of IMAGE: IMAGE-<architecture> (`make build PLATFORM=...`), or IMAGE
    itself where it was built for that platform."""
    builds = {}
    for platform in platforms:
        candidates = [f"{image}-{architecture(platform)}", image]
        found = next((candidate for candidate in candidates if _is_build_for(candidate, platform)), None)
        if not found:
            raise ReleaseError(f"no {platform} build of {image} here (looked for {' and '.join(candidates)}): "
                               f"make build PLATFORM={platform} with the same FLAVOR and TAG")
        builds[platform] = found
    return builds


def _is_build_for(image: str, platform: str) -> bool:
    try:
        return platform_of(image) == platform
    except ReleaseError:
        return False


def differences(labels: dict[str, dict[str, str]]) -> tuple[list[str], list[str]]:
    """(what makes them not one release, what the tags would say of the first platform only) for each
    platform's labels, the first platform's first; each a line naming both values."""
    first, *others = labels
    never, named = [], []
    for platform in others:
        for label, what in {**SAME_RELEASE, **NAMED_BY_THE_TAGS}.items():
            ours, theirs = labels[first].get(label, ""), labels[platform].get(label, "")
            if label == CREATED_LABEL:  # the date is what the tag names, not the time of day
                ours, theirs = ours[:10], theirs[:10]
            if ours != theirs:
                line = f"{platform}'s {what} is {theirs or '(none)'} where {first}'s is {ours or '(none)'}"
                (never if label in SAME_RELEASE else named).append(line)
    return never, named


def release_tags(labels: dict[str, dict[str, str]]) -> list[str]:
    """The tags the index gets: the first platform's, once the builds are shown to be one release."""
    never, named = differences(labels)
    if never:
        raise ReleaseError(f"the builds are not one release: {never[0]}; build every platform from the same "
                           f"commit and flavor")
    if named and os.environ.get("ALLOW_PLATFORM_DIFFERENCES") != "1":
        raise ReleaseError(f"{named[0]}, and the release tags would name only the first: build every platform "
                           f"with the same inputs, or set ALLOW_PLATFORM_DIFFERENCES=1 to publish them so "
                           f"(the index then records each platform's)")
    for line in named:  # on stderr: stdout is the references pushed, one a line, for a CI log to take
        print(f"note: {line}", file=sys.stderr, flush=True)
    return compute_tags(next(iter(labels.values())))


def index_manifest(entries: list[tuple[str, dict, dict[str, str]]]) -> bytes:
    """The OCI index of ENTRIES: (platform, the descriptor of its manifest, its image's labels) each."""
    manifests = []
    for platform, descriptor, labels in entries:
        os_name, arch, *variant = platform.split("/")
        where = {"architecture": arch, "os": os_name, **({"variant": variant[0]} if variant else {})}
        manifests.append({**descriptor, "platform": where,
                          "annotations": {label: labels[label] for label in ENTRY_ANNOTATIONS if labels.get(label)}})
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                      separators=(",", ":")).encode()


def is_index(manifest: dict) -> bool:
    return manifest.get("mediaType") in INDEX_MEDIA_TYPES or "manifests" in manifest


def entry_for(index: dict, platform: str) -> dict | None:
    """The descriptor of INDEX's entry for PLATFORM (a variant in the index is not asked for), or None."""
    os_name, arch = platform.split("/")[:2]
    return next((entry for entry in index.get("manifests") or []
                 if isinstance(entry, dict) and (entry.get("platform") or {}).get("os") == os_name
                 and (entry.get("platform") or {}).get("architecture") == arch), None)


def platforms_in(index: dict) -> list[str]:
    return [f"{(entry.get('platform') or {}).get('os')}/{(entry.get('platform') or {}).get('architecture')}"
            for entry in index.get("manifests") or [] if isinstance(entry, dict)]
