"""A private docker-registry (Debian's) on a free 127.0.0.1 port for one test module.

dockerd trusts 127.0.0.0/8 over plain HTTP, so push and pull need no TLS. Needs /usr/bin/docker-registry
(`make ci-registry`); without it the caller skips, except in CI.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator

from tests.support import HTTP_TIMEOUT_S, SETTLES_S
from tests.support.containers import free_port
from tests.support.host_tools import skip_where_missing
from tests.support.waiting import wait_until

REGISTRY_BINARY = "/usr/bin/docker-registry"


def registry_api(address: str, path: str, accept: str = "") -> dict:
    """The JSON answer of the registry at ADDRESS to GET PATH (with an Accept header, for manifests)."""
    request = urllib.request.Request(f"http://{address}{path}", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        return json.loads(response.read() or b"{}")


@contextlib.contextmanager
def local_registry(root: pathlib.Path) -> Iterator[str]:
    """Serves a registry with its data under ROOT; yields its host:port."""
    if not os.access(REGISTRY_BINARY, os.X_OK):
        skip_where_missing(f"{REGISTRY_BINARY} is missing: install it with `make ci-registry` (.ci/install-registry.sh)")
    address = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"http:\n  addr: {address}\n")
    log = root / "registry.log"
    with log.open("w") as output:
        process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=output, stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            try:
                registry_api(address, "/v2/")
                return True
            except OSError:
                assert process.poll() is None, f"docker-registry exited: {log.read_text()}"
                return False
        wait_until(answers, SETTLES_S, interval=0.2, failure=lambda: f"docker-registry did not answer on {address}: {log.read_text()}")
        yield address
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(root / "data", ignore_errors=True)


def put_blob(address: str, repository: str, data: bytes) -> dict:
    """Uploads DATA as a blob of REPOSITORY (its path, without the host) in one request; returns its
    descriptor without a media type: {"digest": ..., "size": ...}."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{address}/v2/{repository}/blobs/uploads/", data=b"", method="POST")
    with urllib.request.urlopen(start, timeout=HTTP_TIMEOUT_S) as response:
        location = urllib.parse.urljoin(f"http://{address}/", response.headers["Location"])
    upload = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={digest}", data=data,
                                    method="PUT", headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(upload, timeout=HTTP_TIMEOUT_S).close()
    return {"digest": digest, "size": len(data)}


def put_manifest(address: str, repository: str, tag: str, manifest: dict,
                 media_type: str = "application/vnd.oci.image.manifest.v1+json") -> dict:
    """Pushes MANIFEST (of MEDIA_TYPE: an OCI image manifest unless told) as REPOSITORY:TAG; returns its
    descriptor: {"mediaType": ..., "digest": ..., "size": ...}."""
    body = json.dumps(manifest).encode()
    request = urllib.request.Request(f"http://{address}/v2/{repository}/manifests/{tag}", data=body, method="PUT",
                                     headers={"Content-Type": media_type})
    urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S).close()
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body)}
