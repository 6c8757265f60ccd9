#!/usr/bin/env bash
# Installs Debian/Ubuntu packages without recommends. /var/cache/apt and /var/lib/apt/lists are
# BuildKit cache mounts, so downloads are kept between builds and nothing is left in the layer.
set -euo pipefail
# The official slim images delete every download after install, which would empty the cache mount.
rm -f /etc/apt/apt.conf.d/docker-clean
echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' >/etc/apt/apt.conf.d/keep-downloads
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@"
