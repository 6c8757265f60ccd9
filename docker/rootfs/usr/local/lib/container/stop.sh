# How the container stops (sourced by entrypoint.sh; defines functions only).
#
# `docker stop` sends SIGTERM to tini, which passes it to the entrypoint's process group only. Training
# started over SSH, in tmux, with `docker exec` or from a notebook runs in sessions of its own and would
# be SIGKILLed at the end of the grace period without ever seeing the signal. So the entrypoint stops the
# container in three steps:
#   1. SIGTERM to the top process of each piece of the user's work: each process that a session holder
#      (sshd, a shell, tmux, JupyterLab, a notebook kernel) or `docker exec` started. Not to the session
#      holders themselves: when one ends, the terminal it held sends SIGHUP to the jobs in it, which
#      would kill a trainer in the middle of its checkpoint. Not to the processes below the top either:
#      a trainer stops its own DataLoader workers, which die of a SIGTERM of their own and take the
#      step down with them. One exception: torchrun's workers get the signal instead of torchrun,
#      whose agent turns a SIGTERM of its own into exit status 1 and a traceback even when every
#      worker saved; seeing its workers finish, it ends as a job that succeeded, with 0. (A workaround
#      of torch's agent: docs/torch-workarounds.md, "torchrun exits 1 on SIGTERM", says when it can go.)
#   2. Wait for all of that work to exit, for at most STOP_TIMEOUT seconds (25: inside compose's 30 s).
#   3. SIGTERM to everything left, services included, and exit 0.

readonly DEFAULT_STOP_TIMEOUT_S=25
# Process names (/proc/PID/comm) that hold sessions open; they are stopped last, in step 3. A notebook
# kernel is one too (a python process running ipykernel), found by its command line.
readonly SESSION_HOLDERS='^(tini|sshd|bash|sh|dash|zsh|fish|tmux: server|tmux: client|screen|SCREEN|jupyter-lab|setpriv|sleep)$'
readonly KERNEL_COMMAND='ipykernel_launcher|-m ipykernel'

# The state letter of a process (R, S, Z...), or nothing once it is gone. The name in /proc/PID/stat is
# in parentheses and may hold spaces ("tmux: server"), so the state is read after the last ") ".
process_state() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

is_alive() {
  local state
  state=$(process_state "$1")
  # A zombie has exited already; tini reaps it.
  [[ -n $state && $state != Z ]]
}

# PIDs of every live process of the container but PID 1, this shell and its subshells.
other_processes() {
  local entry pid
  for entry in /proc/[0-9]*; do
    pid=${entry#/proc/}
    ((pid == 1 || pid == $$ || pid == BASHPID)) && continue
    is_alive "$pid" && echo "$pid"
  done
}

parent_of() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
  stat=${stat##*) }
  stat=${stat#* }
  echo "${stat%% *}"
}

# Whether PID holds sessions open (or is PID 1, or outside the container: the parent of `docker exec`).
is_session_holder() {
  local pid=$1 name
  ((pid <= 1 || pid == $$)) && return 0
  read -r name 2>/dev/null <"/proc/$pid/comm" || return 0
  [[ $name =~ $SESSION_HOLDERS ]] && return 0
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) =~ $KERNEL_COMMAND ]]
}

# Every process of the user's work: all but the session holders and the entrypoint's own.
user_work_processes() {
  local pid
  for pid in $(other_processes); do
    is_session_holder "$pid" || echo "$pid"
  done
}

is_torchrun_agent() {
  [[ $(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) =~ (/torchrun|torch\.distributed\.run|torch/distributed/run\.py)\  ]]
}

# What to signal for the work in $@: the processes whose parent is a session holder, but for torchrun
# its workers (the processes in $@ whose parent it is).
tops_of() {
  local pid child workers
  for pid in "$@"; do
    is_session_holder "$(parent_of "$pid")" || continue
    workers=()
    if is_torchrun_agent "$pid"; then
      for child in "$@"; do
        [[ $(parent_of "$child") == "$pid" ]] && workers+=("$child")
      done
    fi
    # A torchrun still in its rendezvous has no workers yet: it gets the signal itself.
    if ((${#workers[@]})); then printf '%s\n' "${workers[@]}"; else echo "$pid"; fi
  done
}

describe_processes() {
  local pid
  for pid in "$@"; do
    [[ -r /proc/$pid/cmdline ]] && printf '%s(%s) ' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-60)"
  done
}

# Waits until none of the PIDs is alive, or TIMEOUT seconds; prints the ones still alive.
wait_for_exit_of() {
  local timeout=$1 deadline pid alive
  shift
  deadline=$((SECONDS + timeout))
  while :; do
    alive=()
    for pid in "$@"; do
      is_alive "$pid" && alive+=("$pid")
    done
    if ((${#alive[@]} == 0 || SECONDS >= deadline)); then break; fi
    sleep 0.2
  done
  echo "${alive[@]}"
}

stop_user_work_then_services() {
  local timeout=${STOP_TIMEOUT:-$DEFAULT_STOP_TIMEOUT_S} work tops left
  [[ $timeout =~ ^[0-9]+$ ]] || timeout=$DEFAULT_STOP_TIMEOUT_S
  mapfile -t work < <(user_work_processes)
  if ((${#work[@]})); then
    mapfile -t tops < <(tops_of "${work[@]}")
    log_info "stopping: SIGTERM to your work first, waiting up to ${timeout} s for it: $(describe_processes "${tops[@]}")"
    kill -TERM -- "${tops[@]}" 2>/dev/null || true
    left=$(wait_for_exit_of "$timeout" "${work[@]}")
    if [[ -n $left ]]; then
      # shellcheck disable=SC2086  # one PID a word
      log_warn "still running after ${timeout} s, stopped with the services now: $(describe_processes $left)"
    else
      log_info "your processes have exited"
    fi
  fi
  # Everything else: sshd and its sessions, tmux, shells, JupyterLab and its terminals.
  mapfile -t left < <(other_processes)
  ((${#left[@]} == 0)) || kill -TERM -- "${left[@]}" 2>/dev/null || true
  wait || true
  log_info "stopped cleanly"
}
