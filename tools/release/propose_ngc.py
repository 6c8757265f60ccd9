#!/usr/bin/env python3
"""Propose the next NGC release: find the newest `YY.MM-py3` tag of NGC's PyTorch image, resolve its digest
and its torch, and rewrite the Dockerfile's NGC_TAG and NGC_TORCH_VERSION lines; nothing else changes.

    python3 tools/release/propose_ngc.py DOCKERFILE PROPOSAL_FILE     # or: make ngc-proposal

NGC_REGISTRY (default nvcr.io) and NGC_REPOSITORY (default nvidia/pytorch) say where to look; the tags
come from the registry's tag list, the torch from the image's PYTORCH_VERSION (NVIDIA sets it). The text
for the pull request (the tags, the digests, the torch versions) goes to PROPOSAL_FILE; the scheduled
workflow opens the pull request with it. When the Dockerfile is already on the newest tag, it changes
nothing and says so.
"""
from __future__ import annotations

import os
import pathlib
import re
import sys

from registry_api import INDEX_TYPES, MANIFEST_LIMIT, MANIFEST_TYPES, Registry
from command_line import ReleaseError, run_command

RELEASE_TAG = re.compile(r"(\d{2})\.(\d{2})-py3")
PLATFORM = {"architecture": "amd64", "os": "linux"}


def newest_release(tags: list[str]) -> str:
    releases = [tag for tag in tags if RELEASE_TAG.fullmatch(tag)]
    if not releases:
        raise ReleaseError("the registry lists no YY.MM-py3 tag: check NGC_REGISTRY and NGC_REPOSITORY")
    return max(releases, key=lambda tag: tuple(int(part) for part in RELEASE_TAG.fullmatch(tag).groups()))


def resolve(registry: Registry, tag: str) -> tuple[str, str]:
    """(digest of the tag, torch version of its linux/amd64 image). NGC's tags are multi-platform indexes
    (amd64 and arm64): the digest is the index's, which a `FROM ...@digest` pins on both platforms."""
    manifest, digest = registry.manifest(tag, accept=f"{INDEX_TYPES}, {MANIFEST_TYPES}")
    if "manifests" in manifest:  # an index: take the linux/amd64 image
        chosen = next((entry for entry in manifest["manifests"] if isinstance(entry, dict)
                       and {key: (entry.get("platform") or {}).get(key) for key in PLATFORM} == PLATFORM), None)
        if not chosen:
            raise ReleaseError(f"{tag} has no linux/amd64 image")
        manifest, _ = registry.manifest(chosen["digest"])
    config = registry.json_object(f"/blobs/{(manifest.get('config') or {}).get('digest')}", MANIFEST_LIMIT)[0]
    environment = dict(item.split("=", 1) for item in (config.get("config") or {}).get("Env") or [] if "=" in item)
    return digest, environment.get("PYTORCH_VERSION", "unknown")


def replace_arg(text: str, name: str, value: str) -> str:
    updated, count = re.subn(rf"^ARG {name}=.*$", f"ARG {name}={value}", text, count=1, flags=re.M)
    if count != 1:
        raise ReleaseError(f"the Dockerfile has no `ARG {name}=` line to update")
    return updated


def propose(dockerfile: str, proposal_file: str) -> None:
    path = pathlib.Path(dockerfile)
    text = path.read_text()
    current = re.search(r"^ARG NGC_TAG=(.*)$", text, re.M).group(1)
    repository = f"{os.environ.get('NGC_REGISTRY') or 'nvcr.io'}/{os.environ.get('NGC_REPOSITORY') or 'nvidia/pytorch'}"
    registry = Registry(repository)
    newest = newest_release(registry.tags())
    if RELEASE_TAG.fullmatch(current) and newest_release([current, newest]) == current:
        print(f"NGC_TAG={current} is the newest release of {repository}: nothing to propose")
        return
    digest, torch = resolve(registry, newest)
    path.write_text(replace_arg(replace_arg(text, "NGC_TAG", newest), "NGC_TORCH_VERSION", torch))
    pathlib.Path(proposal_file).write_text(
        f"Move the GPU flavor to NGC {newest}\n\n"
        f"- NGC_TAG: {current} -> {newest}\n- {repository}:{newest} is {digest}\n"
        f"- torch in that image: {torch} (NGC_TORCH_VERSION)\n\n"
        f"Release builds pin this digest: `make build RELEASE=1` (or BASE_DIGEST={digest}).\n")
    print(f"proposed NGC_TAG={newest} ({digest}, torch {torch})")


def main(argv: list[str]) -> int:
    return run_command(argv, "propose_ngc.py DOCKERFILE PROPOSAL_FILE", propose)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
