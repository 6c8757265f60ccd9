#!/usr/bin/env bash
# Usage: base_digest.sh IMAGE[:TAG]
# Prints the registry digest (sha256:...) of the base image a release build pins, pulling it when it is
# not here yet. Prints nothing when the image has no digest from IMAGE's repository (built or imported
# locally): the caller turns that into its error.
set -euo pipefail
image=$1
repository=${image%:*}
[[ ${image##*:} != */* ]] || repository=$image  # no tag: the last colon was a registry port
docker image inspect "$image" >/dev/null 2>&1 || docker pull --quiet "$image" >/dev/null 2>&1 || true
docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" 2>/dev/null |
  sed -n "s|^${repository}@||p" | head -n 1
