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
# Debian's smallest flavor; Ubuntu 24.04 has only the one package.
package=nginx-light
if grep -qx 'ID=ubuntu' /etc/os-release; then package=nginx; fi
log "installing $package"
bash "$(dirname "$0")/apt-install-without-services.sh" "$package"
log "ready: $(/usr/sbin/nginx -v 2>&1)"
