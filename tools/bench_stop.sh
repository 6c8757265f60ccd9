#!/usr/bin/env bash
# How long `docker stop` takes with many processes in the container, and how soon the user's work gets
# its SIGTERM. Prints a Markdown table for BENCHMARKS.md ("## Stopping").
#
#   tools/bench_stop.sh IMAGE [COUNT ...]        # e.g. tools/bench_stop.sh pytorch-dev:cpu-latest 100 1000 5000
#
# For each COUNT it starts a container of IMAGE (SSH on, JupyterLab off), starts COUNT idle
# `tail -f /dev/null` processes with `docker exec` (each is user work: read, signalled and waited for,
# the most the stop path does per process), then runs `docker stop -t 30`. "SIGTERM after" is the time
# from the stop to the entrypoint's "stopping: SIGTERM to your work" line (docker logs --timestamps, the
# same clock). "supervisor RSS" is the supervisor's resident memory (VmRSS, and its peak so far, VmHWM)
# just before the stop. The containers are removed at the end.
set -euo pipefail

readonly GRACE_S=30
die() { printf 'bench_stop: %s\n' "$*" >&2; exit 2; }

(($# >= 1)) || die "give the image to measure, then process counts (default: 100 1000 5000)"
image=$1
shift
counts=("$@")
((${#counts[@]})) || counts=(100 1000 5000)
for count in "${counts[@]}"; do [[ $count =~ ^[1-9][0-9]*$ ]] || die "'$count' is not a process count"; done
docker image inspect "$image" >/dev/null 2>&1 || die "image $image is not here; build it first (make build)"

containers=()
remove_containers() {
  local name
  for name in "${containers[@]}"; do docker rm --force "$name" >/dev/null 2>&1 || true; done
}
trap remove_containers EXIT

# Seconds from FIRST to SECOND (epoch times with fractions), to a tenth.
seconds_between() { awk -v first="$1" -v second="$2" 'BEGIN { printf "%.1f s", second - first }'; }

process_count() { docker top "$1" -e -o pid | tail -n +2 | wc -l; }

# The supervisor's VmRSS and VmHWM in MiB: it is tini's (PID 1's) only child.
supervisor_memory() {
  # shellcheck disable=SC2016  # expanded inside the container
  docker exec "$1" sh -c 'awk "/^VmRSS/ { rss = \$2 } /^VmHWM/ { peak = \$2 }
    END { printf \"%.1f / %.1f\", rss / 1024, peak / 1024 }" "/proc/$(cut -d" " -f1 /proc/1/task/1/children)/status"'
}

# Seconds since the epoch, with nanoseconds, of a docker logs --timestamps line holding TEXT.
log_time() {
  local logs stamp
  logs=$(docker logs --timestamps "$1" 2>&1)
  stamp=$(grep -m 1 -F "$2" <<<"$logs" | cut -d' ' -f1) || return 0
  [[ -n $stamp ]] && date -d "$stamp" +%s.%N
}

measure() {
  local count=$1 name started ended signalled exit_code memory
  name=bench-stop-$$-$count
  containers+=("$name")
  docker run --detach --name "$name" --shm-size=1g --env ENABLE_JUPYTER=0 "$image" >/dev/null
  until docker exec "$name" test -e /run/container/started 2>/dev/null; do sleep 0.5; done
  docker exec --detach --user dev "$name" bash -c "for _ in \$(seq $count); do tail -f /dev/null & done; wait"
  until (($(process_count "$name") >= count)); do sleep 1; done
  memory=$(supervisor_memory "$name")
  started=$(date +%s.%N)
  docker stop --time "$GRACE_S" "$name" >/dev/null
  ended=$(date +%s.%N)
  signalled=$(log_time "$name" "stopping: SIGTERM to your work")
  exit_code=$(docker inspect --format '{{.State.ExitCode}}' "$name")
  printf '| %s | %s | %s | %s | %s MiB |\n' "$count" "$(seconds_between "$started" "$ended")" \
    "$([[ -n $signalled ]] && seconds_between "$started" "$signalled" || echo never)" "$exit_code" "$memory"
  docker rm --force "$name" >/dev/null
}

# shellcheck disable=SC2016  # Markdown's backquotes, not a command substitution
echo '| processes | `docker stop` took | SIGTERM after | exit | supervisor RSS / peak |'
echo '|---|---|---|---|---|'
for count in "${counts[@]}"; do measure "$count"; done
