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

# Who lets JupyterLab's users in: hub, platform, password or token; none without JupyterLab. The same
# rule as jupyter_server_config.py's: platform only where start/jupyter.sh checked it, so a hook that
# sets JUPYTER_AUTH=platform afterwards gets a token, and the line says so.
resolved_auth() {
  local auth=${JUPYTER_AUTH:-token}
  # The mark is start-up's own (entrypoint.sh unsets it first), not a setting: no ${...:-} default.
  if [[ $auth == platform ]] &&
    ! [[ -v JUPYTER_PLATFORM_AUTH_CHECKED && $JUPYTER_PLATFORM_AUTH_CHECKED == 1 ]]; then
    auth=token
  fi
  if ((!ENABLE_JUPYTER)); then echo none
  elif [[ $auth == token && -n ${JUPYTER_PASSWORD_HASH:-} ]]; then echo password
  else echo "$auth"
  fi
}

# Sets what the line says that no step set in a variable of its own.
resolve_what_the_line_says() {
  RESOLVED_AUTH=$(resolved_auth)
  RESOLVED_USER_NAME=$(id -un "$CONTAINER_UID" 2>/dev/null) || RESOLVED_USER_NAME=uid
  if ((EUID == 0)); then STARTED_AS_ROOT=1; else STARTED_AS_ROOT=0; fi
  if [[ $CONTAINER_MODE == command && -t 0 ]]; then AT_A_TERMINAL=1; else AT_A_TERMINAL=0; fi
  if root_is_read_only; then READ_ONLY_ROOT=1; else READ_ONLY_ROOT=0; fi
}

# For example: services; dev 1000:1000 from root; auth token; ssh on; jupyter on; gpu exporter off;
# own pid namespace; writable root
describe_resolved_mode() {
  local mode=$CONTAINER_MODE user="$RESOLVED_USER_NAME $CONTAINER_UID:$CONTAINER_GID"
  local pid_namespace=own root=writable
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

# Start-up's values are words, ids, ports and paths, checked before they get here: only a backslash,
# a quote, a tab or a newline needs escaping, and other control characters are dropped.
json_string() {
  local value=$1
  value=${value//\\/\\\\} value=${value//\"/\\\"} value=${value//$'\t'/\\t} value=${value//$'\n'/\\n}
  printf '"%s"' "${value//[[:cntrl:]]/}"
}

json_list() {
  local word separator=""
  printf '['
  for word in "$@"; do printf '%s%s' "$separator" "$(json_string "$word")"; separator=", "; done
  printf ']'
}

json_bool() { if (($1)); then printf true; else printf false; fi; }

# What the supervisor needs to run the container, and what the line above says, as JSON in $1: written
# once, here, so nothing later decides it again.
write_resolved_settings() {
  local ssh_command=() exporter_command=() stop_timeout=${STOP_TIMEOUT:-$DEFAULT_STOP_TIMEOUT_S}
  # check_settings read it before the hooks ran, and a hook may have set it since.
  [[ $stop_timeout =~ $SECONDS_PATTERN ]] ||
    fatal "STOP_TIMEOUT='$stop_timeout' (set by a start-up hook) is not a number of seconds; set it to a" \
          "whole number such as 25"
  ((ENABLE_SSH)) && ssh_command=(/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config -p "$SSH_CONTAINER_PORT")
  ((ENABLE_GPU_EXPORTER)) &&
    exporter_command=(python3 /opt/scripts/gpu_exporter.py --port "$GPU_EXPORTER_PORT"
                      --address "${GPU_EXPORTER_ADDRESS:-0.0.0.0}")
  cat >"$1" <<JSON
{
  "mode": $(json_string "$CONTAINER_MODE"),
  "at_a_terminal": $(json_bool "$AT_A_TERMINAL"),
  "spawned_by_hub": $(json_bool "$SPAWNED_BY_JUPYTERHUB"),
  "user": {"name": $(json_string "$RESOLVED_USER_NAME"), "uid": $CONTAINER_UID, "gid": $CONTAINER_GID},
  "as_user": $(json_list "${AS_USER[@]}"),
  "workspace": $(json_string "$CONTAINER_WORKSPACE"),
  "auth": $(json_string "$RESOLVED_AUTH"),
  "ssh": $(json_bool "$ENABLE_SSH"),
  "ssh_command": $(json_list "${ssh_command[@]}"),
  "jupyter": $(json_bool "$ENABLE_JUPYTER"),
  "jupyter_command": $(json_list "${JUPYTER_SERVER_COMMAND[@]}"),
  "gpu_exporter_command": $(json_list "${exporter_command[@]}"),
  "gpu_exporter_port": $(json_string "${GPU_EXPORTER_PORT:-}"),
  "own_pid_namespace": $(json_bool "$OWN_PID_NAMESPACE"),
  "read_only_root": $(json_bool "$READ_ONLY_ROOT"),
  "stop_timeout_s": $stop_timeout,
  "limit_checks": $(json_string "$(limit_checks_that_matter_here)")
}
JSON
}
