#!/usr/bin/env bash
# Installs Debian's nginx for the reverse-proxy tests (tests/team/test_reverse_proxy.py), which run the
# example of docs/reverse-proxy.md in front of a container, under /gpu/, with TLS and websockets.
# The package's own service is not started: each test starts a private nginx on a free port.
# Idempotent, so a developer can run it again on a machine that already has it.
set -euo pipefail

log() { printf '[install-nginx] %s\n' "$*" >&2; }

if [[ -x /usr/sbin/nginx ]]; then
  log "nginx is already installed"
  exit 0
fi
log "installing nginx"
apt-get update -qq
# policy-rc.d keeps the package's postinst from starting an nginx on port 80 that nobody uses.
policy=/usr/sbin/policy-rc.d
[[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; created_policy=1; }
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
[[ -z ${created_policy-} ]] || rm -f "$policy"
log "ready: $(/usr/sbin/nginx -v 2>&1)"
