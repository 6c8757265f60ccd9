#!/usr/bin/env bash
# The end of `make up`: waits until the container is healthy, or has failed, and says which.
#
#   tools/wait_until_up.sh CONTAINER [SECONDS]     # Docker's engine; default 300 s
#
# A setting that start-up refuses (PUID=0, a key sshd cannot use, ...) ends the container with start-up's
# own line, and compose's `restart: unless-stopped` would start it again every few seconds behind a
# `make up` that exited 0. Here that container is stopped, start-up's line is printed, and the exit status
# is 1, so `make build up` fails where the mistake is. A container still not healthy after SECONDS is a
# failure too, with its last lines. Exit status: 0 healthy, 1 failed or not healthy in time.
set -euo pipefail
container=$1
limit_s=${2:-300}
started=$SECONDS

say_why_and_stop() {
  local reason
  reason=$(docker logs --tail 200 "$container" 2>&1 | grep -E '^\[start\] ERROR' | tail -n 1 || true)
  docker stop --time 5 "$container" >/dev/null 2>&1 || true
  echo "make up: $1${reason:+: $reason}" >&2
  [[ -n $reason ]] || docker logs --tail 10 "$container" 2>&1 | sed 's/^/  /' >&2
  echo "make up: the container is stopped; fix .env (or what the line names) and run make up again" >&2
  exit 1
}

while ((SECONDS - started < limit_s)); do
  read -r status restarts health < <(docker inspect --format \
    '{{.State.Status}} {{.RestartCount}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$container")
  if [[ $health == healthy ]]; then
    echo "make up: the container is up and healthy (make logs shows JupyterLab's address)"
    exit 0
  fi
  if [[ $status == exited || $status == dead ]] || ((restarts > 0)); then
    say_why_and_stop "the container did not start"
  fi
  sleep 1
done
say_why_and_stop "the container is not healthy after ${limit_s} s"
