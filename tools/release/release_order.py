"""The order of a repository's releases: a number each release's signatures carry, never a clock.

A moving tag (`cpu-latest`) promises the newest release, so `make verify` must tell which of two signed
releases is newer. Build times cannot: they come from the build machine's clock, and a release built on a
runner whose clock ran ahead, or dated in 2027, would look newer than every later one. So `make sign`
gives each release a sequence number, one more than the highest that a signature made with its own key
or identity gives any image of the repository, and signs it with the image (annotation
dev.pytorch-dev.sequence). It only grows, and only the publisher's key can make a signature that carries
it. Signing an old release again makes it the newest (sign.py refuses that while a moving tag names
another image).

What the repository's `sha256-<hex>.sig` tags claim is read without verifying it: anyone who can push can
write such a tag. So everything read is parsed as hostile (what is not a signature payload is skipped), a
claim counts only once cosign has verified the signature that makes it, and claims are verified highest
first, so that each search costs one `cosign verify` where nobody has pushed false claims.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from cosign_cli import SEQUENCE_ANNOTATION, TAG_ANNOTATION, payloads_that_verify
from registry_api import Malformed, NotFound, Registry
from tags import ReleaseError

SIGNATURE_TAG = re.compile(r"sha256-([0-9a-f]{64})\.sig")
PAYLOAD_LIMIT = 64 << 10  # cosign's payloads are a few hundred bytes
# Signatures read per image: `make sign` adds one a tag (two or three a release), more only when re-signed.
SIGNATURES_READ = 64
SEQUENCE = re.compile(r"[0-9]{1,30}")
# How many images may claim a later release in signatures that do not verify before a search stops: each
# costs one `cosign verify`, and anyone who can push can write such claims.
MAX_UNVERIFIED = 5


@dataclass(frozen=True)
class Claim:
    """A signature's unverified claim: the image DIGEST is release SEQUENCE of TAG."""
    digest: str
    tag: str
    sequence: int


@dataclass(frozen=True)
class Newest:
    """The image signed as the highest release the search found (digest empty: none above where it
    started), and how many images claimed more in signatures that did not verify."""
    digest: str
    sequence: int
    unverified: int


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


def sequence_for(payloads: list, tag: str | None) -> int:
    """The highest sequence signature PAYLOADS give their image as TAG (None: as any tag); 0 for none."""
    found = [pair[1] for pair in map(tag_and_sequence, payloads) if pair and tag in (None, pair[0])]
    return max(found, default=0)


def claims_in(registry: Registry) -> list[Claim]:
    """Every claim the signature tags of the repository make, unverified; what is not a payload is skipped."""
    claims = []
    for name in registry.tags():
        signed = SIGNATURE_TAG.fullmatch(name)
        if not signed:
            continue
        try:
            layers = registry.manifest(name)[0].get("layers")
        except (NotFound, Malformed):  # gone since the listing, or not a manifest cosign wrote
            continue
        for layer in layers[:SIGNATURES_READ] if isinstance(layers, list) else []:
            size = layer.get("size") if isinstance(layer, dict) else None
            if not isinstance(size, int) or not 0 < size <= PAYLOAD_LIMIT:
                continue
            try:
                pair = tag_and_sequence(registry.small_json_blob(layer.get("digest"), PAYLOAD_LIMIT))
            except (NotFound, Malformed):
                continue
            if pair:
                claims.append(Claim(f"sha256:{signed.group(1)}", *pair))
    return claims


def newest_signed(repository: str, flags: list[str], tag: str | None, above: int, besides: str = "") -> Newest:
    """The image of REPOSITORY (other than BESIDES) that signatures verifying with FLAGS make the highest
    release above ABOVE, of TAG (None: of any tag). Checks the claims highest first and stops at the first
    one a verified signature bears out: nothing below it can be higher."""
    highest: dict[str, int] = {}
    for claim in claims_in(Registry(repository)):
        if tag in (None, claim.tag) and claim.sequence > above and claim.digest != besides:
            highest[claim.digest] = max(highest.get(claim.digest, 0), claim.sequence)
    best, unverified = Newest("", above, 0), 0
    for digest, claimed in sorted(highest.items(), key=lambda item: -item[1]):
        if claimed <= best.sequence:
            break
        payloads = payloads_that_verify(f"{repository}@{digest}", flags)
        verified = sequence_for(payloads, tag) if payloads is not None else 0
        if verified > best.sequence:
            best = Newest(digest, verified, 0)
        if verified < claimed:  # no signature of its verifies, or not the one that makes this claim
            unverified += 1
            if unverified == MAX_UNVERIFIED:
                raise ReleaseError(f"{unverified} images in {repository} claim a later release"
                                   f"{f' of {tag}' if tag else ''} than {best.sequence} in signatures that do not "
                                   f"verify with this key: someone pushed sha256-*.sig tags without it; delete "
                                   f"those tags, then run this again")
    return Newest(best.digest, best.sequence, unverified)
