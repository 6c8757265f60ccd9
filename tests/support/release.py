"""Helpers for the release tests: `make` with the variables of the image under test, the same
variables for a second build (the registry they publish to is tests/support/local_registry.py).

The image under test is IMAGE_UNDER_TEST (`make test` sets it to $(IMAGE):$(TAG)); the release targets
take IMAGE and TAG separately, like `make build`.
"""
from __future__ import annotations

import os
import subprocess

from tests.support import REPO_ROOT

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
