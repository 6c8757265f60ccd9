#!/usr/bin/env python3
"""Verify a published image: its signature, for the tag named, and its SBOM and provenance attestations.

    python3 tools/release/verify.py IMAGE COSIGN_PUB     # or: make verify IMAGE=REF COSIGN_PUB=cosign.pub

IMAGE is registry/name:tag, registry/name@sha256:..., or both (name:tag@sha256:..., what CI should pin).
Everything is checked against the digest cosign resolved, so what passed is exactly what a later
`docker pull REF@DIGEST` gets. It fails with one line for: an unsigned image; a tag that now points at an
image signed for other tags (moved after signing); a moving tag (`cpu-latest`) that names an older image
than the newest one signed for it in the repository (moved back, or an old digest pinned under it); a
signature made with another key; a missing or foreign attestation. On success it prints one line per
check and, last, `verified REF@DIGEST`. What a moving tag can and cannot promise: docs/releases.md.

COSIGN_PUB empty verifies a keyless (GitHub Actions) signature: COSIGN_IDENTITY is a regular expression
of the signing workflow's identity (https://github.com/OWNER/REPO/.github/workflows/image.yml@refs/tags/v.*).
"""
from __future__ import annotations

import base64
import datetime
import json
import os
import sys

from cosign_cli import TAG_ANNOTATION, last_error_line, run_cosign, transparency_log_flags
from registry_api import NotFound, Registry
from tags import CREATED_LABEL, ReleaseError, is_moving, run_command

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
SBOM_TYPE = "https://cyclonedx.org/bom"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"


def split_reference(image: str) -> tuple[str, str, str]:
    """(repository, tag or '', digest or '') of REF, REF:tag, REF@sha256:..., REF:tag@sha256:..."""
    name, _, digest = image.partition("@")
    repository, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        repository, tag = name, ""
    return repository, tag, digest


def identity_flags(public_key: str) -> list[str]:
    if public_key:
        if not os.path.isfile(public_key):
            raise ReleaseError(f"COSIGN_PUB={public_key} is not a file: give the release's public key (cosign.pub)")
        return ["--key", public_key]
    identity = os.environ.get("COSIGN_IDENTITY", "")
    if not identity:
        raise ReleaseError("give COSIGN_PUB=cosign.pub for a key-signed release, or COSIGN_IDENTITY=<workflow "
                           "identity regexp> for a keyless one")
    return ["--certificate-identity-regexp", identity,
            "--certificate-oidc-issuer", os.environ.get("COSIGN_ISSUER", GITHUB_ISSUER)]


def signature_failure(image: str, detail: str) -> ReleaseError:
    lowered = detail.lower()
    if "no signatures found" in lowered or "manifest_unknown" in lowered or "manifest unknown" in lowered:
        return ReleaseError(f"{image} is not signed: no signature exists for the image it points at "
                            f"(never signed with `make sign`, or its tag was moved to an unsigned image); do not use it")
    if "verification error" in lowered or "invalid signature" in lowered or "no matching signatures" in lowered:
        return ReleaseError(f"{image} is signed, but not with the key given: its signature does not verify "
                            f"against COSIGN_PUB; check you have this release's public key, else do not use it")
    return ReleaseError(f"could not verify {image}: {detail}")


def signed_tags_of(payloads: list[dict]) -> list[str]:
    """The tags the signatures cosign verified were made for (sign.py's annotation)."""
    return sorted({(payload.get("optional") or {}).get(TAG_ANNOTATION, "") for payload in payloads} - {""})


def verify_signature(image: str, flags: list[str]) -> str:
    """Checks the signature; returns the digest it covers. A named tag must be one the signature names."""
    _, tag, _ = split_reference(image)
    result = run_cosign("verify", *flags, *transparency_log_flags(verifying=True), "--output", "json", image)
    if result.returncode != 0:
        raise signature_failure(image, last_error_line(result))
    payloads = json.loads(result.stdout)
    digest = payloads[0]["critical"]["image"]["docker-manifest-digest"]
    signed_tags = signed_tags_of(payloads)
    if tag and tag not in signed_tags:
        raise ReleaseError(f"{image} now points at {digest}, which was signed for {', '.join(signed_tags) or 'no tag'}, "
                           f"not for {tag}: the tag was moved after signing; pin the digest you trust instead")
    print(f"signature: {digest} signed for {', '.join(signed_tags) or 'its digest'}")
    return digest


def built_at(registry: Registry, digest: str) -> datetime.datetime | None:
    """When the image DIGEST names was built (its created label; the digest covers it), None if it is gone."""
    try:
        created = registry.labels(digest).get(CREATED_LABEL, "")
    except NotFound:  # deleted from the registry while its signature's tag stayed
        return None
    try:
        when = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def check_newest_for(repository: str, tag: str, digest: str, flags: list[str]) -> str:
    """A moving tag promises the newest release: refuses DIGEST when a later-built image in the repository
    carries a signature for TAG too. Signed images are found by cosign's `sha256-<hex>.sig` tags; only those
    built later are verified, so a tag at its newest release costs no cosign call."""
    registry = Registry(repository)
    ours = built_at(registry, digest)
    if ours is None:
        raise ReleaseError(f"{repository}@{digest} has no readable build time (label {CREATED_LABEL}): it was "
                           f"not built by `make build`; do not use it")
    signed = {f"sha256:{name[len('sha256-'):-len('.sig')]}" for name in registry.tags()
              if name.startswith("sha256-") and name.endswith(".sig")} - {digest}
    for candidate in sorted(signed):
        when = built_at(registry, candidate)
        if when is None or when <= ours:
            continue
        result = run_cosign("verify", *flags, *transparency_log_flags(verifying=True), "--output", "json",
                            f"{repository}@{candidate}")
        if result.returncode == 0 and tag in signed_tags_of(json.loads(result.stdout)):
            raise ReleaseError(f"{repository}:{tag} is {digest[:19]}, built {ours:%Y-%m-%d %H:%M}, but {candidate[:19]}, "
                               f"built {when:%Y-%m-%d %H:%M}, is signed as {tag} too: the moving tag was moved back "
                               f"to an older release (or an old digest was pinned under it); pin an immutable "
                               f"tag's digest, or ask the publisher")
    return f"newest: no image built later is signed as {tag} ({len(signed)} other signed images in {repository})"


def attested_predicate(by_digest: str, kind: str, predicate_type: str, flags: list[str]) -> dict:
    """The predicate of the newest verified attestation of KIND whose subject is the digest."""
    result = run_cosign("verify-attestation", *flags, *transparency_log_flags(verifying=True), "--type", kind,
                        by_digest)
    if result.returncode != 0:
        raise ReleaseError(f"{by_digest} has no {kind} attestation that verifies with this key "
                           f"({last_error_line(result)}): it was not attested by `make sign`; do not use it")
    digest = by_digest.rpartition("@")[2].partition(":")[2]
    for line in reversed(result.stdout.splitlines()):
        statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
        subjects = {subject.get("digest", {}).get("sha256") for subject in statement.get("subject", [])}
        if statement.get("predicateType") == predicate_type and digest in subjects:
            predicate = statement["predicate"]
            # cosign before 2.0 wrapped CycloneDX predicates as {"Data": ..., "Timestamp": ...}.
            return predicate.get("Data", predicate) if isinstance(predicate, dict) else predicate
    raise ReleaseError(f"{by_digest}'s {kind} attestation is not about this image (subject or type differs)")


def check_sbom(sbom: dict) -> str:
    versions = {component.get("name", "").lower(): component.get("version", "")
                for component in sbom.get("components", []) if component.get("purl", "").startswith("pkg:pypi/")}
    if sbom.get("bomFormat") != "CycloneDX" or "torch" not in versions:
        raise ReleaseError("the SBOM attestation is not a CycloneDX SBOM of this image (no torch in it): "
                           "sign the release again with `make sign`")
    return f"SBOM: {len(sbom['components'])} components, torch {versions['torch']}"


def check_provenance(provenance: dict) -> str:
    dependencies = {dependency.get("name"): dependency
                    for dependency in provenance.get("buildDefinition", {}).get("resolvedDependencies", [])}
    commit = dependencies.get("source", {}).get("digest", {}).get("gitCommit")
    base = dependencies.get("base-image", {})
    if not commit or not base.get("digest"):
        raise ReleaseError("the provenance attestation names no git commit or no base digest: "
                           "sign the release again with `make sign`")
    algorithm, value = next(iter(base["digest"].items()))
    return f"provenance: commit {commit[:12]}, base {base.get('uri', '')} {algorithm}:{value}"


def verify(image: str, public_key: str) -> None:
    flags = identity_flags(public_key.strip())
    digest = verify_signature(image, flags)
    repository, tag, _ = split_reference(image)
    if tag and is_moving(tag):
        print(check_newest_for(repository, tag, digest, flags))
    by_digest = f"{repository}@{digest}"
    print(check_sbom(attested_predicate(by_digest, "cyclonedx", SBOM_TYPE, flags)))
    print(check_provenance(attested_predicate(by_digest, "slsaprovenance1", PROVENANCE_TYPE, flags)))
    print(f"verified {by_digest}")


def main(argv: list[str]) -> int:
    return run_command(argv, "verify.py IMAGE COSIGN_PUB   (COSIGN_PUB empty: keyless, COSIGN_IDENTITY)", verify)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
