#!/usr/bin/env bash
# Rootless Podman for tests/runtimes/test_rootless_podman.py: Debian's podman, uidmap and slirp4netns, and
# an unprivileged user (PODMAN_TEST_USER, default podman-test) with subordinate ids, native overlay storage
# and a runtime folder, set up as a desktop Debian has them, plus podman-compose from PyPI in a virtual
# environment of that user's (Debian's is too old for compose.cpu.yaml's !reset). The tests run podman,
# podman-compose and `make up` as that user.
# Idempotent, so a developer can run it again on a machine that already has it.
set -euo pipefail

readonly PODMAN_USER=${PODMAN_TEST_USER:-podman-test}
readonly SUBORDINATE_RANGE=165536-231071
readonly PODMAN_COMPOSE_VERSION=1.6.0
# Where tests/support/podman.py looks for it, in the user's home.
readonly PODMAN_COMPOSE_VENV=.local/podman-compose

log() { printf '[install-podman] %s\n' "$*" >&2; }

install_packages() {
  local missing=() pkg
  for pkg in podman uidmap slirp4netns; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

create_user() {
  id -u "$PODMAN_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$PODMAN_USER"
  # useradd gives subordinate ids where login.defs says so; a user made otherwise gets a range here.
  grep -q "^$PODMAN_USER:" /etc/subuid || usermod --add-subuids "$SUBORDINATE_RANGE" "$PODMAN_USER"
  grep -q "^$PODMAN_USER:" /etc/subgid || usermod --add-subgids "$SUBORDINATE_RANGE" "$PODMAN_USER"
}

# Podman picks vfs here unless told, which stores every layer as a full copy (one load of this image took
# about 24 GB); native rootless overlay stores it once. No systemd here: cgroupfs, and events in a file.
write_user_config() {
  local home config
  home=$(getent passwd "$PODMAN_USER" | cut -d: -f6)
  config=$home/.config/containers
  runuser -u "$PODMAN_USER" -- mkdir -p "$config"
  printf '[storage]\ndriver = "overlay"\n' >"$config/storage.conf"
  printf '[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' >"$config/containers.conf"
  chown "$PODMAN_USER:" "$config/storage.conf" "$config/containers.conf"
  install -d -m 0700 -o "$PODMAN_USER" -g "$PODMAN_USER" "/run/user/$(id -u "$PODMAN_USER")"
}

# Port publishing goes through slirp4netns, which opens /dev/net/tun: 0666 on a desktop Debian, 0600 on
# some servers and CI machines.
make_tun_usable() {
  [[ -c /dev/net/tun ]] || { log "/dev/net/tun is missing: published ports will not work"; return 0; }
  [[ $(stat -c %a /dev/net/tun) == 666 ]] || chmod 0666 /dev/net/tun
}

install_podman_compose() {
  local home venv
  home=$(getent passwd "$PODMAN_USER" | cut -d: -f6)
  venv=$home/$PODMAN_COMPOSE_VENV
  [[ $("$venv/bin/podman-compose" --version 2>/dev/null | head -n 1) == *"$PODMAN_COMPOSE_VERSION"* ]] && return 0
  log "installing podman-compose $PODMAN_COMPOSE_VERSION for $PODMAN_USER"
  # From the user's home: a checkout in a private folder (a clone in mktemp -d) is out of its reach.
  (cd "$home" && runuser -u "$PODMAN_USER" -- python3 -m venv "$venv" &&
    runuser -u "$PODMAN_USER" -- "$venv/bin/pip" install --quiet "podman-compose==$PODMAN_COMPOSE_VERSION")
}

install_packages
create_user
install_podman_compose
write_user_config
make_tun_usable
log "ready: $(podman --version) for $PODMAN_USER ($(grep "^$PODMAN_USER:" /etc/subuid))"
