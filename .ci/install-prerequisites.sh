#!/usr/bin/env bash
# Everything the suites need beyond the checkout, on this CI's bare Debian machine and on GitHub's Ubuntu
# runner: .ci/run and .github/workflows/image.yml both call this script and install nothing else
# themselves (tests/unit/test_ci_prerequisites.py fails when one installs what the other does not),
# because under CI=true a missing tool fails its tests instead of skipping them.
# Run as root (sudo on the runner). Each installer is idempotent, so this is too.
set -euo pipefail
HERE=$(dirname "$0")
readonly HERE

log() { printf '[install-prerequisites] %s\n' "$*" >&2; }

# shellcheck source=/dev/null
source /etc/os-release
if [[ $ID == ubuntu ]]; then
  # GitHub's runner has a current Docker engine with buildx and compose, reaches registries for the
  # base images, and has Chromium in its image: its own are used. Ubuntu 24.04 confines unprivileged user
  # namespaces with AppArmor, which rootless Podman needs; the runner is thrown away after the job.
  command -v chromium >/dev/null || { log "no chromium on this runner: install it before this script"; exit 1; }
  # cosign 2.x comes from sigstore/cosign-installer in the workflow (Ubuntu has no package of it).
  command -v cosign >/dev/null || { log "no cosign on this runner: install cosign 2.x before this script"; exit 1; }
  restriction=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
  if [[ -e $restriction && $(cat "$restriction") == 1 ]]; then
    sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0
  fi
else
  # This CI's Debian: Docker Engine 26 from the next Debian release, the plugins, Chromium, the offline base.
  bash "$HERE/prepare-machine.sh"
  # cosign 2.x, for the signing and verification tests (tests/release/test_release_signing.py).
  bash "$HERE/install-cosign.sh"
  # The arm64 leg (make test-arm64): QEMU, an offline arm64 base, an aarch64 torch (the Makefile's ARM64_*).
  bash "$HERE/prepare-arm64.sh"
fi
bash "$HERE/install-registry.sh"
bash "$HERE/install-slurm.sh"
bash "$HERE/install-nginx.sh"
# Rootless Podman and its unprivileged user, for tests/runtimes/test_rootless_podman.py.
bash "$HERE/install-podman.sh"
log "ready"
