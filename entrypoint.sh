#!/usr/bin/env bash
# The container's entrypoint, run by tini (PID 1): the start-up steps, in order, then `exec` of the
# supervisor (/usr/local/lib/container/supervisor/supervisor.py), which runs the services or the command and stops
# the container on SIGTERM (docs/how-it-runs.md).
#   docker run IMAGE            -> start-up, then the services (SSH, JupyterLab), until SIGTERM
#   docker run IMAGE CMD ...    -> start-up, then CMD as the container user (like NGC's entrypoint)
# The image's CMD is `start-services`: the services, with any further arguments handed to JupyterLab.
# JupyterHub's DockerSpawner builds its command from the CMD and appends the hub's Spawner.args.
#
# Start-up is the core steps below, in a fixed order, then the user's hooks. The core steps live in
# /usr/local/lib/container/start, where no mount meant for hooks can hide them: mounting a folder over
# /etc/container/start.d adds hooks, it never removes the user switch, SSH or JupyterLab.
set -euo pipefail
# shellcheck source=docker/rootfs/usr/local/lib/container/log.sh
source /usr/local/lib/container/log.sh
for step_library in /usr/local/lib/container/start/*.sh; do
  # shellcheck source=/dev/null
  source "$step_library"
done

readonly USER_HOOKS_DIR=/etc/container/start.d
readonly SUPERVISOR=/usr/local/lib/container/supervisor/supervisor.py
readonly IMAGE_PYTHON_RECORD=/usr/local/lib/container/image-python  # written at build (Dockerfile)

# Start-up never ends without a line (the EXIT trap below). A setting of the user's ends in fatal's own
# line; a hook that fails or exits is named; anything else that set -e ended is a fault of the image, and
# its line names the command and where it failed, which is what a report of it needs.
FAILED_COMMAND="a step that set no status"  # the ERR trap names the command that failed
RUNNING_HOOK=""  # the user's hook being sourced (run_user_hooks)
# shellcheck disable=SC2329  # called by the EXIT trap
report_how_start_up_ended() {
  local status=$1
  ((FATAL_REPORTED)) && return
  if [[ -n $RUNNING_HOOK ]]; then
    if ((status == 0)); then
      printf '%s ERROR: start-up hook %s called exit, which ends start-up; make it return instead\n' \
        "$LOG_PREFIX" "$RUNNING_HOOK" >&2
      exit "$CONTAINER_EXIT_BAD_CONFIG"
    fi
    printf '%s ERROR: start-up hook %s failed (exit status %s); fix it or remove it from %s\n' \
      "$LOG_PREFIX" "$RUNNING_HOOK" "$status" "$USER_HOOKS_DIR" >&2
  elif ((status != 0)); then
    printf '%s ERROR: start-up failed (exit status %s) at %s; this is a fault of the image, not of your' \
      "$LOG_PREFIX" "$status" "$FAILED_COMMAND" >&2
    printf ' settings: report it with this line, and start with the last image tag that worked\n' >&2
  fi
}
set -o errtrace  # the ERR trap in every function of the steps, where the failures happen
trap 'FAILED_COMMAND="\`$BASH_COMMAND\` (${BASH_SOURCE[0]#/usr/local/lib/container/}, line $LINENO)"' ERR
trap 'report_how_start_up_ended $?' EXIT

# The entrypoint named again as the command (docker-stacks' tests and some platforms run
# `IMAGE /usr/local/bin/entrypoint.sh CMD`): it is already running, so its name is dropped, never run twice.
while [[ ${1-} == @(/usr/local/bin/entrypoint.sh|entrypoint.sh) ]]; do shift; done

# Everything the steps share is declared here, and only here.
JUPYTER_EXTRA_ARGS=()
# A hub that names its own command (DockerSpawner's cmd, z2jh's default) starts jupyterhub-singleuser
# with its arguments: that is the services with the hub's arguments, as `start-services ARGS` is.
if [[ ${1-} == start-services ]] ||
   [[ -n ${JUPYTERHUB_API_TOKEN:-} && ${1-} == @(jupyterhub-singleuser|*/jupyterhub-singleuser) ]]; then
  JUPYTER_EXTRA_ARGS=("${@:2}")
  set --
fi
if (($#)); then CONTAINER_MODE="command"; else CONTAINER_MODE="services"; fi
# A JupyterHub spawner hands its container an API token: the hub then authenticates, and SSH, which
# the hub knows nothing of, stays off unless asked for.
if [[ -n ${JUPYTERHUB_API_TOKEN:-} ]]; then SPAWNED_BY_JUPYTERHUB=1; else SPAWNED_BY_JUPYTERHUB=0; fi
ENABLE_SSH=$(read_switch ENABLE_SSH "$((SPAWNED_BY_JUPYTERHUB ? 0 : 1))") || exit_after_its_line
ENABLE_JUPYTER=$(read_switch ENABLE_JUPYTER 1) || exit_after_its_line
if [[ $CONTAINER_MODE == command ]]; then ENABLE_SSH=0 ENABLE_JUPYTER=0; fi
# The in-container GPU exporter (docs/monitoring.md) runs beside the services or beside a command: a
# Slurm or Kubernetes job that runs torchrun as its command is where it is needed most.
# shellcheck disable=SC2034  # written into the settings (start/mode.sh); the supervisor starts it
ENABLE_GPU_EXPORTER=$(read_switch ENABLE_GPU_EXPORTER 0) || exit_after_its_line
# Whether tini, our parent, is PID 1: else the container shares the host's PID namespace (Apptainer
# without --pid, docker run --pid=host), and the supervisor's stop signals only its descendants.
# shellcheck disable=SC2034  # written into the settings (start/mode.sh)
if ((PPID == 1)); then OWN_PID_NAMESPACE=1; else OWN_PID_NAMESPACE=0; fi
# Set by prepare_jupyter_auth only once it checked JUPYTER_AUTH=platform, never taken from outside:
# jupyter_server_config.py runs tokenless only with it (a command's `jupyter lab` gets no such checks).
unset JUPYTER_PLATFORM_AUTH_CHECKED
# shellcheck disable=SC2034  # set by set_up_container_user, read by the later steps
CONTAINER_UID="" CONTAINER_GID=""
# Where the user's work is kept: /workspace, or a platform's home volume (resolve_workspace,
# start/workspace.sh).
CONTAINER_WORKSPACE=/workspace
AS_USER=()   # the prefix that runs a command as the container user (set_up_container_user sets it)
# 1 where the user's work must run as the container's root (rootless Podman's default namespace, with
# the caller's folder at /workspace): set by set_up_container_user, which leaves AS_USER empty then.
WORK_RUNS_AS_CONTAINER_ROOT=0
# shellcheck disable=SC2034  # written into the settings (start/mode.sh)
JUPYTER_SERVER_COMMAND=(jupyter lab)   # prepare_jupyter_auth picks jupyterhub-singleuser under a hub
export CONTAINER_MODE

run_core_steps() {
  check_paths_start_up_writes
  check_settings
  run_ngc_start_scripts
  set_up_container_user
  resolve_workspace
  export CONTAINER_WORKSPACE  # JupyterLab's root (jupyter_server_config.py)
  if ((ENABLE_SSH)); then
    if ssh_can_run; then prepare_ssh; else ENABLE_SSH=0; fi
  fi
  if ((ENABLE_JUPYTER)); then
    prepare_jupyter_auth
    copy_sample_notebooks
  fi
}

# The user's hooks: every *.sh in USER_HOOKS_DIR, in name order, sourced as root after the core steps,
# so they see the container user and can export variables for the services and the command. A hook
# that fails, or calls `exit`, stops start-up with one line that names it.
run_user_hooks() {
  local hook
  for hook in "$USER_HOOKS_DIR"/*; do
    [[ -e $hook ]] || continue
    if [[ $hook != *.sh ]]; then
      log_warn "start-up hook $hook is ignored: only *.sh files run"
      continue
    fi
    log_info "running start-up hook $hook"
    # A global, not a local: when set -e ends the shell inside the hook, the trap runs after locals are gone.
    RUNNING_HOOK=$hook
    # shellcheck source=/dev/null
    source "$hook"
    RUNNING_HOOK=""
  done
}

# A restarted container keeps its files: what the last start recorded is stale until this one is done.
# The folder is writable by any uid (docker run --user runs start-up as that uid), so whatever a user left
# under these names (a folder, a link) goes too; no process of the user's runs yet to race it.
rm -rf -- "$STARTED_FILE" "$SERVICES_FILE" "$STOP_DIR" "$LOST_DIR" "$JUPYTER_URL_FILE" "$SETTINGS_FILE"
run_core_steps
run_user_hooks
# How this container runs, in one line (docs/how-it-runs.md has the table of what each part means).
resolve_what_the_line_says
log_info "$(describe_resolved_mode)"
if ((ENABLE_SSH)); then write_session_env; fi
if [[ $CONTAINER_MODE == command ]]; then
  # Root keeps root only by asking for it (docker exec --user root), never because a step went missing.
  ((EUID != 0 || ${#AS_USER[@]} || WORK_RUNS_AS_CONTAINER_ROOT)) ||
    fatal "internal: the container user was not set up; the command did not run"
else
  set -- "${JUPYTER_EXTRA_ARGS[@]}"
fi
# The stop's marker lives in a folder of the supervisor's own uid, where no other user can make one. Made
# after the core steps, which name the tmpfs a read-only root needs here.
mkdir -m 0755 "$STOP_DIR"
# Where work tells the stop what it lost (run_folder.py): any uid may add a file, only ours list them.
mkdir -m 1733 "$LOST_DIR"
write_resolved_settings "$SETTINGS_FILE"
# The supervisor (docs/how-it-runs.md) starts the services or the command, each in a session of its
# own, touches $STARTED_FILE, and stops the container on SIGTERM. The image's own Python, with the
# standard library only: no package of the user's can break it.
trap - EXIT ERR
exec "$(<"$IMAGE_PYTHON_RECORD")" -I -S "$SUPERVISOR" "$SETTINGS_FILE" -- "$@"
