#!/usr/bin/env bash
# Tells the JupyterHub that spawned this container that its user's work is running, so the hub's idle
# culler leaves the server alone while a trainer runs in a terminal, in tmux or from `docker exec` with
# no browser tab open (jupyterhub-singleuser reports only what JupyterLab itself sees).
# Started by start/jupyter.sh under a hub, as the container user, with `bash` as its name: the stop
# path counts a bash as a session holder, never as the user's work.
#
# "User work" is the stop path's (stop.sh, scan_processes): every process but the session holders
# (shells, tmux, sshd, the Jupyter servers, notebook kernels). Work counts only once the same process is
# seen at two scans in a row, so a healthcheck or a `docker exec ls` does not keep a server alive.
# Every JUPYTERHUB_ACTIVITY_INTERVAL seconds (the variable jupyterhub-singleuser reads too) it posts
# now as the server's last activity, to the hub's activity API, with the server's own token.
set -uo pipefail
# shellcheck source=docker/rootfs/usr/local/lib/container/log.sh
source /usr/local/lib/container/log.sh
# shellcheck source=docker/rootfs/usr/local/lib/container/stop.sh
source /usr/local/lib/container/stop.sh

# DockerSpawner's containers have a PID namespace of their own: the scan sees the container only.
OWN_PID_NAMESPACE=1
# The entrypoint, whose PID start/jupyter.sh passes as $1, waits for the services: it is not work.
readonly ENTRYPOINT_PID=$1
readonly INTERVAL_S=${JUPYTERHUB_ACTIVITY_INTERVAL:-300}
readonly ACTIVITY_URL="${JUPYTERHUB_API_URL}/users/${JUPYTERHUB_USER}/activity"

post_activity() {
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)
  curl --silent --fail --max-time 30 --output /dev/null \
    --header "Authorization: token ${JUPYTERHUB_API_TOKEN}" --header "Content-Type: application/json" \
    --data "{\"last_activity\": \"$now\", \"servers\": {\"${JUPYTERHUB_SERVER_NAME:-}\": {\"last_activity\": \"$now\"}}}" \
    "$ACTIVITY_URL"
}

report_while_work_runs() {
  local pid running
  local -A seen_before=() seen_now=()
  while :; do
    scan_processes
    seen_now=() running=0
    for pid in "${WORK[@]}"; do
      [[ $pid != "$ENTRYPOINT_PID" ]] || continue
      seen_now[$pid]=1
      [[ -z ${seen_before[$pid]-} ]] || running=1
    done
    if ((running)) && ! post_activity; then
      log_warn "could not tell the hub that your work runs (${ACTIVITY_URL}); its idle culler may stop this server"
    fi
    seen_before=()
    for pid in "${!seen_now[@]}"; do seen_before[$pid]=1; done
    sleep "$INTERVAL_S"
  done
}

report_while_work_runs
