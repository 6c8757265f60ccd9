#!/usr/bin/env bash
# make build's first step: building the Dockerfile needs Docker Engine 25 or later, whose builder knows
# HEALTHCHECK --start-interval; an older engine's builder stops at it ("Unknown flag: start-interval").
# This says so in one line before any build starts. Images built elsewhere still run on older engines
# (docs/building.md, "The engine"). Podman builds with its own builder and is not checked.
#
#   tools/check_build_engine.sh [VERSION]     # VERSION: an engine version to judge; default: the engine's
set -euo pipefail

readonly NEEDED_MAJOR=25

if (($# == 0)); then
  # Podman, through its docker shim or its API socket: not a Docker Engine, and its own builder.
  if docker --version 2>/dev/null | grep -qi podman; then exit 0; fi
  if docker version --format '{{range .Server.Components}}{{.Name}} {{end}}' 2>/dev/null | grep -qi podman; then
    exit 0
  fi
  version=$(docker version --format '{{.Server.Version}}' 2>/dev/null) || version=
  [[ -n $version ]] || {
    echo "no Docker engine answers here: start it (sudo systemctl start docker), or check that your user may use it" >&2
    exit 2
  }
else
  version=$1
fi

major=${version%%.*}
if [[ ! $major =~ ^[0-9]+$ ]] || ((major < NEEDED_MAJOR)); then
  echo "Docker Engine $version cannot build this image: it needs $NEEDED_MAJOR or later (HEALTHCHECK --start-interval);" \
    "install a current Docker Engine (docs/building.md, \"The engine\"), or pull a released image, which runs on it" >&2
  exit 2
fi
