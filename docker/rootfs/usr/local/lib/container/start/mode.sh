# Core start-up step (sourced by entrypoint.sh; defines functions only): one line that says how this
# container runs, once start-up has decided it all. docs/how-it-runs.md has the table of these settings;
# tests/unit/test_resolved_mode.py holds the table and this line together.
# shellcheck disable=SC2034  # the RESOLVED_* and the others below are read by describe_resolved_mode

on_off() { if (($1)); then printf on; else printf off; fi; }

root_is_read_only() {
  local _device mountpoint _type options root_options=""
  while read -r _device mountpoint _type options _; do
    [[ $mountpoint == / ]] && root_options=$options
  done </proc/self/mounts
  [[ ,$root_options, == *,ro,* ]]
}

# Sets what the line says that no step set in a variable of its own.
resolve_what_the_line_says() {
  # Who lets JupyterLab's users in: hub, platform, password or token; none without JupyterLab.
  if ((!ENABLE_JUPYTER)); then RESOLVED_AUTH=none
  elif [[ ${JUPYTER_AUTH:-token} == token && -n ${JUPYTER_PASSWORD_HASH:-} ]]; then RESOLVED_AUTH=password
  else RESOLVED_AUTH=${JUPYTER_AUTH:-token}
  fi
  RESOLVED_USER_NAME=$(id -un "$CONTAINER_UID" 2>/dev/null) || RESOLVED_USER_NAME=uid
  if ((EUID == 0)); then STARTED_AS_ROOT=1; else STARTED_AS_ROOT=0; fi
  if [[ $CONTAINER_MODE == command && -t 0 ]]; then AT_A_TERMINAL=1; else AT_A_TERMINAL=0; fi
  if root_is_read_only; then READ_ONLY_ROOT=1; else READ_ONLY_ROOT=0; fi
}

# For example: services; dev 1000:1000 from root; auth token; ssh on; jupyter on; gpu exporter off;
# own pid namespace; writable root
describe_resolved_mode() {
  local mode=$CONTAINER_MODE user="$RESOLVED_USER_NAME $CONTAINER_UID:$CONTAINER_GID" pid_namespace=own root=writable
  ((SPAWNED_BY_JUPYTERHUB)) && mode+=" for a hub"
  ((AT_A_TERMINAL)) && mode+=" at a terminal"
  if ((WORK_RUNS_AS_CONTAINER_ROOT)); then user+=" for the rootless caller"
  elif ((STARTED_AS_ROOT)); then user+=" from root"
  else user+=" as --user"
  fi
  ((OWN_PID_NAMESPACE)) || pid_namespace="host's"
  ((READ_ONLY_ROOT)) && root=read-only
  printf '%s; %s; auth %s; ssh %s; jupyter %s; gpu exporter %s; %s pid namespace; %s root\n' \
    "$mode" "$user" "$RESOLVED_AUTH" "$(on_off "$ENABLE_SSH")" "$(on_off "$ENABLE_JUPYTER")" \
    "$(on_off "$ENABLE_GPU_EXPORTER")" "$pid_namespace" "$root"
}
