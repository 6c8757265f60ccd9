#!/usr/bin/env bash
# The end of `make up`: waits until the container is healthy, or has failed, and says which.
#
#   tools/wait_until_up.sh CONTAINER [SECONDS]     # Docker's engine; default 300 s, 0: no wait
#
# A setting that start-up refuses (PUID=0, a key sshd cannot use, ...) ends the container with start-up's
# own line, and compose's `restart: unless-stopped` would start it again every few seconds behind a
# `make up` that exited 0. Here such a container (one that exits, or restarts while this waits) is
# stopped, start-up's newest line is printed, and the exit status is 1, so `make build up` fails where the
# mistake is. A container that is only slow (the first start of a new PUID re-owns the cache volume) or
# unhealthy is left running: this says so in one line and exits 1. Exit status: 0 healthy, or running
# without a healthcheck; 1 otherwise.
set -euo pipefail
ids=$1
limit_s=${2:-300}
((limit_s > 0)) || exit 0
read -r -d '' -a containers <<<"$ids" || true  # one id a line, or none
if ((${#containers[@]} != 1)); then
  echo "make up: compose runs ${#containers[@]} containers of the service dev, not one: docker compose ps shows them" >&2
  exit 1
fi
container=${containers[0]}
state() {
  docker inspect --format \
    '{{.State.Status}} {{.RestartCount}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$container"
}
if ! initial=$(state 2>/dev/null); then
  echo "make up: the container $container is gone; docker compose ps --all shows what became of it" >&2
  exit 1
fi
read -r _ restarts_before _ <<<"$initial"

stop_and_say_why() {
  local reason
  docker stop --time 5 "$container" >/dev/null 2>&1 || true
  # The newest of start-up's lines. Not only the last start's: a start caught restarting has often not
  # written its line yet. Compose recreates the container when .env changes, so these are this setting's.
  reason=$(docker logs --tail 200 "$container" 2>&1 | grep -E '^\[start\] ERROR' | tail -n 1 || true)
  echo "make up: the container did not start${reason:+: $reason}" >&2
  [[ -n $reason ]] || docker logs --tail 10 "$container" 2>&1 | sed 's/^/  /' >&2
  echo "make up: the container is stopped; fix .env (or what the line names) and run make up again" >&2
  exit 1
}

started=$SECONDS
while ((SECONDS - started < limit_s)); do
  read -r status restarts health <<<"$(state)"
  case $status-$health in
    running-healthy | running-none) echo "make up: the container is up (make logs shows JupyterLab's address)"; exit 0 ;;
    running-unhealthy) break ;;
  esac
  if [[ $status == exited || $status == dead || $status == restarting ]] || ((restarts > restarts_before)); then
    stop_and_say_why
  fi
  sleep 1
done
probe=$(docker inspect --format '{{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}' "$container" |
  grep -v '^\s*$' | tail -n 1 || true)
echo "make up: the container is running but not healthy after $((SECONDS - started)) s${probe:+ (its healthcheck: $probe)};" \
     "it is left running: make logs shows why, or raise UP_WAIT_S for a slow first start" >&2
exit 1
