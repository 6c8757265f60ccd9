#!/usr/bin/env python3
"""Resolve an image reference to the digest a pipeline runs, pulling it where need be.

    python3 tools/regression/resolve.py REGISTRY/pytorch-dev:TAG      # prints REGISTRY/pytorch-dev@sha256:...

A reference into a registry (its first part has a dot or a port, or is localhost) is pulled every time,
so a moving tag gives the digest it names now; a digest reference is pulled only when it is not here.
A local name without a registry is inspected as it is. Every failure is one line (exit 2) that says what
was wrong: an unreachable registry, a name it does not hold, or an image that has no registry digest.
"""
from __future__ import annotations

import re
import subprocess
import sys
from typing import NamedTuple

PULL_TIMEOUT_S = 1800
UNREACHABLE = re.compile(r"connection refused|no such host|i/o timeout|dial tcp|network is unreachable|"
                         r"server gave HTTP response to HTTPS|TLS handshake|no route to host", re.I)


class ResolveError(Exception):
    """A reference that cannot be resolved; the message is the one line the user reads."""


class ResolvedImage(NamedTuple):
    reference: str         # what was asked for
    digest_reference: str  # repository@sha256:..., or "" for an image that was never in a registry
    image_id: str


def registry_host(reference: str) -> str | None:
    first, sep, _ = reference.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else None


def repository(reference: str) -> str:
    """The repository part: registry/name without :tag or @digest."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def engine(command: list[str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout, check=False)


def pull(command: list[str], reference: str) -> None:
    result = engine(command, "pull", "--quiet", reference, timeout=PULL_TIMEOUT_S)
    if result.returncode == 0:
        return
    message = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
    host = registry_host(reference) or "docker.io"
    if UNREACHABLE.search(message[0]):
        raise ResolveError(f"registry {host} is unreachable ({message[0][:160]}): check the address, that the "
                           "registry runs and that this runner may reach it")
    raise ResolveError(f"{reference} cannot be resolved ({message[0][:160]}): check the name and tag "
                       "(make push prints the references it published), or docker login where it needs one")


def resolve(reference: str, command: list[str] | None = None, *, require_digest: bool = False) -> ResolvedImage:
    command = command or ["docker"]
    here = engine(command, "image", "inspect", "--format", "{{.Id}}", reference).returncode == 0
    if registry_host(reference) and ("@sha256:" not in reference or not here):
        pull(command, reference)
    elif not here:
        raise ResolveError(f"image {reference} is not here and names no registry: build it (make build), or give "
                           "a registry reference (host[:port]/name:tag or name@sha256:...)")
    inspected = engine(command, "image", "inspect", "--format", "{{.Id}} {{range .RepoDigests}}{{.}} {{end}}",
                       reference)
    image_id, *digests = inspected.stdout.split()
    wanted = repository(reference)
    digest_reference = reference if "@sha256:" in reference else next(
        (digest for digest in digests if repository(digest) == wanted), "")
    if require_digest and not digest_reference:
        raise ResolveError(f"{reference} has no registry digest (it was built here, never pushed or pulled): "
                           "push it (make push REGISTRY=...) and give the pushed reference")
    return ResolvedImage(reference, digest_reference, image_id)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: resolve.py IMAGE_REFERENCE", file=sys.stderr)
        return 2
    try:
        print(resolve(argv[1], require_digest=True).digest_reference)
    except ResolveError as error:
        print(f"resolve.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
