#!/usr/bin/env bash
# Checks WHEELHOUSE before a build mounts it (the Dockerfile's `wheelhouse` stage, a named build context):
# it must be a folder; one without a .whl file gets a note, since pip then goes to the index for everything.
#
#   tools/check_wheelhouse.sh "$WHEELHOUSE"       # what `make build` runs first; empty: no wheelhouse
set -euo pipefail
readonly wheelhouse=${1:-}
[[ -n $wheelhouse ]] || exit 0
if [[ ! -d $wheelhouse ]]; then
  echo "WHEELHOUSE=$wheelhouse is not a folder; point it at a folder of .whl files" >&2
  exit 2
fi
shopt -s nullglob
wheels=("$wheelhouse"/*.whl)
((${#wheels[@]})) || echo "note: WHEELHOUSE=$wheelhouse holds no .whl file"
