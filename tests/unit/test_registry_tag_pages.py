"""Listing a repository's tags follows the registry's pages, and a registry or proxy whose Link header
names the same page again ends in one line instead of asking for ever (tools/release/registry_api.py).
A real HTTP server on the loopback plays the registry.

    make test-unit PYTEST_ARGS=tests/unit/test_registry_tag_pages.py
"""
from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from registry_api import Malformed, Registry

# Each page of tags, and the page its Link header names next (None: the last page).
PAGES = {"/v2/team/app/tags/list?n=1000": (["a", "b"], "/v2/team/app/tags/list?n=1000&last=b"),
         "/v2/team/app/tags/list?n=1000&last=b": (["c"], None)}
# A proxy that rewrote the Link header: the second page names itself as the next one.
LOOPING = {**PAGES, "/v2/team/app/tags/list?n=1000&last=b": (["c"], "/v2/team/app/tags/list?n=1000&last=b")}


def serving(pages: dict) -> Iterator[tuple[str, list[str]]]:
    asked: list[str] = []

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            asked.append(self.path)
            tags, following = pages[self.path]
            body = json.dumps({"name": "team/app", "tags": tags}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if following:
                self.send_header("Link", f'<{following}>; rel="next"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}/team/app", asked
    finally:
        server.shutdown()


@pytest.fixture
def registry() -> Iterator[tuple[str, list[str]]]:
    yield from serving(PAGES)


@pytest.fixture
def looping_registry() -> Iterator[tuple[str, list[str]]]:
    yield from serving(LOOPING)


def test_every_page_of_tags_is_read(registry):
    repository, asked = registry
    assert Registry(repository).tags() == ["a", "b", "c"]
    assert [urllib.parse.unquote(path) for path in asked] == list(PAGES)


def test_a_page_named_again_ends_in_one_line(looping_registry):
    repository, asked = looping_registry
    with pytest.raises(Malformed, match=r"the tags of team/app named the same page again .*Link header$"):
        Registry(repository).tags()
    assert len(asked) == 2
