"""pip inside a test's container trusts the CA bundle `make test` was given (CA_BUNDLE, a proxy's CA on
this project's machines), mounted read-only and named by PIP_CERT, as docs/building.md describes for
builds. TLS verification stays on."""
from __future__ import annotations

import os

CONTAINER_CA_PATH = "/etc/ssl/certs/host-ca-bundle.crt"


def pip_trust_options() -> list[str]:
    """docker run/create options that make pip in the container trust CA_BUNDLE, when one is given."""
    bundle = os.environ.get("CA_BUNDLE")
    if not bundle:
        return []
    return ["--volume", f"{os.path.abspath(bundle)}:{CONTAINER_CA_PATH}:ro", "--env", f"PIP_CERT={CONTAINER_CA_PATH}"]
