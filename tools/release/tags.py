#!/usr/bin/env python3
"""The release tags of a built image, computed from the labels `make build` writes into it.

    python3 tools/release/tags.py pytorch-dev:cpu-latest      # or: make tags FLAVOR=cpu

Scheme (docs/releases.md):

    <flavor>-torch<version>-<cuda<major.minor>|cpu>-<base>-<YYYYMMDD>-g<sha7>   immutable, one per build
    <flavor>-latest                                                          moving, newest of the flavor
    latest                                                                   moving, newest GPU build only

The -vscode variant (make build VSCODE=1) gets each of these with `-vscode` appended.

A build whose image files (Dockerfile, entrypoint.sh, docker/, scripts/) differed from the commit gets
`-dirty` after its immutable tag and no moving tag: it cannot be rebuilt from its commit, so it must
never become anybody's `latest`.

The facts come from the image, not from make variables, because for the GPU flavor torch's and CUDA's
versions are known only from NVIDIA's base image. So the image must exist: build it first.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

from command_line import ReleaseError, run_command

FLAVOR_LABEL = "dev.pytorch-dev.flavor"
TORCH_LABEL = "dev.pytorch-dev.torch-version"
CUDA_LABEL = "dev.pytorch-dev.cuda-version"
BASE_LABEL = "dev.pytorch-dev.base-image"
REVISION_LABEL = "org.opencontainers.image.revision"
CREATED_LABEL = "org.opencontainers.image.created"
DIRTY_LABEL = "dev.pytorch-dev.source-dirty"
VSCODE_LABEL = "dev.pytorch-dev.vscode"  # the -vscode variant's code-server version (make build VSCODE=1)
VSCODE_SUFFIX = "-vscode"
REQUIRED_LABELS = (FLAVOR_LABEL, TORCH_LABEL, CUDA_LABEL, BASE_LABEL, REVISION_LABEL, CREATED_LABEL)

# `latest` names what most users want: the GPU image. CPU users ask for cpu-latest explicitly.
FLAVOR_OF_PLAIN_LATEST = "gpu"
# Docker's limit on a tag: 128 characters of [A-Za-z0-9_.-], not starting with '.' or '-'.
TAG_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
NGC_PYTORCH_REPOSITORY = "nvidia/pytorch"


def is_moving(tag: str) -> bool:
    """Whether TAG is one of the moving tags above (or its -vscode or -zstd variant): it names the newest
    release."""
    return re.fullmatch(r"([A-Za-z0-9_.]+-)?latest(-vscode)?(-zstd)?", tag) is not None


def read_labels(image: str) -> dict[str, str]:
    """The labels of a local IMAGE; fails with one clear line when it does not exist."""
    result = subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
                            capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"image {image} does not exist here: build it first with `make build` and the same "
                           f"FLAVOR/IMAGE/TAG (its tags are read from the built image's labels)")
    return json.loads(result.stdout) or {}


def _torch_part(version: str) -> str:
    # NGC's torch is e.g. 2.8.0a0+34c6371d24: a '+' is not allowed in a tag, and the base names the build.
    return "torch" + version.split("+", 1)[0]


def _cuda_part(version: str) -> str:
    if version in ("", "none"):
        return "cpu"
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        raise ReleaseError(f"label {CUDA_LABEL}={version!r} is not a CUDA version; rebuild with `make build`")
    return f"cuda{match.group(1)}.{match.group(2)}"


def _base_part(base_image: str) -> str:
    """ngc25.08 for nvcr.io/nvidia/pytorch:25.08-py3, bookworm for debian:bookworm-slim (digests dropped)."""
    name_and_tag = base_image.split("@", 1)[0]
    name, _, tag = name_and_tag.rpartition(":") if ":" in name_and_tag.rsplit("/", 1)[-1] else (name_and_tag, "", "")
    if name.endswith(NGC_PYTORCH_REPOSITORY):
        release = re.match(r"\d+\.\d+", tag)
        return "ngc" + (release.group(0) if release else tag)
    if name.rsplit("/", 1)[-1] == "debian" and tag:
        return tag.split("-", 1)[0]
    return re.sub(r"[^A-Za-z0-9_.]+", ".", f"{name.rsplit('/', 1)[-1]}{tag}").strip(".")


def compute_tags(labels: dict[str, str]) -> list[str]:
    """Every tag a build with these labels gets: the immutable one first, then the moving ones."""
    missing = [label for label in REQUIRED_LABELS if label not in labels]
    if missing:
        raise ReleaseError(f"the image lacks the label(s) {', '.join(missing)}: it was not built by this "
                           f"repository's `make build`; rebuild it with `make build`")
    revision, created = labels[REVISION_LABEL], labels[CREATED_LABEL]
    if not re.fullmatch(r"[0-9a-f]{7,40}", revision):
        raise ReleaseError(f"label {REVISION_LABEL}={revision!r} is not a git commit: build from a git checkout "
                           f"(make build reads `git rev-parse HEAD`)")
    date = re.match(r"(\d{4})-(\d{2})-(\d{2})", created)
    if not date:
        raise ReleaseError(f"label {CREATED_LABEL}={created!r} is not an RFC 3339 date; rebuild with `make build`")
    flavor = labels[FLAVOR_LABEL]
    immutable = "-".join([flavor, _torch_part(labels[TORCH_LABEL]), _cuda_part(labels[CUDA_LABEL]),
                          _base_part(labels[BASE_LABEL]), "".join(date.groups()), "g" + revision[:7]])
    if labels.get(DIRTY_LABEL) == "true":
        tags = [immutable + "-dirty"]
    else:
        tags = [immutable, f"{flavor}-latest"] + (["latest"] if flavor == FLAVOR_OF_PLAIN_LATEST else [])
    if labels.get(VSCODE_LABEL):  # the same build with VS Code in the browser: the same tags, marked
        tags = [tag + VSCODE_SUFFIX for tag in tags]
    for tag in tags:
        if not TAG_PATTERN.fullmatch(tag):
            raise ReleaseError(f"computed tag {tag!r} is not a valid Docker tag; check the image's labels")
    return tags


def main(argv: list[str]) -> int:
    return run_command(argv, "tags.py IMAGE   (prints the release tags of the built IMAGE, one a line)",
                       lambda image: print("\n".join(compute_tags(read_labels(image)))))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
