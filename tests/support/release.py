"""Helpers for the release tests: `make` with the variables of the image under test, the same
variables for a second build, and a private registry on 127.0.0.1 to publish to.

The image under test is IMAGE_UNDER_TEST (`make test` sets it to $(IMAGE):$(TAG)); the release targets
take IMAGE and TAG separately, like `make build`.
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

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import free_port
from tests.support.host_tools import skip_where_missing
from tests.support.waiting import wait_until

REGISTRY_BINARY = "/usr/bin/docker-registry"

MAKE_TIMEOUT_S = 900


def split_image_ref(image: str) -> tuple[str, str]:
    """('pytorch-dev', 'cpu-latest') for pytorch-dev:cpu-latest (a registry port is not a tag)."""
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return name, tag


def make(target: str, image: str, flavor: str, *variables: str, timeout: float = MAKE_TIMEOUT_S,
         environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs `make -s TARGET` for IMAGE with FLAVOR and extra VAR=value pairs (and ENVIRONMENT added to
    this one); never raises on failure."""
    name, tag = split_image_ref(image)
    return subprocess.run(["make", "-s", "--no-print-directory", target, f"IMAGE={name}", f"TAG={tag}",
                           f"FLAVOR={flavor}", *variables], env={**environment_without_make(), **(environment or {})},
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def environment_without_make() -> dict[str, str]:
    """This environment less the outer `make test`'s MAKEFLAGS, whose variables would leak into ours."""
    return {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def build_variables() -> list[str]:
    """The build inputs `make test` was given (WHEELHOUSE, CA_BUNDLE, ...), for a second build alike."""
    names = ("WHEELHOUSE", "CA_BUNDLE", "PIP_INDEX_URL", "NGC_TAG", "TORCH_VERSION")
    variables = [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]
    if not os.environ.get("TORCH_VERSION") and os.environ.get("EXPECTED_TORCH_VERSION"):
        variables.append(f"TORCH_VERSION={os.environ['EXPECTED_TORCH_VERSION']}")
    return variables


def registry_api(address: str, path: str, accept: str = "") -> dict:
    request = urllib.request.Request(f"http://{address}{path}", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


@contextlib.contextmanager
def local_registry(root: pathlib.Path) -> Iterator[str]:
    """A private docker-registry on a free 127.0.0.1 port (dockerd trusts 127.0.0.0/8 over plain HTTP);
    yields its host:port and removes what was pushed to it. Skips where docker-registry is missing."""
    if not os.access(REGISTRY_BINARY, os.X_OK):
        skip_where_missing(f"{REGISTRY_BINARY} is missing: install it with `make ci-registry` (.ci/install-registry.sh)")
    address = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"http:\n  addr: {address}\n")
    log_path = root / "registry.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            def answers() -> bool:
                try:
                    registry_api(address, "/v2/")
                    return True
                except OSError:
                    if process.poll() is not None:
                        pytest.fail(f"docker-registry exited: {log_path.read_text()}")
                    return False
            wait_until(answers, 30, interval=0.2,
                       failure=lambda: f"docker-registry did not answer on {address}: {log_path.read_text()}")
            yield address
        finally:
            process.terminate()
            process.wait(timeout=30)
            shutil.rmtree(root / "data", ignore_errors=True)
