#!/usr/bin/env python3
"""Write the SLSA v1 provenance predicate of a build, from what `make build` used and recorded.

    python3 tools/release/provenance.py IMAGE BASE_REF OUTPUT_DIR NAME=VALUE...   # make build runs it

NAME=VALUE are the Dockerfile's build arguments as the build got them. The predicate records them, the
git commit (the image's revision label), the base image and its digest (the registry digest a release
build pinned, else the local image id of the base), the hash of the Python lock the build installed,
and the versions of the builder (Docker Engine, containerd, buildx). `make sign` attaches it as a cosign
attestation of type https://slsa.dev/provenance/v1, whose subject is the pushed image's digest.

Why not BuildKit's own provenance (`--provenance=mode=max`): the engine's default builder cannot
export attestations, and the docker-container builder that can needs an image (moby/buildkit) that no
registry here serves. So the statement is ours, made from the same facts, right after the build.
The file is `provenance-<immutable release tag>.json` in OUTPUT_DIR, beside the SBOM.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

from platforms import file_suffix, platform_of
from command_line import ReleaseError
from tags import BASE_LABEL, CREATED_LABEL, FLAVOR_LABEL, REVISION_LABEL, compute_tags, read_labels

BUILD_TYPE = "https://github.com/pytorch-dev/pytorch-dev/blob/main/docs/releases.md#provenance"
BUILDER_ID = "pytorch-dev make build (docker build, BuildKit)"
BASE_DIGEST_LABEL = "dev.pytorch-dev.base-digest"
PYTHON_DIR = pathlib.Path("docker/python")
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"


def _output(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def builder_versions() -> dict[str, str]:
    """The versions of what built the image: the engine, its containerd, and the buildx plugin."""
    server = json.loads(_output("docker", "version", "--format", "{{json .Server}}") or "{}")
    versions = {"docker-engine": server.get("Version", "")}
    for component in server.get("Components") or []:
        if component.get("Name") == "containerd":
            versions["containerd"] = component.get("Version", "")
    versions["buildx"] = (_output("docker", "buildx", "version").split() + ["", ""])[1]
    return {name: version for name, version in versions.items() if version}


def python_lock(flavor: str) -> dict:
    """The file pip-install-environment.sh installed from (the flavor's lock, else the ranges), hashed."""
    lock = PYTHON_DIR / f"requirements-{flavor}.lock"
    installed = lock if lock.is_file() else PYTHON_DIR / "requirements.txt"
    return {"uri": f"git+file:{installed.as_posix()}", "name": "python-lock",
            "digest": {"sha256": hashlib.sha256(installed.read_bytes()).hexdigest()}}


def base_dependency(labels: dict[str, str], base_ref: str) -> dict:
    """The base image with its digest: the pinned registry digest, else the local image id."""
    pinned = labels.get(BASE_DIGEST_LABEL, "")
    if pinned:
        algorithm, _, value = pinned.partition(":")
        return {"uri": f"docker://{base_ref}", "name": "base-image", "digest": {algorithm: value},
                "annotations": {"digest": "registry manifest digest (RELEASE=1)"}}
    image_id = _output("docker", "image", "inspect", "--format", "{{.Id}}", base_ref)
    if not image_id:
        raise ReleaseError(f"the base {base_ref} is not here, so its digest cannot be recorded: "
                           f"docker pull {base_ref} and build again")
    algorithm, _, value = image_id.partition(":")
    return {"uri": f"docker://{base_ref}", "name": "base-image", "digest": {algorithm: value},
            "annotations": {"digest": "local image id (a build without RELEASE=1 does not pin the base)"}}


def build_predicate(labels: dict[str, str], base_ref: str, build_args: dict[str, str]) -> dict:
    revision = labels[REVISION_LABEL]
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"dockerfile": "Dockerfile", "buildArgs": build_args,
                                   "source": labels.get("org.opencontainers.image.source", "")},
            "internalParameters": {"sourceDirty": labels.get("dev.pytorch-dev.source-dirty", "")},
            "resolvedDependencies": [
                {"uri": f"git+{labels.get('org.opencontainers.image.source', '') or 'local'}@{revision}",
                 "name": "source", "digest": {"gitCommit": revision}},
                base_dependency(labels, base_ref),
                python_lock(labels[FLAVOR_LABEL]),
            ],
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": builder_versions()},
            "metadata": {"invocationId": compute_tags(labels)[0], "startedOn": labels[CREATED_LABEL]},
        },
    }


def write_provenance(image: str, base_ref: str, output_dir: pathlib.Path, build_args: dict[str, str]) -> pathlib.Path:
    labels = read_labels(image)
    predicate = build_predicate(labels, base_ref or labels[BASE_LABEL], build_args)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / provenance_file_name(labels, platform_of(image))
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(predicate, indent=2) + "\n")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def provenance_file_name(labels: dict[str, str], platform: str = "linux/amd64") -> str:
    return f"provenance-{compute_tags(labels)[0]}{file_suffix(platform)}.json"


def main(argv: list[str]) -> int:
    if len(argv) < 4 or not all("=" in argument for argument in argv[4:]):
        print("usage: provenance.py IMAGE BASE_REF OUTPUT_DIR NAME=VALUE...", file=sys.stderr)
        return 2
    build_args = dict(argument.split("=", 1) for argument in argv[4:])
    try:
        print(write_provenance(argv[1], argv[2], pathlib.Path(argv[3]), build_args))
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
