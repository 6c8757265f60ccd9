#!/usr/bin/env bash
# Installs Debian's docker-registry (a real v2 registry, /usr/bin/docker-registry) for the release tests,
# which push the image to a registry on 127.0.0.1 and pull it back (tests/release/test_release_registry.py).
# The package's own service is not started: each test run starts a private registry on a free port.
# Idempotent, so a developer can run it again on a machine that already has it.
set -euo pipefail

log() { printf '[install-registry] %s\n' "$*" >&2; }

if [[ -x /usr/bin/docker-registry ]]; then
  log "docker-registry is already installed"
  exit 0
fi
log "installing docker-registry"
bash "$(dirname "$0")/apt-install-without-services.sh" docker-registry
log "ready: $(/usr/bin/docker-registry --version 2>&1 | head -n1)"
