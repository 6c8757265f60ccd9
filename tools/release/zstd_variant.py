#!/usr/bin/env python3
"""Publish `<tag>-zstd` beside every tag `make push` published: our layers zstd-compressed, in OCI media
types; the base image's layers the very blobs the gzip image has (same digests), so a host that holds
NGC's layers downloads only ours.

    python3 tools/release/zstd_variant.py IMAGE BASE_REF RELEASE_DIR    # or: make zstd (after make push)

Built from the pushed image through the registry API, because the engine's default builder cannot export
zstd layers: each of our gzip layers is fetched, decompressed, checked against its diff id (so the
uncompressed content, and the image's config and id, stay the same), compressed with the `zstd` tool at
ZSTD_LEVEL (default 9) and uploaded; the manifest is rewritten in OCI media types. Docker Engine 23+,
containerd 1.5+ and Podman pull it; older engines keep pulling the default (gzip) tags.
The references it published are added to RELEASE_DIR/pushed-<immutable tag>.txt, so `make sign` signs them.

A release of several platforms (make push PLATFORMS=...) gets the same, entry by entry: each platform's
image as `<its entry tag>-zstd`, with the layers of the base that platform's build was made on (its
provenance names it) kept byte-identical, and one index of those under every `<tag>-zstd`.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zlib

from platforms import OCI_INDEX, architecture, is_index, local_builds
from provenance import provenance_file_name
from registry_api import MANIFEST_LIMIT, Registry
from sign import pushed_file, read_pushed
from command_line import ReleaseError, run_command
from tags import read_labels

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
SUFFIX = "-zstd"


def base_diff_ids(base_ref: str) -> list[str]:
    result = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", base_ref],
                            capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"the base {base_ref} is not here, so its layers cannot be told from ours: "
                           f"docker pull {base_ref} first")
    return json.loads(result.stdout)


def recompress(registry: Registry, layer: dict, diff_id: str, workdir: pathlib.Path) -> dict:
    """Our gzip layer as zstd; its uncompressed bytes must hash to DIFF_ID, or nothing is uploaded."""
    gzipped, compressed = workdir / "layer.gz", workdir / "layer.zst"
    with gzipped.open("wb") as sink:
        registry.download_blob(layer["digest"], sink)
    level = os.environ.get("ZSTD_LEVEL", "9")
    uncompressed_hash = hashlib.sha256()
    decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    with gzipped.open("rb") as source, subprocess.Popen(
            ["zstd", "--quiet", "--force", f"-{level}", "-T0", "-o", str(compressed)], stdin=subprocess.PIPE) as zstd:
        while chunk := source.read(1 << 20):
            data = decompressor.decompress(chunk)
            uncompressed_hash.update(data)
            zstd.stdin.write(data)
        tail = decompressor.flush()
        uncompressed_hash.update(tail)
        zstd.stdin.write(tail)
        zstd.stdin.close()
    if zstd.returncode != 0:
        raise ReleaseError(f"zstd failed on layer {layer['digest']}")
    if f"sha256:{uncompressed_hash.hexdigest()}" != diff_id:
        raise ReleaseError(f"layer {layer['digest']} does not decompress to its diff id {diff_id}: "
                           f"the registry's copy is damaged; push again with `make push`")
    digest = "sha256:" + hashlib.sha256(compressed.read_bytes()).hexdigest()
    registry.upload_blob(compressed, digest)
    gzipped.unlink()
    compressed.unlink()
    return {"mediaType": OCI_ZSTD_LAYER, "digest": digest, "size": compressed_size(digest, registry)}


def compressed_size(digest: str, registry: Registry) -> int:
    with registry.request("HEAD", f"/blobs/{digest}") as response:
        return int(response.headers["Content-Length"])


def zstd_manifest(registry: Registry, gzip_manifest: dict, base_layers: list[str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="zstd-variant-") as scratch:
        config_file = pathlib.Path(scratch) / "config.json"
        with config_file.open("wb") as sink:
            registry.download_blob(gzip_manifest["config"]["digest"], sink)
        diff_ids = json.loads(config_file.read_text())["rootfs"]["diff_ids"]
        if diff_ids[:len(base_layers)] != base_layers:
            raise ReleaseError("the pushed image does not start with its base's layers (was it built FROM another "
                               "base?): rebuild with `make build` and push again")
        layers = []
        for index, layer in enumerate(gzip_manifest["layers"]):
            if index < len(base_layers):
                # The base's blob, untouched: only the media type's name changes to OCI's for gzip.
                layers.append({"mediaType": OCI_GZIP_LAYER, "digest": layer["digest"], "size": layer["size"]})
            else:
                layers.append(recompress(registry, layer, diff_ids[index], pathlib.Path(scratch)))
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": gzip_manifest["config"]["digest"],
                           "size": gzip_manifest["config"]["size"]},
                "layers": layers}
    return json.dumps(manifest, separators=(",", ":")).encode()


def publish_zstd(image: str, base_ref: str, release_dir: str) -> list[str]:
    if not shutil.which("zstd"):
        raise ReleaseError("the zstd tool is not installed: apt-get install zstd")
    directory = pathlib.Path(release_dir)
    labels = read_labels(image)
    gzip_refs = [(ref, digest) for ref, digest in read_pushed(directory, labels) if not ref.endswith(SUFFIX)]
    repository = gzip_refs[0][0].rpartition(":")[0]
    registry = Registry(repository)
    gzip_manifest, _ = registry.descriptor(gzip_refs[0][1])
    try:
        if is_index(gzip_manifest):
            published = publish_index(registry, repository, gzip_manifest, gzip_refs, directory)
        else:
            published = publish_image(registry, repository, gzip_manifest, gzip_refs, base_diff_ids(base_ref))
    except OSError as error:  # the scratch folder's disk is full (or a file-size limit was reached)
        raise ReleaseError(f"could not write our layers while recompressing them in {tempfile.gettempdir()}: "
                           f"{error.strerror or error}; free space there, or set TMPDIR to a folder on a larger "
                           f"disk, then run `make zstd` again (nothing was published)") from None
    lines = [f"{ref}@{digest}" for ref, digest in gzip_refs] + published
    pushed_file(directory, labels).write_text("".join(f"{line}\n" for line in lines))
    return lines


def publish_image(registry: Registry, repository: str, gzip_manifest: dict, gzip_refs: list[tuple[str, str]],
                  base_layers: list[str]) -> list[str]:
    """One zstd manifest of the image GZIP_REFS name, put under each of their tags + SUFFIX."""
    manifest = zstd_manifest(registry, gzip_manifest, base_layers)
    published = []
    for reference, _ in gzip_refs:
        tag = reference.rpartition(":")[2] + SUFFIX
        published.append(f"{repository}:{tag}@{registry.put_manifest(tag, manifest, OCI_MANIFEST)}")
        print(published[-1], flush=True)
    return published


def publish_index(registry: Registry, repository: str, index: dict, gzip_refs: list[tuple[str, str]],
                  directory: pathlib.Path) -> list[str]:
    """Each entry of INDEX zstd under its own entry tag + SUFFIX, then one index of them under each release
    tag + SUFFIX. Every entry is recompressed before any tag is put, and the index last, so a failure
    publishes nothing and no tag names an entry not yet published."""
    index_digest = gzip_refs[0][1]
    entry_tags = {digest: reference.rpartition(":")[2] for reference, digest in gzip_refs if digest != index_digest}
    compressed = []
    for entry in index.get("manifests") or []:
        platform = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
        if entry.get("digest") not in entry_tags:
            raise ReleaseError(f"the index {gzip_refs[0][0]} names {str(entry.get('digest'))[:19]} for {platform}, "
                               f"which this release did not push: run `make push PLATFORMS=...` again, then `make zstd`")
        manifest, _ = registry.descriptor(entry["digest"])
        base = base_diff_ids(platform_base(registry, manifest, platform, directory))
        compressed.append((entry, zstd_manifest(registry, manifest, base)))
    entries, published = [], []
    for entry, body in compressed:
        tag = entry_tags[entry["digest"]] + SUFFIX
        digest = registry.put_manifest(tag, body, OCI_MANIFEST)
        published.append(f"{repository}:{tag}@{digest}")
        entries.append({**entry, "mediaType": OCI_MANIFEST, "digest": digest, "size": len(body)})
    body = json.dumps({**index, "manifests": entries}, separators=(",", ":")).encode()
    indexes = [f"{reference}{SUFFIX}@{registry.put_manifest(reference.rpartition(':')[2] + SUFFIX, body, OCI_INDEX)}"
               for reference, digest in gzip_refs if digest == index_digest]
    print("\n".join(indexes + published), flush=True)
    return indexes + published


def platform_base(registry: Registry, manifest: dict, platform: str, directory: pathlib.Path) -> str:
    """The local image of the base PLATFORM's build was made on, as that build's provenance names it:
    <base>-<architecture> (this project's name for a named platform's copy) or the base itself, where it is
    that platform's."""
    config = registry.json_object(f"/blobs/{manifest['config']['digest']}", MANIFEST_LIMIT)[0]
    labels = (config.get("config") or {}).get("Labels") or {}
    path = directory / provenance_file_name(labels, platform)
    try:
        dependencies = json.loads(path.read_text())["buildDefinition"]["resolvedDependencies"]
        base = next(item["uri"].removeprefix("docker://") for item in dependencies if item["name"] == "base-image")
    except (OSError, ValueError, KeyError, StopIteration):
        raise ReleaseError(f"{path}, which names the base of the {platform} build, is missing or not a provenance "
                           f"`make build PLATFORM={platform}` wrote: put it in RELEASE_DIR, then `make zstd` again "
                           f"(nothing was published)") from None
    try:
        return local_builds(base, [platform])[platform]
    except ReleaseError:
        raise ReleaseError(f"the {platform} base {base} is not here, so its layers cannot be told from ours: "
                           f"docker pull --platform {platform} {base} && docker tag {base} "
                           f"{base}-{architecture(platform)}, then `make zstd` again") from None


def main(argv: list[str]) -> int:
    return run_command(argv, "zstd_variant.py IMAGE BASE_REF RELEASE_DIR   (after make push)", publish_zstd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
