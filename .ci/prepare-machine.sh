#!/usr/bin/env bash
# Prepares a bare CI machine of this workplace for `make test` (docs/testing.md says what each step is for):
# a current Docker Engine (26, from the next Debian release), the buildx and compose plugins, Chromium
# for the browser tests, and an offline Debian base image (no registry is reachable here).
# Every step is idempotent, so a developer can run it again on a machine that already has them.
set -euo pipefail

readonly PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
# The CPU base the Dockerfile names (its ARG CPU_BASE_IMAGE), e.g. debian:bookworm-slim.
BASE_IMAGE=$(sed -n 's/^ARG CPU_BASE_IMAGE=//p' "$(dirname "$0")/../Dockerfile")
readonly BASE_IMAGE
# shellcheck source=.ci/next-debian-release.sh
source "$(dirname "$0")/next-debian-release.sh"
# shellcheck source=.ci/debian-base.sh
source "$(dirname "$0")/debian-base.sh"
# The oldest engine the suite runs on (docs/building.md): this release's docker.io is 20.10, which
# cannot pull zstd layers and has no healthcheck start interval.
readonly MIN_ENGINE_MAJOR=26

log() { printf '[prepare-machine] %s\n' "$*" >&2; }

install_debian_packages() {
  local missing=()
  for pkg in debootstrap chromium openssh-client; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

engine_is_current() {
  local version
  version=$(dockerd --version 2>/dev/null | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
  [[ -n $version ]] && ((version >= MIN_ENGINE_MAJOR))
}

# The next release's docker.io (26) and containerd (1.7) need glibc 2.34, which this release has; its
# runc needs 2.38, so apt satisfies their runc and tini dependencies from this release instead.
install_docker_engine() {
  if engine_is_current; then return; fi
  log "installing Docker Engine and containerd from Debian $NEXT_DEBIAN_RELEASE"
  local work
  work=$(mktemp -d)
  (cd "$work" && download_from_next_release docker.io containerd)
  bash "$(dirname "$0")/apt-install-without-services.sh" "$work"/docker.io_*.deb "$work"/containerd_*.deb
  rm -rf "$work"
  engine_is_current || { log "dockerd $(dockerd --version) is older than $MIN_ENGINE_MAJOR after the install"; exit 1; }
}

# The current Debian release has no buildx; the next release's static plugins work with its engine.
install_cli_plugins() {
  if [[ -x $PLUGIN_DIR/docker-buildx && -x $PLUGIN_DIR/docker-compose ]]; then return; fi
  log "installing buildx and compose plugins from Debian $NEXT_DEBIAN_RELEASE"
  local work
  work=$(mktemp -d)
  (cd "$work" && download_from_next_release docker-buildx docker-compose)
  mkdir -p "$PLUGIN_DIR"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/unpacked"; done
  install -m 0755 "$work"/unpacked/usr/libexec/docker/cli-plugins/* "$PLUGIN_DIR/"
  rm -rf "$work"
}

start_docker_engine() {
  if docker info >/dev/null 2>&1; then return; fi
  log "starting dockerd"
  setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return
    sleep 1
  done
  log "dockerd did not answer within 60 s; see /var/log/dockerd.log"
  exit 1
}

# A base imported by an older version of this script has a 0700 root, which `docker run` cannot show
# (its merged root is always 0755): the mode is read from the image's one layer instead, found through
# manifest.json (Docker 25+ saves an OCI layout, where layers are blobs, not */layer.tar).
base_root_is_world_readable() {
  local saved layer root_entry
  saved=$(mktemp -d)
  docker save "$BASE_IMAGE" | tar -x -C "$saved"
  layer=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["Layers"][0])' "$saved/manifest.json")
  root_entry=$(tar -tvf "$saved/$layer" 2>/dev/null | head -n 1 || true)
  rm -rf "$saved"
  [[ $root_entry == drwxr-xr-x* ]]
}

# No registry is reachable, so the Dockerfile's CPU base is made here and tagged with the name it expects.
build_offline_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && base_root_is_world_readable; then return; fi
  log "building $BASE_IMAGE with debootstrap"
  import_debian_base "$BASE_IMAGE"
}

install_cli_plugins_and_engine() {
  install_debian_packages
  install_docker_engine
  install_cli_plugins
  start_docker_engine
  build_offline_base_image
}

install_cli_plugins_and_engine
log "ready: $(docker version --format 'engine {{.Server.Version}}'), $(docker buildx version | cut -d' ' -f1-2), $(docker compose version --short | sed 's/^/compose /')"
