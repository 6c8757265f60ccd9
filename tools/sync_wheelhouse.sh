#!/usr/bin/env bash
# Makes .wheelhouse (in the build context; BuildKit mounts it for pip) hold exactly the wheels of
# WHEELHOUSE, a folder of .whl files, or none when WHEELHOUSE is empty.
#
#   tools/sync_wheelhouse.sh "$WHEELHOUSE"        # what `make build` runs first
#
# It syncs rather than remakes: a wheel whose time already matches (cp -p keeps it) is left alone, so it
# is not sent to the engine again, and a build running beside this one with the same WHEELHOUSE never sees
# a wheel vanish. A new or changed wheel is copied beside its place and renamed into it.
set -euo pipefail
readonly wheelhouse=${1:-} context=.wheelhouse

shopt -s nullglob
wanted=()
if [[ -n $wheelhouse ]]; then
  if [[ ! -d $wheelhouse ]]; then
    echo "WHEELHOUSE=$wheelhouse is not a folder; point it at a folder of .whl files" >&2
    exit 2
  fi
  wanted=("$wheelhouse"/*.whl)
  ((${#wanted[@]})) || echo "note: WHEELHOUSE=$wheelhouse holds no .whl file"
fi
mkdir -p "$context"
for source in "${wanted[@]}"; do
  copy=$context/${source##*/}
  if [[ -e $copy && ! $source -nt $copy && ! $source -ot $copy ]]; then
    continue
  fi
  cp -p "$source" "$copy.partial"
  mv -f "$copy.partial" "$copy"
done
for copy in "$context"/*.whl; do
  [[ -n $wheelhouse && -e $wheelhouse/${copy##*/} ]] || rm -f "$copy"
done
