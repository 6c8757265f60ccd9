#!/usr/bin/env bash
# Usage, inside a flavor's base image (`make lock FLAVOR=cpu|gpu` runs it, once per platform): lock.sh FLAVOR OUTPUT
# Resolves requirements.txt against what the base already holds: its PIP_CONSTRAINT (NGC's pins), or
# else a freeze of its environment. Writes OUTPUT: every package pinned, with hashes, for this platform
# (merge_locks.py then makes requirements-FLAVOR.lock of every platform's). The versions OUTPUT already
# pins are kept where they still fit (uv's preference for its output file), unless LOCK_UPGRADE is set.
set -euo pipefail
readonly UV_VERSION=0.13.9
flavor=$1
output=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../build/pip-trust-ca.sh
source "$here/../build/pip-trust-ca.sh"

tools=$(mktemp -d)
PIP_CONSTRAINT="" pip install --quiet --target "$tools" "uv==$UV_VERSION"
constraints=${PIP_CONSTRAINT:-}
if [[ -z $constraints ]]; then
  constraints=/base-environment.txt  # a fixed name: the lock's "# via" lines name it
  pip freeze --all >"$constraints"
fi
# left-out.txt names packages the image leaves out (and says why); the lock must not pin them.
left_out=()
while read -r package; do left_out+=(--no-emit-package "$package"); done < <(grep -v '^\s*\(#\|$\)' "$here/left-out.txt")
upgrade=()
[[ -z ${LOCK_UPGRADE:-} ]] || upgrade=(--upgrade)
# uv reads CAs from SSL_CERT_FILE; pip-trust-ca.sh put the extra CA (if any) into PIP_CERT.
SSL_CERT_FILE=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt} UV_CACHE_DIR=$tools/cache \
  "$tools/bin/uv" pip compile "$here/requirements.txt" \
  --constraint "$constraints" \
  --python "$(command -v python3)" \
  --index-url "${PIP_INDEX_URL:-https://pypi.org/simple}" \
  --generate-hashes "${upgrade[@]}" \
  "${left_out[@]}" \
  --custom-compile-command "make lock FLAVOR=$flavor" \
  --output-file "$output" --quiet
[[ -z ${LOCK_OWNER:-} ]] || chown "$LOCK_OWNER" "$output"
echo "resolved for $(uname -m) in this base: $(grep -c '==' "$output") packages"
