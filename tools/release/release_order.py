"""The order of a repository's releases: a number each release's signatures carry, never a clock.

A moving tag (`cpu-latest`) promises the newest release, so `make verify` must tell which of two signed
releases is newer. Build times cannot: they come from the build machine's clock, and a release built on a
runner whose clock ran ahead, or dated in 2027, would look newer than every later one. So `make sign`
gives each release a sequence number, one more than the highest any signature in the repository claims,
and signs it with the image (annotation dev.pytorch-dev.sequence). It only grows. Signing an old release
again would make it the newest, so sign.py signs a moving tag only for the image the tag names.

What the repository's `sha256-<hex>.sig` tags claim is read without verifying it: anyone who can push can
write such a tag. So everything read is parsed as hostile (what is not a signature payload is skipped), a
false claim can only make the next number jump, and `make verify` counts a claim only once cosign has
verified the signature that makes it. It verifies claims highest first, so that each check costs one
`cosign verify` where nobody has pushed false claims, and at most MAX_UNVERIFIED more where someone has.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from cosign_cli import SEQUENCE_ANNOTATION, TAG_ANNOTATION, payloads_that_verify
from registry_api import Malformed, NotFound, Registry
from command_line import ReleaseError

SIGNATURE_TAG = re.compile(r"sha256-([0-9a-f]{64})\.sig")
PAYLOAD_LIMIT = 64 << 10  # cosign's payloads are a few hundred bytes
# Signatures read per image: `make sign` adds one a tag (two or three a release), more only when re-signed.
SIGNATURES_READ = 64
SEQUENCE = re.compile(r"[0-9]{1,30}")
LARGEST = 10 ** 30 - 1
UNREAD = LARGEST + 1  # what a signature tag that cannot be read whole may claim: more than any payload can
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


def sequence_for(payloads: list, tag: str) -> int:
    """The highest sequence signature PAYLOADS give their image as TAG; 0 for none."""
    return max((pair[1] for pair in map(tag_and_sequence, payloads) if pair and pair[0] == tag), default=0)


def claims_in(registry: Registry) -> list[Claim]:
    """Every claim the signature tags of the repository make, unverified. What is not a signature payload is
    skipped; a signature tag that cannot be read whole (too large, too many layers) could hide a genuine
    claim, so it claims UNREAD of every tag: the image must be verified to learn what it really is."""
    claims = []
    for name in registry.tags():
        signed = SIGNATURE_TAG.fullmatch(name)
        if not signed:
            continue
        digest = f"sha256:{signed.group(1)}"
        try:
            claims += claims_of_signature_tag(registry, name, digest)
        except NotFound:  # deleted since the listing
            continue
        except Malformed:
            claims.append(Claim(digest, "", UNREAD))
    return claims


def claims_of_signature_tag(registry: Registry, name: str, digest: str) -> list[Claim]:
    """The claims of the signature tag NAME of the image DIGEST; Malformed when it cannot be read whole."""
    layers = registry.manifest(name)[0].get("layers")
    if not isinstance(layers, list) or len(layers) > SIGNATURES_READ:
        raise Malformed(f"{name} does not list at most {SIGNATURES_READ} layers")
    claims = []
    for layer in layers:  # one that is not a payload cannot be a genuine signature: skipped
        size = layer.get("size") if isinstance(layer, dict) else None
        if not isinstance(size, int) or not 0 < size <= PAYLOAD_LIMIT:
            continue
        try:
            pair = tag_and_sequence(registry.small_json_blob(layer.get("digest"), PAYLOAD_LIMIT))
        except (NotFound, Malformed):
            continue
        if pair:
            claims.append(Claim(digest, *pair))
    return claims


def next_sequence(registry: Registry, claims: list[Claim]) -> int:
    """The number the next release signed into the repository gets: one more than any of its CLAIMS
    (claims_in), verified or not. So another key's releases (a rotated key) count, and a false claim can only
    make the numbers jump, or, at the largest number a payload carries, stop signing in one line that names
    the image to clean up."""
    readable = [claim for claim in claims if claim.sequence != UNREAD]
    highest = max(readable, key=lambda claim: claim.sequence, default=Claim("", "", 0))
    if highest.sequence >= LARGEST:
        raise ReleaseError(f"{highest.digest[:19]} in {registry.host}/{registry.path} claims release "
                           f"{highest.sequence}, the largest number there is: a claim pushed without the key; "
                           f"delete its tag {highest.digest.replace(':', '-')}.sig, then sign again")
    return highest.sequence + 1


def newest_signed(repository: str, flags: list[str], tag: str, above: int, besides: str) -> Newest:
    """The image of REPOSITORY (other than BESIDES) that signatures verifying with FLAGS make the highest
    release of TAG above ABOVE. Checks the claims highest first and stops at the first one a verified
    signature bears out: nothing below it can be higher."""
    highest: dict[str, int] = {}
    for claim in claims_in(Registry(repository)):
        if claim.tag in ("", tag) and claim.sequence > above and claim.digest != besides:
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
                raise ReleaseError(f"{unverified} images in {repository} claim a later release of {tag} than "
                                   f"{best.sequence} in signatures that do not verify with this key: someone pushed "
                                   f"sha256-*.sig tags without it (or they were signed with another key); delete "
                                   f"those tags, or pin an immutable tag's digest")
    return Newest(best.digest, best.sequence, unverified)
