#!/usr/bin/env bash
# Build performance: cold build time, rebuild time after a one-line trainer change, and the size our
# layers add on top of the base stage (NGC for the GPU flavor; for the CPU flavor Debian + venv + torch,
# which stands in for NGC). Prints a Markdown table for BENCHMARKS.md ("## Build").
#
#   tools/bench_build.sh [--prune-build-cache] [VAR=value ...]      # or: make bench-build
#   e.g. tools/bench_build.sh --prune-build-cache FLAVOR=cpu WHEELHOUSE=/opt/wheels CA_BUNDLE=...
#
# VAR=value pairs go to `make build` as they are. It builds a copy of this checkout (tracked and untracked,
# not ignored, files) in a temporary folder under its own image name, so the trainer edit never touches
# the checkout and the image under test is not replaced. --prune-build-cache empties the BuildKit cache
# first (a truly cold build, apt and pip download caches included): that slows every other build on this
# engine once, so it is off by default; without it the first build reuses whatever the cache holds, and
# the table says so.
set -euo pipefail

readonly BENCH_IMAGE=pytorch-dev-bench
readonly TRAINER=scripts/train_ddp.py

die() { printf 'bench_build: %s\n' "$*" >&2; exit 2; }

prune=0
make_vars=()
for arg in "$@"; do
  case $arg in
    --prune-build-cache) prune=1 ;;
    *=*) make_vars+=("$arg") ;;
    *) die "unknown argument '$arg'; give --prune-build-cache and/or make variables as VAR=value" ;;
  esac
done
flavor=cpu
for var in "${make_vars[@]}"; do [[ $var == FLAVOR=* ]] && flavor=${var#FLAVOR=}; done

repo_root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
[[ -f $repo_root/$TRAINER ]] || die "$TRAINER is missing in $repo_root: the rebuild step edits it"
work=$(mktemp -d /tmp/bench-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The copy holds what `git` would commit (tracked + untracked, not ignored), as the build context does.
(cd "$repo_root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work")

seconds_of() {  # Runs "$@" quietly; prints its wall time in seconds with one decimal.
  local start end
  start=$(date +%s.%N)
  "$@" >"$work/last-build.log" 2>&1 || { tail -n 30 "$work/last-build.log" >&2; die "failed: $*"; }
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }'
}
build() { make -C "$work" build IMAGE="$BENCH_IMAGE" TAG="$flavor-bench" "${make_vars[@]}"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1000000 }'; }

if ((prune)); then
  echo "bench_build: emptying the BuildKit cache (docker builder prune -af)" >&2
  docker builder prune -af >/dev/null
fi
cold_s=$(seconds_of build)
echo "# one-line change to the trainer, made by bench_build.sh" >>"$work/$TRAINER"
rebuild_s=$(seconds_of build)

# The base stage under the same build arguments (less the per-build metadata, which only the last stage
# reads); every layer is cached by now, so this takes seconds.
base_ref="$BENCH_IMAGE:$flavor-base"
build_args=$(make -C "$work" -n build IMAGE="$BENCH_IMAGE" TAG="$flavor-bench" "${make_vars[@]}" \
  | grep -oE -- "--build-arg [A-Z_]+=[^ ]*|--secret id=ca_bundle,src=[^ ]*" \
  | grep -vE -- "--build-arg (SOURCE_URL|REVISION|CREATED)=" | tr '\n' ' ')
# shellcheck disable=SC2086  # build_args is a list of options, split on purpose
(cd "$work" && docker build --quiet --target "base-$flavor" --tag "$base_ref" $build_args . >/dev/null)
image_bytes=$(docker image inspect --format '{{.Size}}' "$BENCH_IMAGE:$flavor-bench")
base_bytes=$(docker image inspect --format '{{.Size}}' "$base_ref")
docker image rm "$BENCH_IMAGE:$flavor-bench" "$base_ref" >/dev/null

cat <<TABLE
| measure ($flavor flavor, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)) | value |
|---|---|
| cold build$( ((prune)) && echo " (BuildKit cache emptied first)" || echo " (BuildKit cache NOT emptied: warm)") | ${cold_s} s |
| rebuild after a one-line change to $TRAINER | ${rebuild_s} s |
| image size | $(mb "$image_bytes") MB |
| base stage (base-$flavor) | $(mb "$base_bytes") MB |
| our layers on top of the base | $(mb $((image_bytes - base_bytes))) MB |
TABLE
