"""The order of a repository's releases: a number each release's signatures carry, never a clock.

A moving tag (`cpu-latest`) promises the newest release, so `make verify` must tell which of two signed
releases is newer. Build times cannot: they come from the build machine's clock, and a release built on a
runner whose clock ran ahead, or dated in 2027, would look newer than every later one. So `make sign`
gives each release a sequence number, one more than the highest any signature in the repository claims,
and signs it with the image (annotation dev.pytorch-dev.sequence). It only grows, and only the publisher's
key can make a signature that carries it. Signing an old release again makes it the newest.

What the repository's `sha256-<hex>.sig` tags claim is read here without verifying it: anyone who can push
can write such a tag. So everything is parsed as hostile (one that is not what cosign writes is skipped),
and a claim counts for nothing until cosign has verified the signature that makes it (verify.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from cosign_cli import SEQUENCE_ANNOTATION, TAG_ANNOTATION
from registry_api import Registry
from tags import ReleaseError

SIGNATURE_TAG = re.compile(r"sha256-([0-9a-f]{64})\.sig")
SIGNATURE_LAYER = "application/vnd.dev.cosign.simplesigning.v1+json"
PAYLOAD_LIMIT = 64 << 10  # cosign's payloads are a few hundred bytes
SEQUENCE = re.compile(r"[0-9]{1,18}")  # a release a second for ten billion years; longer is not ours


@dataclass(frozen=True)
class Claim:
    """A signature's unverified claim: the image DIGEST is release SEQUENCE of TAG."""
    digest: str
    tag: str
    sequence: int


def tag_and_sequence(payload: object) -> tuple[str, int] | None:
    """The tag a signature payload names and its sequence (0 for a signature made before sequences); None
    for a payload that is not one `make sign` wrote."""
    annotations = payload.get("optional") if isinstance(payload, dict) else None
    if not isinstance(annotations, dict) or not isinstance(annotations.get(TAG_ANNOTATION), str):
        return None
    sequence = annotations.get(SEQUENCE_ANNOTATION, "0")
    if not isinstance(sequence, str) or not SEQUENCE.fullmatch(sequence):
        return None
    return annotations[TAG_ANNOTATION], int(sequence)


def sequence_for(payloads: list, tag: str) -> int:
    """The highest sequence that verified signature PAYLOADS give their image as TAG (0: none)."""
    found = [pair[1] for pair in map(tag_and_sequence, payloads) if pair and pair[0] == tag]
    return max(found, default=0)


def claims_in(registry: Registry) -> list[Claim]:
    """Every claim the signature tags of the repository make, unverified, with what is not cosign's skipped."""
    claims = []
    for name in registry.tags():
        signed = SIGNATURE_TAG.fullmatch(name)
        if not signed:
            continue
        try:
            layers = registry.manifest(name)[0].get("layers")
        except ReleaseError:  # gone since the listing, or not a manifest cosign wrote
            continue
        for layer in layers if isinstance(layers, list) else []:
            if not isinstance(layer, dict) or layer.get("mediaType") != SIGNATURE_LAYER:
                continue
            try:
                pair = tag_and_sequence(registry.small_json_blob(str(layer.get("digest")), PAYLOAD_LIMIT))
            except ReleaseError:
                continue
            if pair:
                claims.append(Claim(f"sha256:{signed.group(1)}", *pair))
    return claims


def next_sequence(registry: Registry) -> int:
    """The sequence the next release signed into the repository gets. A claim that never verifies only
    makes the number jump; the order stays right."""
    return 1 + max((claim.sequence for claim in claims_in(registry)), default=0)


def later_claims(registry: Registry, tag: str, sequence: int, digest: str) -> list[tuple[str, int]]:
    """(image digest, highest claimed sequence) of every other image claimed to be a later release of TAG
    than SEQUENCE, the highest claim first: the ones verify.py must check, in the order that finds a real
    later release soonest."""
    highest: dict[str, int] = {}
    for claim in claims_in(registry):
        if claim.tag == tag and claim.sequence > sequence and claim.digest != digest:
            highest[claim.digest] = max(highest.get(claim.digest, 0), claim.sequence)
    return sorted(highest.items(), key=lambda item: -item[1])
