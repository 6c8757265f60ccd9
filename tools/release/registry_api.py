"""A small client of the registry HTTP API (OCI distribution): manifests and blobs, nothing else.

Plain HTTP for loopback registries (as Docker allows), HTTPS elsewhere. Registries that want a token
(ghcr.io, Docker Hub) get one through the Bearer challenge, with the credentials `docker login` saved in
~/.docker/config.json as `auths` (a credential helper's are not read: log in with `--password-stdin`
into a config without one, or use a registry that needs none).
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import pathlib
import re
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import BinaryIO

from command_line import ReleaseError


class NotFound(ReleaseError):
    """The registry does not hold what was asked for (HTTP 404)."""


class Malformed(ReleaseError):
    """What the registry holds is not what was asked for: a manifest or payload that is not a JSON object,
    or too large. Anyone who can push writes these, so callers that read others' tags skip them."""

MANIFEST_TYPES = ", ".join(["application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"])
INDEX_TYPES = ", ".join(["application/vnd.oci.image.index.v1+json",
                         "application/vnd.docker.distribution.manifest.list.v2+json"])
TIMEOUT_S = 600
CHUNK = 1 << 20
MANIFEST_LIMIT = 4 << 20  # what registries accept for a manifest (distribution's default limit)
TAG_PAGES_LIMIT = 1000  # a million tags, at the 1000 a page asked for
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


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
        if not fields["realm"].startswith(("https://", "http://")):
            raise ReleaseError(f"{self.host} names no web address to get a token from ({fields['realm']!r}): "
                               f"check REGISTRY names the registry")
        query = urllib.parse.urlencode({key: fields[key] for key in ("service", "scope") if key in fields})
        request = urllib.request.Request(f"{fields['realm']}?{query}")
        credentials = _saved_credentials(self.host)
        if credentials:
            request.add_header("Authorization", f"Basic {credentials}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
            self.token = answer.get("token") or answer.get("access_token")
        except (OSError, http.client.HTTPException, ValueError, RecursionError, AttributeError) as error:
            raise ReleaseError(f"{self.host} gave no token ({fields['realm']}: {error}): docker login {self.host} "
                               f"and run this again") from None

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
        except (OSError, http.client.HTTPException) as error:
            raise ReleaseError(f"cannot reach the registry {self.host}: {error}") from None

    def read(self, url: str, limit: int, headers: dict[str, str] | None = None) -> tuple[bytes, Message]:
        """GET URL: at most LIMIT + 1 bytes of the answer, and its headers; a connection that breaks while the
        answer is read is one line too."""
        try:
            with self.request("GET", url, headers=headers) as response:
                return response.read(limit + 1), response.headers
        except (OSError, http.client.HTTPException) as error:
            raise ReleaseError(f"the registry {self.host} broke off its answer to GET {url}: {error}") from None

    def json_object(self, url: str, limit: int, headers: dict[str, str] | None = None) -> tuple[dict, bytes, Message]:
        """GET URL as a JSON object (with the raw answer and its headers); Malformed when it is not one or is
        over LIMIT bytes, as anything someone pushed may be."""
        raw, answer_headers = self.read(url, limit, headers)
        if len(raw) > limit:
            raise Malformed(f"{self.host}: {url} is over {limit} bytes")
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: a payload of 60000 "["
            parsed = None
        if not isinstance(parsed, dict):
            raise Malformed(f"{self.host}: {url} is not a JSON object")
        return parsed, raw, answer_headers

    def manifest(self, reference: str, accept: str = MANIFEST_TYPES) -> tuple[dict, str]:
        """The manifest REFERENCE (a tag or digest) names, and its digest. ACCEPT is what may come back: image
        manifests by default; add INDEX_TYPES for a multi-platform tag, which otherwise answers 404 (an OCI
        index) or, from some registries, its linux/amd64 image under the image's digest (a Docker list)."""
        manifest, raw, _ = self.json_object(f"/manifests/{reference}", MANIFEST_LIMIT, {"Accept": accept})
        return manifest, "sha256:" + hashlib.sha256(raw).hexdigest()

    def descriptor(self, reference: str) -> tuple[dict, dict]:
        """The manifest REFERENCE names (an image's or an index's) and its descriptor: media type, digest
        and size, what an index lists of each entry."""
        manifest, raw, _ = self.json_object(f"/manifests/{reference}", MANIFEST_LIMIT,
                                            {"Accept": f"{MANIFEST_TYPES}, {INDEX_TYPES}"})
        media_type = manifest.get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
        return manifest, {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(raw).hexdigest(),
                          "size": len(raw)}

    def small_json_blob(self, digest: str, limit: int) -> dict:
        """The blob DIGEST as a JSON object, read only when it is at most LIMIT bytes (a signature's payload)."""
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise Malformed(f"{digest!r} is not a sha256 digest")
        return self.json_object(f"/blobs/{digest}", limit)[0]

    def tags(self) -> list[str]:
        """Every tag of the repository, page by page (the registry's Link header names the next one). A page
        named twice, or more than TAG_PAGES_LIMIT pages, is Malformed: a registry or proxy that links a page
        to itself would otherwise keep this asking, and growing, for ever."""
        found, url, seen = [], self.base + "/tags/list?n=1000", set()
        while url:
            if url in seen or len(seen) >= TAG_PAGES_LIMIT:
                why = "named the same page again" if url in seen else f"listed more than {TAG_PAGES_LIMIT} pages"
                raise Malformed(f"{self.host}: the tags of {self.path} {why} ({url}); a proxy between here and the "
                                f"registry may rewrite its Link header")
            seen.add(url)
            page, _, headers = self.json_object(url, MANIFEST_LIMIT)
            tags = page.get("tags") or []
            if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
                raise Malformed(f"{self.host} listed the tags of {self.path} as something other than names")
            found += tags
            next_page = re.match(r'<([^>]+)>;\s*rel="next"', headers.get("Link", ""))
            url = urllib.parse.urljoin(self.base, next_page.group(1)) if next_page else ""
        return found

    def download_blob(self, digest: str, into: BinaryIO) -> None:
        with self.request("GET", f"/blobs/{digest}") as response:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as error:  # a connection that broke off mid-blob
                    raise ReleaseError(f"the registry {self.host} broke off sending {digest[:19]}: {error}; run "
                                       f"this again") from None
                if not chunk:
                    return
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
