#!/usr/bin/env bash
# Installs cosign 2.x (/usr/local/bin/cosign) for `make sign`, `make verify` and the release tests
# (tests/release/test_release_signing.py). This Debian release has no cosign; the next release's package
# is one static binary that runs here, so it is unpacked with dpkg -x rather than installed.
# Major 2 only: cosign 3 stores signatures as OCI referrers by default, which 2.x cannot find, so
# signing and verifying must use the same major (docs/releases.md).
# Idempotent, so a developer can run it again on a machine that already has it.
set -euo pipefail

readonly COSIGN=/usr/local/bin/cosign
# Debian's build reports its version as "devel": the package version it came from is kept beside it.
readonly COSIGN_VERSION_FILE=/usr/local/lib/cosign.version
readonly REQUIRED_MAJOR=2
# shellcheck source=.ci/next-debian-release.sh
source "$(dirname "$0")/next-debian-release.sh"

log() { printf '[install-cosign] %s\n' "$*" >&2; }

major_of() { sed -n 's/^\([0-9]*\)\..*/\1/p' <<<"$1"; }

if [[ -x $COSIGN && -f $COSIGN_VERSION_FILE && $(major_of "$(cat "$COSIGN_VERSION_FILE")") == "$REQUIRED_MAJOR" ]]; then
  log "cosign $REQUIRED_MAJOR is already installed"
  exit 0
fi

log "installing cosign from Debian $NEXT_DEBIAN_RELEASE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && download_from_next_release cosign)
version=$(dpkg-deb --field "$work"/cosign_*.deb Version)
if [[ $(major_of "$version") != "$REQUIRED_MAJOR" ]]; then
  log "Debian $NEXT_DEBIAN_RELEASE's cosign is $version, not $REQUIRED_MAJOR.x: install cosign $REQUIRED_MAJOR.x by hand"
  exit 1
fi
unpacked=$work/unpacked  # the package's files, under the temporary folder
dpkg -x "$work"/cosign_*.deb "$unpacked"
"$unpacked/usr/bin/cosign" version >/dev/null
install -m 0755 "$unpacked/usr/bin/cosign" "$COSIGN"
mkdir -p "$(dirname "$COSIGN_VERSION_FILE")"
echo "$version" >"$COSIGN_VERSION_FILE"
log "ready: cosign $version"
