#!/usr/bin/env bash
# The container's entrypoint, run by tini (PID 1).
#   docker run IMAGE            -> start-up hooks, then the services (SSH, JupyterLab), until SIGTERM
#   docker run IMAGE CMD ...    -> start-up hooks, then CMD as the container user (like NGC's entrypoint)
# The hooks in /etc/container/start.d run in name order; drop a script there to extend start-up.
# 10-user.sh sets AS_USER, the prefix that runs a command as the container user.
set -euo pipefail
# shellcheck source=docker/rootfs/usr/local/lib/container/log.sh
source /usr/local/lib/container/log.sh

readonly START_HOOKS_DIR=/etc/container/start.d
readonly RUN_DIR=/run/container

if (($#)); then CONTAINER_MODE="command"; else CONTAINER_MODE="services"; fi
export CONTAINER_MODE

run_start_hooks() {
  local hook
  for hook in "$START_HOOKS_DIR"/*.sh; do
    [[ -e $hook ]] || continue
    # Sourced, not executed: hooks export what the services and the command need (HOME, tokens...).
    # shellcheck source=/dev/null
    source "$hook"
  done
}

start_services() {
  local started=()
  if ((ENABLE_SSH)); then
    /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config &
    started+=(ssh)
  fi
  if ((ENABLE_JUPYTER)); then
    (cd /workspace && exec "${AS_USER[@]}" jupyter lab) &
    started+=(jupyter)
  fi
  # The healthcheck reads which services to probe from here.
  printf '%s\n' "${started[@]}" >"$RUN_DIR/services"
  if ((${#started[@]} == 0)); then
    log_info "no service enabled and no command given: idling; use docker exec, or pass a command"
    sleep infinity &
  fi
  log_info "started: ${started[*]:-nothing}"
}

# SIGTERM (docker stop) reaches every process of the group through tini -g; wait for them to finish.
wait_for_services() {
  local stopping=0 status=0 pids
  trap 'stopping=1' TERM INT
  wait -n || status=$?
  if ((stopping)); then
    wait || true
    log_info "stopped cleanly"
    exit 0
  fi
  log_warn "a service exited on its own (status $status); stopping the others so the restart policy can act"
  mapfile -t pids < <(jobs -p)
  kill -TERM -- "${pids[@]}" 2>/dev/null || true
  wait || true
  exit "$((status == 0 ? 1 : status))"
}

# A restarted container keeps its files: what the last start recorded is stale until this one is done.
rm -f "$RUN_DIR/started" "$RUN_DIR/services"
run_start_hooks
# Start-up is done: from here on `docker exec` sees the final user, ids and files (tests wait for it).
touch "$RUN_DIR/started"
if [[ $CONTAINER_MODE == command ]]; then
  exec "${AS_USER[@]}" "$@"
fi
start_services
wait_for_services
