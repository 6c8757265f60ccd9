#!/usr/bin/env bash
# Prepares an amd64 machine to build and run the arm64 image (make arm64-prerequisites, as root):
#   1. QEMU's aarch64 emulation, registered with binfmt_misc (F flag: containers need nothing of it);
#   2. an offline arm64 Debian base, ARM64_BASE_IMAGE (no registry is reachable from CI's machines, and
#      the classic image store keeps one image per name, so it gets a name of its own);
#   3. a wheelhouse, ARM64_WHEELHOUSE, with the newest CPU-only aarch64 torch the package index serves
#      (ARM64_TORCH_VERSION: 2.11 and later are CUDA builds there; docs/testing.md says so).
# Measured on a project machine: about 80 s in all (docs/building.md, "arm64: Apple Silicon and Grace").
set -euo pipefail
# The Makefile holds the three settings (make ci-prerequisites and make arm64-prerequisites pass them).
for setting in ARM64_BASE_IMAGE ARM64_WHEELHOUSE ARM64_TORCH_VERSION; do
  [[ -n ${!setting:-} ]] || { echo "[prepare-arm64] $setting is not set: run make arm64-prerequisites" >&2; exit 2; }
done
log() { echo "[prepare-arm64] $*"; }
# shellcheck source=.ci/debian-base.sh
source "$(dirname "$0")/debian-base.sh"

register_emulation() {
  if ! command -v qemu-aarch64-static >/dev/null || ! command -v update-binfmts >/dev/null; then
    log "installing qemu-user-static and binfmt-support"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static binfmt-support >/dev/null
  fi
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64
  grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
    { log "qemu-aarch64 is registered without the F flag: containers cannot run it"; exit 1; }
}

build_arm64_base_image() {
  docker image inspect "$ARM64_BASE_IMAGE" >/dev/null 2>&1 && return
  log "building $ARM64_BASE_IMAGE with debootstrap (its second stage runs emulated)"
  import_debian_base "$ARM64_BASE_IMAGE" arm64
}

fetch_arm64_torch() {
  mkdir -p "$ARM64_WHEELHOUSE"
  compgen -G "$ARM64_WHEELHOUSE/torch-$ARM64_TORCH_VERSION-*aarch64.whl" >/dev/null && return
  log "downloading torch $ARM64_TORCH_VERSION for aarch64 into $ARM64_WHEELHOUSE"
  pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 --python-version 3.11 \
    --dest "$ARM64_WHEELHOUSE" "torch==$ARM64_TORCH_VERSION"
}

register_emulation
build_arm64_base_image
fetch_arm64_torch
log "ready: $(docker run --rm --platform linux/arm64 "$ARM64_BASE_IMAGE" uname -m) containers, torch $ARM64_TORCH_VERSION in $ARM64_WHEELHOUSE"
