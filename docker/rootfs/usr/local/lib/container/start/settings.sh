# Core start-up step (sourced by entrypoint.sh; defines functions only): numeric settings that are read
# only later, when the container stops or the GPU exporter starts, are checked now, so a typo stops the
# container at once with one line instead of failing quietly at the worst moment.

# Compose gives the container 30 s (stop_grace_period) before it SIGKILLs everything.
readonly COMPOSE_GRACE_S=30
# How long the stop waits for the user's work (the supervisor's steps 1 and 2), inside those 30 s.
# shellcheck disable=SC2034  # written into the settings (start/mode.sh)
readonly DEFAULT_STOP_TIMEOUT_S=25
readonly SECONDS_PATTERN='^(0|[1-9][0-9]{0,4})$'

check_stop_timeout() {
  local value=${STOP_TIMEOUT:-}
  [[ -n $value ]] || return 0
  [[ $value =~ $SECONDS_PATTERN ]] ||
    fatal "STOP_TIMEOUT='$value' is not a number of seconds; set it to a whole number such as 25"
  if ((value == 0)); then
    log_warn "STOP_TIMEOUT=0 gives your work no time to save when the container stops: every stop with work" \
             "running ends 'not cleanly'; leave it unset (25 s) unless you mean that"
  elif ((value >= COMPOSE_GRACE_S)); then
    log_warn "STOP_TIMEOUT=$value is not below the engine's grace period (compose: 30 s, docker stop:" \
             "10 s): your work is SIGKILLed before it saves; raise stop_grace_period (docker stop -t) above" \
             "it too"
  fi
}

check_gpu_exporter_port() {
  local value=${GPU_EXPORTER_PORT:-}
  ((ENABLE_GPU_EXPORTER)) || return 0
  if [[ ! $value =~ ^[1-9][0-9]{0,4}$ ]] || ((value > 65535)); then
    fatal "GPU_EXPORTER_PORT='$value' is not a TCP port; set it to a number from 1 to 65535 (default 9400)"
  fi
}

# An IPv4 address, or an IPv6 one (hex groups and colons); the exporter's own check (ipaddress) is the
# exact one, this keeps a word or a host name from reaching it only to fail after start-up said "started".
check_gpu_exporter_address() {
  local value=${GPU_EXPORTER_ADDRESS:-} octet='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])'
  ((ENABLE_GPU_EXPORTER)) && [[ -n $value ]] || return 0
  [[ $value =~ ^($octet\.){3}$octet$ || ($value == *:* && $value =~ ^[0-9A-Fa-f:.]+$) ]] ||
    fatal "GPU_EXPORTER_ADDRESS='$value' is not an IP address; set it to one, such as 0.0.0.0 (every" \
          "interface, the default) or 127.0.0.1"
}

# Every service of the container listens on a port of its own: two on one port would leave the second
# failing to bind, blamed on its own configuration (JupyterLab's) or not at all (sshd's, while the
# container stays healthy). The image's own ports come first, so the line names the setting that moved.
check_ports_differ() {
  local -A service=([JUPYTER_CONTAINER_PORT]=JupyterLab [SSH_CONTAINER_PORT]=sshd
                    [GPU_EXPORTER_PORT]="the GPU exporter")
  local -A enabled=([JUPYTER_CONTAINER_PORT]=$ENABLE_JUPYTER [SSH_CONTAINER_PORT]=$ENABLE_SSH
                    [GPU_EXPORTER_PORT]=$ENABLE_GPU_EXPORTER)
  local -A taken_by=()
  local name port
  for name in JUPYTER_CONTAINER_PORT SSH_CONTAINER_PORT GPU_EXPORTER_PORT; do
    ((enabled[$name])) || continue
    port=${!name:-}
    [[ $port =~ ^[0-9]+$ ]] || continue  # GPU_EXPORTER_PORT is checked on its own; the image sets the others
    port=$((10#$port))                    # 08888 is 8888
    if [[ -v taken_by[$port] ]]; then
      fatal "$name=$port is ${service[${taken_by[$port]}]}'s port (${taken_by[$port]}); set $name to a" \
            "free port, or switch ${service[$name]} off"
    fi
    taken_by[$port]=$name
  done
}

check_settings() {
  check_stop_timeout
  check_gpu_exporter_port
  check_gpu_exporter_address
  check_ports_differ
}
