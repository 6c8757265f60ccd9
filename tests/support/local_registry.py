"""A private docker-registry (Debian's) on a free 127.0.0.1 port for one test module.

dockerd trusts 127.0.0.0/8 over plain HTTP, so push and pull need no TLS. Needs /usr/bin/docker-registry
(`make ci-registry`); without it the caller skips, except in CI.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
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
