"""A small client of the registry HTTP API (OCI distribution): manifests and blobs, nothing else.

Plain HTTP for loopback registries (as Docker allows), HTTPS elsewhere. Registries that want a token
(ghcr.io, Docker Hub) get one through the Bearer challenge, with the credentials `docker login` saved in
~/.docker/config.json as `auths` (a credential helper's are not read: log in with `--password-stdin`
into a config without one, or use a registry that needs none).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import BinaryIO

from tags import ReleaseError


class NotFound(ReleaseError):
    """The registry does not hold what was asked for (HTTP 404)."""

MANIFEST_TYPES = ", ".join(["application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"])
TIMEOUT_S = 600
CHUNK = 1 << 20


def split_repository(repository: str) -> tuple[str, str]:
    """('127.0.0.1:5000', 'team/pytorch-dev') for 127.0.0.1:5000/team/pytorch-dev."""
    host, _, path = repository.partition("/")
    if not path or not ("." in host or ":" in host or host == "localhost"):
        raise ReleaseError(f"{repository} names no registry host: push it first (make push REGISTRY=...)")
    return host, path


def _saved_credentials(host: str) -> str | None:
    config = pathlib.Path(os.environ.get("DOCKER_CONFIG", pathlib.Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(config.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    entry = auths.get(host) or auths.get(f"https://{host}") or {}
    return entry.get("auth")


class Registry:
    def __init__(self, repository: str):
        self.host, self.path = split_repository(repository)
        loopback = re.match(r"(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$", self.host)
        self.base = f"{'http' if loopback else 'https'}://{self.host}/v2/{self.path}"
        self.token: str | None = None

    def _authorize(self, challenge: str) -> None:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        if not challenge.lower().startswith("bearer") or "realm" not in fields:
            raise ReleaseError(f"{self.host} asks for authentication this tool cannot give: docker login {self.host}")
        query = urllib.parse.urlencode({key: fields[key] for key in ("service", "scope") if key in fields})
        request = urllib.request.Request(f"{fields['realm']}?{query}")
        credentials = _saved_credentials(self.host)
        if credentials:
            request.add_header("Authorization", f"Basic {credentials}")
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        self.token = answer.get("token") or answer.get("access_token")

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                body: bytes | BinaryIO | None = None, retry: bool = True):
        request = urllib.request.Request(url if "://" in url else self.base + url, data=body, method=method,
                                         headers=dict(headers or {}))
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as error:
            if error.code == 401 and retry and not hasattr(body, "read"):
                self._authorize(error.headers.get("WWW-Authenticate", ""))
                return self.request(method, url, headers=headers, body=body, retry=False)
            kind = NotFound if error.code == 404 else ReleaseError
            raise kind(f"{self.host} answered {method} {url}: HTTP {error.code} {error.read()[:200]!r}") from None
        except OSError as error:
            raise ReleaseError(f"cannot reach the registry {self.host}: {error}") from None

    def manifest(self, reference: str) -> tuple[dict, str]:
        with self.request("GET", f"/manifests/{reference}", headers={"Accept": MANIFEST_TYPES}) as response:
            raw = response.read()
        return json.loads(raw), "sha256:" + hashlib.sha256(raw).hexdigest()

    def tags(self) -> list[str]:
        """Every tag of the repository, page by page (the registry's Link header names the next one)."""
        found, url = [], "/tags/list?n=1000"
        while url:
            with self.request("GET", url) as response:
                found += json.loads(response.read()).get("tags") or []
                next_page = re.match(r'<([^>]+)>;\s*rel="next"', response.headers.get("Link", ""))
            url = urllib.parse.urljoin(self.base, next_page.group(1)) if next_page else ""
        return found

    def labels(self, reference: str) -> dict[str, str]:
        """The labels of the image REFERENCE (a tag or digest) names, from its config blob."""
        manifest, _ = self.manifest(reference)
        if not (manifest.get("config") or {}).get("digest"):
            return {}  # not an image manifest (an index, a signature's artifact)
        with self.request("GET", f"/blobs/{manifest['config']['digest']}") as response:
            config = json.loads(response.read())
        return (config.get("config") or {}).get("Labels") or {}

    def download_blob(self, digest: str, into: BinaryIO) -> None:
        with self.request("GET", f"/blobs/{digest}") as response:
            while chunk := response.read(CHUNK):
                into.write(chunk)

    def has_blob(self, digest: str) -> bool:
        try:
            self.request("HEAD", f"/blobs/{digest}").close()
            return True
        except ReleaseError:
            return False

    def upload_blob(self, path: pathlib.Path, digest: str) -> None:
        if self.has_blob(digest):
            return
        with self.request("POST", "/blobs/uploads/", body=b"") as response:
            location = urllib.parse.urljoin(self.base, response.headers["Location"])
        separator = "&" if "?" in location else "?"
        with path.open("rb") as blob:
            self.request("PUT", f"{location}{separator}digest={urllib.parse.quote(digest)}", body=blob,
                         headers={"Content-Type": "application/octet-stream",
                                  "Content-Length": str(path.stat().st_size)}).close()

    def put_manifest(self, tag: str, manifest: bytes, media_type: str) -> str:
        with self.request("PUT", f"/manifests/{tag}", body=manifest, headers={"Content-Type": media_type}) as response:
            return response.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(manifest).hexdigest()
