#!/usr/bin/env python3
"""Sign every reference `make push` published, by digest, and attach the SBOM and SLSA provenance.

    python3 tools/release/sign.py IMAGE PLATFORMS RELEASE_DIR COSIGN_KEY    # or: make sign COSIGN_KEY=cosign.key

`make push` records what it pushed in RELEASE_DIR/pushed-<immutable tag>.txt (one reference@digest a
line; `make zstd` adds the -zstd variants). For each line this signs the digest, never the tag, with
annotations naming the tag (so `make verify` refuses a tag moved to another signed image) and the
release's number, one more than the highest any signature in the repository claims (so `make verify` can
tell a moving tag moved back: release_order.py), then attests the image with the
CycloneDX SBOM (`make sbom`) and the provenance predicate (`make build` wrote it). A release of several
platforms (make push PLATFORMS=...) signs each index and each entry alike, and attests each entry with
its own platform's SBOM and provenance (`make sbom PLATFORM=...` for each). A moving tag is signed
only for the image it names now, and not for an image signed before as an older release of it (a tag
moved back): signing an older build as the newest is refused unless SIGN_AS_NEWEST=1 says it is meant.

COSIGN_KEY is a cosign key file (its password in COSIGN_PASSWORD). Empty COSIGN_KEY signs keyless,
which needs an OIDC identity token: GitHub Actions with `permissions: id-token: write` has one.
"""
from __future__ import annotations

import os
import pathlib
import sys

from cosign_cli import SEQUENCE_ANNOTATION, TAG_ANNOTATION, failure_line, run_cosign, transparency_log_flags
from platforms import is_index, local_builds, parse_platforms, platform_of
from provenance import provenance_file_name
from registry_api import NotFound, Registry
from release_order import Claim, claims_in, next_sequence
from sbom import image_id_of, read_sbom_of, sbom_file_name
from command_line import ReleaseError, run_command
from tags import compute_tags, is_moving, read_labels


def pushed_file(release_dir: pathlib.Path, labels: dict[str, str]) -> pathlib.Path:
    return release_dir / f"pushed-{compute_tags(labels)[0]}.txt"


def read_pushed(release_dir: pathlib.Path, labels: dict[str, str]) -> list[tuple[str, str]]:
    """(repository:tag, sha256:digest) pairs of the references `make push` (and `make zstd`) published."""
    path = pushed_file(release_dir, labels)
    if not path.is_file():
        raise ReleaseError(f"nothing was pushed for this image ({path} is missing): run `make push REGISTRY=...` first")
    pairs = []
    for line in path.read_text().split():
        reference, _, digest = line.partition("@")
        if not digest.startswith("sha256:"):
            raise ReleaseError(f"{path} lists {line} without a digest: push again with `make push`")
        pairs.append((reference, digest))
    return pairs


def key_flags(key: str) -> list[str]:
    if key:
        if not pathlib.Path(key).is_file():
            raise ReleaseError(f"COSIGN_KEY={key} is not a file: give the private key (cosign generate-key-pair)")
        return ["--key", key]
    if not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"):
        raise ReleaseError("COSIGN_KEY is not set and no identity token exists for keyless signing: "
                           "make sign COSIGN_KEY=cosign.key (password in COSIGN_PASSWORD), or sign in a GitHub "
                           "Actions job with `permissions: id-token: write`")
    return []


def attestation_files(release_dir: pathlib.Path, labels: dict[str, str],
                      platform: str) -> list[tuple[str, pathlib.Path]]:
    files = [("cyclonedx", release_dir / sbom_file_name(labels, platform)),
             ("slsaprovenance1", release_dir / provenance_file_name(labels, platform))]
    for kind, path in files:
        if not path.is_file():
            raise ReleaseError(f"{path} is missing: `make build` writes the provenance and `make sbom` the SBOM; "
                               f"run them for this image before `make sign`")
    return files


def check_pushed_are_these_builds(builds: dict[str, str], pushed: list[tuple[str, str]]) -> dict[str, str]:
    """Refuses digests `make push` published from another build of this tag (`make build; make push;
    make build; make sign` on one day): signing them would attest them with this build's SBOM and
    provenance. A pushed image is one of BUILDS (platform: local image) when its manifest names that
    build's config (the image id); the -zstd variants compress the layers, not the config, so theirs do
    too. An index must name only images pushed here. Returns each image digest's platform."""
    ids = {image_id_of(build): platform for platform, build in builds.items()}
    platforms, indexes = {}, []
    for reference, digest in pushed:
        manifest, _ = Registry(reference.rpartition(":")[0]).descriptor(digest)
        if is_index(manifest):
            indexes.append((reference, digest, manifest))
            continue
        config = (manifest.get("config") or {}).get("digest", "")
        if config not in ids:
            ours = ", ".join(f"{builds[platform]}'s is {image_id[:19]}" for image_id, platform in ids.items())
            raise ReleaseError(f"{reference}@{digest[:19]} was pushed from another build (its config is "
                               f"{config[:19] or 'missing'}, {ours}): signing it would attest it with this build's "
                               f"SBOM and provenance; run `make push` again for this build, then `make sign`")
        platforms[digest] = ids[config]
    for reference, digest, index in indexes:
        named = [entry.get("digest") for entry in index.get("manifests") or [] if isinstance(entry, dict)]
        foreign = [digest for digest in named if digest not in platforms]
        if foreign:
            raise ReleaseError(f"{reference}@{digest[:19]} is an index naming {str(foreign[0])[:19]}, which this "
                               f"release did not push: run `make push` again for this release, then `make sign`")
    return platforms


def check_moving_tags_name_this_build(pushed: list[tuple[str, str]]) -> None:
    """Refuses to sign a moving tag (`cpu-latest`) for a digest the tag no longer names: signing gives the
    release the next number, so `make sign` run again for an old release (to retry, or after `make zstd`)
    would make it the newest, and `make verify` of the real newest would then fail as moved back."""
    for reference, digest in pushed:
        repository, _, tag = reference.rpartition(":")
        if not is_moving(tag):
            continue
        try:
            current = Registry(repository).descriptor(tag)[1]["digest"]
        except NotFound:
            current = "nothing"
        if current != digest:
            raise ReleaseError(f"{reference} now names {current[:19]}, not {digest[:19]}, which this build pushed: "
                               f"signing would make this build the newest {tag}; sign the newest build instead (to "
                               f"publish this one as the newest on purpose, `make push` it again, then sign)")


def check_not_moved_back(pushed: list[tuple[str, str]], claims: dict[str, list[Claim]]) -> None:
    """Refuses to sign a moving tag for an image signed before as an older release of it than another
    image's: the tag names this build only because someone moved it back (anyone who can push can), and a
    routine `make sign` again would make the old build the newest. CLAIMS, each repository's, are read
    unverified, as next_sequence reads them; SIGN_AS_NEWEST=1 publishes the build as the newest on purpose."""
    if os.environ.get("SIGN_AS_NEWEST") == "1":
        return
    for reference, digest in pushed:
        repository, _, tag = reference.rpartition(":")
        if not is_moving(tag):
            continue
        of_tag = [claim for claim in claims[repository] if claim.tag == tag]
        own = max((claim.sequence for claim in of_tag if claim.digest == digest), default=0)
        later = max((claim for claim in of_tag if claim.digest != digest and claim.sequence > own),
                    key=lambda claim: claim.sequence, default=None)
        if own and later:
            raise ReleaseError(f"{reference} names {digest[:19]}, signed before as release {own} of {tag}, while "
                               f"{later.digest[:19]} is claimed as the later release {later.sequence}: the tag was "
                               f"moved back to an older build, and signing would make it the newest {tag}; push the "
                               f"newest build to {tag} again, or sign with SIGN_AS_NEWEST=1 to publish this build "
                               f"as the newest on purpose")


def _cosign_or_fail(what: str, *args: str) -> None:
    result = run_cosign(*args)
    if result.returncode != 0:
        raise ReleaseError(failure_line(what, result))


def sign(image: str, platforms: str, release_dir: str, key: str) -> list[str]:
    directory = pathlib.Path(release_dir)
    builds = local_builds(image, parse_platforms(platforms)) if platforms.strip() else {platform_of(image): image}
    labels = {platform: read_labels(build) for platform, build in builds.items()}
    pushed = read_pushed(directory, next(iter(labels.values())))
    flags = key_flags(key.strip()) + transparency_log_flags(verifying=False)
    attestations = {platform: attestation_files(directory, labels[platform], platform) for platform in builds}
    for platform, build in builds.items():
        read_sbom_of(build, directory, labels[platform])  # refuses an SBOM taken from another image of this tag
    platform_of_digest = check_pushed_are_these_builds(builds, pushed)  # and digests pushed from another build
    check_moving_tags_name_this_build(pushed)
    # Each repository's signatures are read once: what they claim orders this release among the others.
    registries = {repository: Registry(repository)
                  for repository in dict.fromkeys(reference.rpartition(":")[0] for reference, _ in pushed)}
    claims = {repository: claims_in(registry) for repository, registry in registries.items()}
    check_not_moved_back(pushed, claims)
    # One number for the whole release, in each repository it went to.
    sequences = {repository: next_sequence(registry, claims[repository])
                 for repository, registry in registries.items()}
    signed = []
    for reference, digest in pushed:
        repository, _, tag = reference.rpartition(":")
        by_digest = f"{repository}@{digest}"
        _cosign_or_fail(f"sign {by_digest}", "sign", "--yes", *flags, "-a", f"{TAG_ANNOTATION}={tag}",
                        "-a", f"{SEQUENCE_ANNOTATION}={sequences[repository]}", by_digest)
        signed.append(f"{reference}@{digest}")
        print(f"signed {signed[-1]} as release {sequences[repository]}", flush=True)
    # Images are attested, each with its platform's files; an index has no SBOM of its own.
    for by_digest, digest in dict.fromkeys((f"{ref.rpartition(':')[0]}@{digest}", digest) for ref, digest in pushed):
        for kind, path in attestations.get(platform_of_digest.get(digest, ""), []):
            _cosign_or_fail(f"attest {by_digest} with {path.name}", "attest", "--yes", *flags, "--type", kind,
                            "--predicate", str(path), by_digest)
            print(f"attested {by_digest} ({kind})", flush=True)
    return signed


def main(argv: list[str]) -> int:
    return run_command(argv, "sign.py IMAGE PLATFORMS RELEASE_DIR COSIGN_KEY   (COSIGN_KEY empty: keyless)", sign)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
