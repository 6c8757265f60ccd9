#!/usr/bin/env python3
"""Verify a published image: its signature, for the tag named, and its SBOM and provenance attestations.

    python3 tools/release/verify.py IMAGE COSIGN_PUB PLATFORM   # or: make verify IMAGE=REF COSIGN_PUB=cosign.pub

IMAGE is registry/name:tag, registry/name@sha256:..., or both (name:tag@sha256:..., what CI should pin).
Everything is checked against the digest cosign resolved, so what passed is exactly what a later
`docker pull REF@DIGEST` gets. It fails with one line for: an unsigned image; a tag that now points at an
image signed for other tags (moved after signing); a moving tag (`cpu-latest`) that names an older image
than the newest one signed for it in the repository (moved back, or an old digest pinned under it); a
signature made with another key; a missing or foreign attestation. Which release is newest is the order
`make sign` gave them (release_order.py), not a build clock. On success it prints one line per
check and, last, `verified REF@DIGEST`. What a moving tag can and cannot promise: docs/releases.md.

A release of several platforms is an index: its signature is checked as above, then the entry for
PLATFORM (empty: this machine's, the one `docker pull` here gets) must be signed too, and its SBOM and
provenance are the ones checked; the last line names both, `verified REF@INDEX for linux/arm64: REF@ENTRY`.

COSIGN_PUB empty verifies a keyless (GitHub Actions) signature: COSIGN_IDENTITY is a regular expression
of the signing workflow's identity (https://github.com/OWNER/REPO/.github/workflows/image.yml@refs/tags/v.*).
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys

from cosign_cli import (identity_flags, last_error_line, run_cosign, run_verify, transparency_log_flags,
                        verified_payloads, why_unverified)
from platforms import entry_for, is_index, parse_platforms, platforms_in, this_machines_platform
from registry_api import DIGEST, Registry
from release_order import newest_signed, sequence_for, tag_and_sequence
from command_line import ReleaseError, run_command
from tags import is_moving

SBOM_TYPE = "https://cyclonedx.org/bom"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"


def split_reference(image: str) -> tuple[str, str, str]:
    """(repository, tag or '', digest or '') of REF, REF:tag, REF@sha256:..., REF:tag@sha256:..."""
    name, _, digest = image.partition("@")
    repository, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        repository, tag = name, ""
    return repository, tag, digest


def signature_failure(image: str, result: subprocess.CompletedProcess) -> ReleaseError:
    why = why_unverified(result)
    if why == "unsigned":
        return ReleaseError(f"{image} is not signed: no signature exists for the image it points at "
                            f"(never signed with `make sign`, or its tag was moved to an unsigned image); do not use it")
    if why == "another key":
        return ReleaseError(f"{image} is signed, but not with the key given: its signature does not verify "
                            f"against COSIGN_PUB; check you have this release's public key, else do not use it")
    return ReleaseError(f"could not verify {image}: {last_error_line(result)}")


def signed_tags_of(payloads: list[dict]) -> list[str]:
    """The tags the signatures cosign verified were made for (sign.py's annotation)."""
    return sorted({pair[0] for pair in map(tag_and_sequence, payloads) if pair})


def verify_signature(image: str, flags: list[str]) -> tuple[str, list[dict]]:
    """Checks the signature; returns the digest it covers and the verified payloads. A named tag must be one
    the signature names."""
    _, tag, _ = split_reference(image)
    result = run_verify(image, flags)
    if result.returncode != 0:
        raise signature_failure(image, result)
    payloads = verified_payloads(result, image)
    digest = payloads[0]["critical"]["image"]["docker-manifest-digest"]
    signed_tags = signed_tags_of(payloads)
    if tag and tag not in signed_tags:
        raise ReleaseError(f"{image} now points at {digest}, which was signed for {', '.join(signed_tags) or 'no tag'}, "
                           f"not for {tag}: the tag was moved after signing; pin the digest you trust instead")
    print(f"signature: {digest} signed for {', '.join(signed_tags) or 'its digest'}")
    return digest, payloads


def check_newest_for(repository: str, tag: str, digest: str, payloads: list[dict], flags: list[str]) -> str:
    """A moving tag promises the newest release: refuses DIGEST when another image of the repository is
    signed as a later release of TAG (release_order.py: a signed sequence, not a clock). Only claims of a
    later release are verified, so a tag at its newest release costs no cosign call."""
    ours = sequence_for(payloads, tag)
    newest = newest_signed(repository, flags, tag, above=ours, besides=digest)
    if newest.digest:
        raise ReleaseError(f"{repository}:{tag} is {digest[:19]}, signed as release {ours}, but {newest.digest[:19]} "
                           f"is signed as release {newest.sequence} of {tag}: the moving tag was moved back to an "
                           f"older release (or an old digest was pinned under it); pin an immutable tag's digest, "
                           f"or ask the publisher")
    ignored = (f"; {newest.unverified} image(s) claiming a later release in signatures that do not verify ignored"
               if newest.unverified else "")
    return f"newest: release {ours} of {tag}, no later release signed in {repository}{ignored}"


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


def verify_entry(repository: str, index_digest: str, index: dict, platform: str, flags: list[str]) -> str:
    """The signed entry of the index for PLATFORM, by digest; one line where there is none, or it is unsigned
    (an index that names another image than the one signed for it)."""
    entry = entry_for(index, platform)
    if not entry or not isinstance(entry.get("digest"), str) or not DIGEST.fullmatch(entry["digest"]):
        raise ReleaseError(f"{repository}@{index_digest[:19]} has no {platform} image (it has "
                           f"{', '.join(platforms_in(index)) or 'none'}): verify with PLATFORM= one of those")
    by_digest = f"{repository}@{entry['digest']}"
    result = run_verify(by_digest, flags)
    if result.returncode != 0:
        raise signature_failure(f"its {platform} image {by_digest}", result)
    print(f"{platform}: {entry['digest']} signed")
    return by_digest


def verify(image: str, public_key: str, platform: str) -> None:
    platform = parse_platforms(platform)[0] if platform.strip() else this_machines_platform()
    flags = identity_flags(public_key.strip())
    digest, payloads = verify_signature(image, flags)
    repository, tag, _ = split_reference(image)
    if tag and is_moving(tag):
        print(check_newest_for(repository, tag, digest, payloads, flags))
    by_digest = f"{repository}@{digest}"
    manifest, _ = Registry(repository).descriptor(digest)
    image_checked = verify_entry(repository, digest, manifest, platform, flags) if is_index(manifest) else by_digest
    print(check_sbom(attested_predicate(image_checked, "cyclonedx", SBOM_TYPE, flags)))
    print(check_provenance(attested_predicate(image_checked, "slsaprovenance1", PROVENANCE_TYPE, flags)))
    print(f"verified {by_digest}" + (f" for {platform}: {image_checked}" if image_checked != by_digest else ""))


def main(argv: list[str]) -> int:
    return run_command(argv, "verify.py IMAGE COSIGN_PUB PLATFORM   (COSIGN_PUB empty: keyless, COSIGN_IDENTITY)", verify)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
