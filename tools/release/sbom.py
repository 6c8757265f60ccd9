#!/usr/bin/env python3
"""A CycloneDX 1.5 JSON SBOM of a built image: its OS (dpkg) and Python packages.

    python3 tools/release/sbom.py IMAGE OUTPUT_DIR     # or: make sbom FLAVOR=cpu  (writes to .build/)

The inventory is taken inside the image (one `docker run` of the image's own Python, so it lists what
that interpreter really imports, NGC's system site-packages or the CPU flavor's venv), and the document
is written here with the standard library only. The file is named `sbom-<immutable release tag>.cdx.json`
(with -<architecture> before `.cdx.json` for a platform other than amd64); the path written is printed.
The output is deterministic for one image: its serial number is derived from the image id and its
timestamp is the image's creation time, so re-running it changes nothing.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from urllib.parse import quote

from platforms import file_suffix, platform_of
from command_line import ReleaseError, run_command
from tags import CREATED_LABEL, REVISION_LABEL, compute_tags, read_labels

TOOL_NAME = "pytorch-dev tools/release/sbom.py"
INVENTORY_TIMEOUT_S = 180
# The property that binds an SBOM to the one image it was taken from: its id (the config's digest), which
# two builds of one release tag (same labels, other contents) do not share.
IMAGE_ID_PROPERTY = "dev.pytorch-dev.image-id"

# Runs inside the image. It prints one JSON object: os-release, installed dpkg packages, Python dists.
INVENTORY_PROBE = r'''
import importlib.metadata, json, re, shutil, subprocess
os_release = {}
with open("/etc/os-release") as f:
    for line in f:
        key, sep, value = line.strip().partition("=")
        if sep:
            os_release[key] = value.strip('"')
debs = []
if shutil.which("dpkg-query"):
    fmt = "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"
    for line in subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True, check=True).stdout.splitlines():
        status, name, version, arch = line.split("\t")
        if status.startswith("ii"):
            debs.append({"name": name, "version": version, "arch": arch})
dists, seen = [], set()
for dist in importlib.metadata.distributions():  # sys.path order: the first of a name is the one imported
    name = dist.metadata["Name"]
    key = re.sub(r"[-_.]+", "-", name or "").lower()
    if not name or key in seen:
        continue
    seen.add(key)
    dists.append({"name": name, "key": key, "version": dist.version,
                  "license_expression": dist.metadata.get("License-Expression"),
                  "license": dist.metadata.get("License")})
print(json.dumps({"os_release": os_release, "debs": debs, "dists": dists}))
'''


def take_inventory(image: str) -> dict:
    """Runs the probe with the image's python3 (as root, without the entrypoint's services)."""
    result = subprocess.run(["docker", "run", "--rm", "--network=none", "--user=0", "--entrypoint=python3", image,
                             "-c", INVENTORY_PROBE],
                            capture_output=True, text=True, timeout=INVENTORY_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"could not list the packages of {image} (python3 in the image failed): "
                           f"{result.stderr.strip()[-500:]}")
    return json.loads(result.stdout)


def _licenses(dist: dict) -> list[dict]:
    # Only short, one-line declarations: some packages put a whole license text in the License field.
    if dist.get("license_expression"):
        return [{"expression": dist["license_expression"]}]
    declared = (dist.get("license") or "").strip()
    if declared and "\n" not in declared and len(declared) <= 100 and declared.upper() != "UNKNOWN":
        return [{"license": {"name": declared}}]
    return []


def deb_component(deb: dict, os_release: dict) -> dict:
    distro = os_release.get("ID", "debian")
    qualifiers = f"arch={deb['arch']}&distro={distro}-{os_release.get('VERSION_ID', '')}"
    purl = f"pkg:deb/{distro}/{quote(deb['name'])}@{quote(deb['version'], safe='')}?{qualifiers}"
    return {"type": "library", "bom-ref": purl, "name": deb["name"], "version": deb["version"], "purl": purl}


def python_component(dist: dict) -> dict:
    purl = f"pkg:pypi/{dist['key']}@{quote(dist['version'], safe='')}"
    component = {"type": "library", "bom-ref": purl, "name": dist["name"], "version": dist["version"], "purl": purl}
    licenses = _licenses(dist)
    if licenses:
        component["licenses"] = licenses
    return component


def build_bom(image: str, image_id: str, labels: dict[str, str], inventory: dict) -> dict:
    """The CycloneDX document: the image as metadata.component, its OS, dpkg and Python packages."""
    os_release = inventory["os_release"]
    release_tag = compute_tags(labels)[0]
    image_name = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    properties = [{"name": name, "value": value} for name, value in sorted(labels.items())]
    properties.append({"name": IMAGE_ID_PROPERTY, "value": image_id})
    components = [{"type": "operating-system", "bom-ref": f"os:{os_release.get('ID', 'linux')}",
                   "name": os_release.get("ID", "linux"), "version": os_release.get("VERSION_ID", ""),
                   "description": os_release.get("PRETTY_NAME", "")}]
    components += [deb_component(deb, os_release) for deb in sorted(inventory["debs"], key=lambda d: d["name"])]
    components += [python_component(dist) for dist in sorted(inventory["dists"], key=lambda d: d["key"])]
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'docker-image:' + image_id)}",
        "version": 1,
        "metadata": {
            "timestamp": labels[CREATED_LABEL],
            "tools": {"components": [{"type": "application", "name": TOOL_NAME}]},
            "component": {"type": "container", "bom-ref": f"image:{image_id}", "name": image_name,
                          "version": release_tag, "properties": properties},
        },
        "components": components,
    }


def sbom_file_name(labels: dict[str, str], platform: str = "linux/amd64") -> str:
    """Named after the immutable release tag, which differs wherever the contents can: flavor, torch, CUDA,
    base (two NGC releases built from one commit), date, commit; and after the platform, but amd64's."""
    return f"sbom-{compute_tags(labels)[0]}{file_suffix(platform)}.cdx.json"


def image_id_of(image: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def recorded_image_id(sbom: dict) -> str:
    properties = ((sbom.get("metadata") or {}).get("component") or {}).get("properties") or []
    return next((p.get("value", "") for p in properties if p.get("name") == IMAGE_ID_PROPERTY), "")


def read_sbom_of(image: str, release_dir: pathlib.Path, labels: dict[str, str]) -> tuple[pathlib.Path, dict]:
    """The SBOM `make sbom` wrote for IMAGE, refused when it was taken from another image: the file is named
    after the release tag, which another build of the same commit on the same day shares."""
    path = release_dir / sbom_file_name(labels, platform_of(image))
    if not path.is_file():
        raise ReleaseError(f"{path} is missing: run `make sbom` for this image first")
    try:
        sbom = json.loads(path.read_text())
    except ValueError:
        raise ReleaseError(f"{path} is not JSON: run `make sbom` for this image again") from None
    recorded, actual = recorded_image_id(sbom), image_id_of(image)
    if recorded != actual:
        raise ReleaseError(f"{path} was written for image {recorded[:19] or '(none recorded)'}, not for {image} "
                           f"({actual[:19]}): run `make sbom` for this image again")
    return path, sbom


def write_sbom(image: str, output_dir: pathlib.Path) -> pathlib.Path:
    labels = read_labels(image)
    if not labels.get(REVISION_LABEL):
        raise ReleaseError(f"{image} has no {REVISION_LABEL} label: build it with `make build` from a git checkout")
    bom = build_bom(image, image_id_of(image), labels, take_inventory(image))
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / sbom_file_name(labels, platform_of(image))
    # Written beside and renamed into place, so a reader never sees half a file.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(bom, indent=2, sort_keys=False) + "\n")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def main(argv: list[str]) -> int:
    return run_command(argv, "sbom.py IMAGE OUTPUT_DIR   (writes a CycloneDX 1.5 JSON SBOM of IMAGE into OUTPUT_DIR)",
                       lambda image, output_dir: print(write_sbom(image, pathlib.Path(output_dir))))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
