# How the container stops (sourced by entrypoint.sh; defines functions only).
#
# `docker stop` sends SIGTERM to tini, which passes it to the entrypoint's process group only. Training
# started over SSH, in tmux, with `docker exec`, from a notebook, or as the container's command runs in
# sessions of its own and would be SIGKILLed at the end of the grace period without ever seeing the
# signal. So the entrypoint stops the container in three steps:
#   1. SIGTERM to the top process of each piece of the user's work: each process that a session holder
#      (sshd, a shell, tmux, JupyterLab, a notebook kernel, the entrypoint) or `docker exec` started. Not
#      to the session holders themselves: when one ends, the terminal it held sends SIGHUP to the jobs in
#      it, which would kill a trainer in the middle of its checkpoint. Not to the processes below the top
#      either: a trainer stops its own DataLoader workers, which die of a SIGTERM of their own and take
#      the step down with them. Two exceptions:
#      - torchrun's workers get the signal instead of torchrun, whose agent turns a SIGTERM of its own
#        into exit status 1 and a traceback even when every worker saved; seeing its workers finish, it
#        ends as a job that succeeded, with 0. The same holds for a torchrun below a wrapper (our
#        manifests' torchrun_node.py): the wrapper is left alone too. (A workaround of torch's agent:
#        docs/torch-workarounds.md, "torchrun exits 1 on SIGTERM", says when it can go.)
#      - a later stage of a pipeline typed at a shell (`torchrun ... | tee train.log`) is never signalled
#        before step 3: it ends by itself at the end of its input, once the trainer has written its last
#        lines, so the pipeline's status is the reader's 0. (The trainer outlives a reader that dies, but
#        the pipeline's status is the last stage's.) The shell gives the pipeline a process group led by
#        its first stage, so a later stage is a process whose group leader is a sibling of it. A script
#        without job control keeps one group for all its commands: there a `tee`, `cat` or `logger` in a
#        session holder's group counts as a later stage. (Reading /proc/PID/fd would be exact, but root
#        without CAP_SYS_PTRACE may not read another user's; README.md's "Connecting" (its Stopping
#        paragraph) says what to do for other readers.) No timer decides when a reader has drained: one
#        second was too short for `tee` on a busy machine, and the container then exited 143.
#   2. Wait for all of that work to exit, for at most STOP_TIMEOUT seconds (25: inside compose's 30 s).
#      Work that becomes a top meanwhile gets step 1 in its turn: a launcher that dies of its SIGTERM
#      without passing it on (`flock`, a sweep script's subprocess.run) leaves its trainer a top of its
#      own, and a shell's loop may start another. So a pass after which some of the work has exited
#      scans again (at most once a second), and the wait ends only when a scan finds no work left.
#   3. SIGTERM to everything left, services included.
# Without a PID namespace of its own (Apptainer's default, `docker run --pid=host`) every step looks only
# at the entrypoint's descendants: the host's other processes are never signalled.
#
# Thousands of processes (DataLoader workers, shells, tmux panes) and a full PID table (a fork bomb
# within pids_limit) must not delay step 1: the whole stop path runs on bash builtins alone and forks
# nothing. It reads /proc once per pass with `read` and `mapfile`, and waits with `read -t` on a FIFO
# that start-up made (prepare_stop_path) instead of forking `sleep`.

readonly DEFAULT_STOP_TIMEOUT_S=25
# Process names (the comm field of /proc/PID/stat) that hold sessions open; they are stopped last, in
# step 3. A notebook kernel is one too (a python process running ipykernel), found by its command line.
# A lookup table, not a regular expression: bash compiles a regex at every match, 5,000 times a scan.
# The Jupyter servers' names are cut to 15 bytes: jupyterhub-singleuser is "jupyterhub-sing".
declare -rA SESSION_HOLDERS=([tini]=1 [sshd]=1 [bash]=1 [sh]=1 [dash]=1 [zsh]=1 [fish]=1 ["tmux: server"]=1
  ["tmux: client"]=1 [screen]=1 [SCREEN]=1 [jupyter-lab]=1 [jupyterhub-sing]=1 [jupyter-server]=1
  [jupyter-noteboo]=1 [setpriv]=1 [sleep]=1)
# Processes with these names that share a session holder's process group are the later stages of a
# pipeline run without job control (`bash -c 'torchrun ... | tee train.log'`): see find_tops.
declare -rA PIPE_READERS=([tee]=1 [cat]=1 [logger]=1)
readonly KERNEL_COMMAND='ipykernel_launcher|-m ipykernel'
readonly TORCHRUN_COMMAND='(/torchrun|torch\.distributed\.run|torch/distributed/run\.py) '
# Only processes with these names can be a kernel or torchrun's agent (torch names it pt_elastic), so
# only their command lines are read during the scan.
readonly NAMES_WORTH_A_COMMAND_LINE='python*|pt_elastic|torchrun'
readonly STOP_POLL_S=0.2
# At most this many processes are named in a log line; the rest are counted.
readonly DESCRIBED_AT_MOST=8
STOP_WAIT_FIFO=/run/container/stop-wait

# What one pass over /proc found, keyed by PID.
declare -A PARENT=() GROUP=() COMMAND=() HOLDER=() NAMED_READER=()
LIVE=()    # every live process but PID 1 and the entrypoint
WORK=()    # LIVE without the session holders
TOPS=()    # what step 1 signals now
READERS=() # later pipeline stages, left to end at the end of their input
# The tops step 1 has seen, signalled or left to drain, so a later scan acts on new ones only: not on a
# torchrun whose workers it signalled, nor on a reader whose writers are gone.
declare -A HANDLED_TOPS=()

# Made at start-up, while forking is still certain to work.
prepare_stop_path() {
  [[ -p $STOP_WAIT_FIFO ]] || mkfifo -m 0600 "$STOP_WAIT_FIFO" 2>/dev/null ||
    log_warn "could not make $STOP_WAIT_FIFO: the stop path will fork sleep between its checks"
}

# Sleeps STOP_POLL_S without forking: nothing ever writes to the FIFO, so `read -t` times out.
pause_between_checks() {
  if [[ -p $STOP_WAIT_FIFO ]] && { exec {STOP_WAIT_FD}<>"$STOP_WAIT_FIFO"; } 2>/dev/null; then
    read -r -t "$STOP_POLL_S" -u "$STOP_WAIT_FD" _ || true
    exec {STOP_WAIT_FD}<&-
  else
    sleep "$STOP_POLL_S"
  fi
}

# Fills PARENT, GROUP, COMMAND, HOLDER, LIVE and WORK from /proc. /proc/PID/stat reads
# "PID (NAME) STATE PARENT GROUP ...", where NAME (15 bytes at most) may hold spaces and ") ": the fields
# start after the last ") " within the first PID+20 bytes. Patterns run on short slices of the line
# only: on the whole line bash's longest-match removal costs more than the read. A zombie has exited
# already (tini reaps it) and is left out.
scan_processes() {
  local entry pid stat head after name fields
  PARENT=() GROUP=() COMMAND=() HOLDER=() NAMED_READER=() LIVE=() WORK=()
  for entry in /proc/[0-9]*; do
    pid=${entry#/proc/}
    ((pid == 1 || pid == $$)) && continue
    { read -r stat <"$entry/stat"; } 2>/dev/null || continue
    head=${stat:0:${#pid}+20}
    after=${head##*) }
    # A kernel thread's name may be longer (kworker/u8:0-ext4-rsv-conversion): only the host's PID
    # namespace shows them, and only there is the whole line searched.
    if [[ $after == "$head" ]]; then head=$stat after=${stat##*) }; fi
    fields=${stat:${#head}-${#after}:24}
    [[ ${fields:0:1} == Z ]] && continue
    fields=${fields:2}
    PARENT[$pid]=${fields%% *}
    fields=${fields#* }
    GROUP[$pid]=${fields%% *}
    LIVE+=("$pid")
    name=${stat:${#pid}+2:${#head}-${#after}-${#pid}-4}
    if [[ -n ${SESSION_HOLDERS[$name]-} ]]; then
      HOLDER[$pid]=1
    elif [[ $name == @($NAMES_WORTH_A_COMMAND_LINE) ]] && read_command "$pid" &&
         [[ ${COMMAND[$pid]} =~ $KERNEL_COMMAND ]]; then
      HOLDER[$pid]=1
    else
      WORK+=("$pid")
      [[ -z ${PIPE_READERS[$name]-} ]] || NAMED_READER[$pid]=1
    fi
  done
  # OWN_PID_NAMESPACE: entrypoint.sh's, 0 where /proc shows the host's processes.
  ((OWN_PID_NAMESPACE)) || keep_descendants_only
}

# Without a PID namespace of its own the scan saw the host's processes, the user's other work among
# them: LIVE and WORK keep only the entrypoint's descendants, found by walking PARENT up to $$.
keep_descendants_only() {
  local pid up steps kept_live=() kept_work=()
  local -A INSIDE=()
  for pid in "${LIVE[@]}"; do
    up=${PARENT[$pid]} steps=0
    # Each step up is one level of the tree; a loop in a stale scan cannot hold it forever.
    while ((up > 1 && up != $$ && steps < 64)) && [[ -z ${INSIDE[$up]-} ]]; do
      up=${PARENT[$up]:-0} steps=$((steps + 1))
    done
    if ((up == $$)) || [[ -n ${INSIDE[$up]-} ]]; then
      INSIDE[$pid]=1
      kept_live+=("$pid")
    fi
  done
  for pid in "${WORK[@]}"; do
    [[ -z ${INSIDE[$pid]-} ]] || kept_work+=("$pid")
  done
  LIVE=("${kept_live[@]}") WORK=("${kept_work[@]}")
}

# Sets COMMAND[PID] to its command line, words joined by spaces; false when it is gone.
read_command() {
  local arguments=()
  { mapfile -d '' arguments <"/proc/$1/cmdline"; } 2>/dev/null || return 1
  COMMAND[$1]="${arguments[*]}"
}

# Sets TOPS and READERS for the WORK that scan_processes found: the processes whose parent is a session
# holder, but for torchrun its workers, and without the later stages of pipelines. Tops in HANDLED_TOPS
# are skipped, and each new one is added to it.
# torchrun may run under a wrapper (scripts/multinode/torchrun_node.py, as our manifests start it): a
# top with a torchrun agent below it is handled as that agent, whose workers get the signal; the
# wrapper and the agent are left to see them finish, and end with 0.
# (Inlined checks: a function call per process costs more than the whole test.)
find_tops() {
  local pid parent leader child workers up top steps
  local -A AGENTS_BELOW=() IS_TOP=()
  TOPS=() READERS=()
  for pid in "${WORK[@]}"; do
    # The parent holds sessions open, or is PID 1, the entrypoint, or outside the container (the parent
    # of `docker exec`), or gone.
    parent=${PARENT[$pid]}
    ((parent <= 1 || parent == $$)) || [[ -n ${HOLDER[$parent]-} || -z ${PARENT[$parent]-} ]] || continue
    IS_TOP[$pid]=1
  done
  # Each torchrun agent below a top (not the top itself), found by walking up from the agent.
  for pid in "${WORK[@]}"; do
    [[ -z ${IS_TOP[$pid]-} && ${COMMAND[$pid]-} =~ $TORCHRUN_COMMAND ]] || continue
    up=${PARENT[$pid]} steps=0
    while ((steps < 64)) && [[ -n ${PARENT[$up]-} && -z ${IS_TOP[$up]-} ]]; do
      up=${PARENT[$up]} steps=$((steps + 1))
    done
    [[ -z ${IS_TOP[$up]-} ]] || AGENTS_BELOW[$up]+=" $pid"
  done
  for pid in "${WORK[@]}"; do
    [[ -n ${IS_TOP[$pid]-} && -z ${HANDLED_TOPS[$pid]-} ]] || continue
    HANDLED_TOPS[$pid]=1
    parent=${PARENT[$pid]}
    leader=${GROUP[$pid]}
    # A later pipeline stage: its process group is led by a sibling that is not a session holder.
    if ((leader != pid)) && [[ -z ${HOLDER[$leader]-} && ${PARENT[$leader]-} == "$parent" ]]; then
      READERS+=("$pid")
      continue
    fi
    # The same without job control (`bash -c 'a | tee log'`): the stage shares the shell's group, so
    # only its name tells it.
    if ((leader != pid)) && [[ -n ${NAMED_READER[$pid]-} && -n ${HOLDER[$leader]-} ]]; then
      READERS+=("$pid")
      continue
    fi
    workers=()
    if [[ ${COMMAND[$pid]-} =~ $TORCHRUN_COMMAND ]]; then
      for child in "${WORK[@]}"; do
        ((PARENT[$child] == pid)) && workers+=("$child")
      done
    fi
    for top in ${AGENTS_BELOW[$pid]-}; do
      for child in "${WORK[@]}"; do
        ((PARENT[$child] == top)) && workers+=("$child")
      done
    done
    # A torchrun still in its rendezvous has no workers yet: it (or its wrapper) gets the signal itself.
    if ((${#workers[@]})); then TOPS+=("${workers[@]}"); else TOPS+=("$pid"); fi
  done
}

is_alive() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

# Sets DESCRIPTION to the first DESCRIBED_AT_MOST of the PIDs with their command lines.
describe_processes() {
  local pid shown=0
  DESCRIPTION=""
  for pid in "$@"; do
    if ((shown == DESCRIBED_AT_MOST)); then
      DESCRIPTION+="and $(($# - shown)) more"
      return
    fi
    [[ -n ${COMMAND[$pid]-} ]] || read_command "$pid" || true
    DESCRIPTION+="$pid(${COMMAND[$pid]:0:60}) "
    shown=$((shown + 1))
  done
}

# Waits until no work is alive, or TIMEOUT seconds; sets LEFT to the work still alive. Each pass looks
# only at what the last one found alive (is_alive inlined, as in find_tops); after a pass in which some
# of it exited, a new scan signals the new tops (step 2 above).
wait_for_work() {
  local timeout=$1 deadline pid stat alive scanned_at=-1
  deadline=$((SECONDS + timeout))
  LEFT=("${WORK[@]}")
  while :; do
    alive=()
    for pid in "${LEFT[@]}"; do
      { read -r stat <"/proc/$pid/stat"; } 2>/dev/null || continue
      stat=${stat##*) }
      [[ ${stat:0:1} == Z ]] && continue
      alive+=("$pid")
    done
    if ((SECONDS >= deadline)); then LEFT=("${alive[@]}") && return; fi
    if ((${#alive[@]} < ${#LEFT[@]} && SECONDS != scanned_at)) || ((${#alive[@]} == 0)); then
      scanned_at=$SECONDS
      signal_new_tops
      alive=("${WORK[@]}")
    fi
    LEFT=("${alive[@]}")
    ((${#LEFT[@]})) || return 0
    pause_between_checks
  done
}

# Step 1 again, for the tops a new scan finds that no earlier one did; WORK is what it found.
signal_new_tops() {
  scan_processes
  ((${#WORK[@]})) || return 0
  find_tops
  ((${#TOPS[@]})) || return 0
  describe_processes "${TOPS[@]}"
  log_info "stopping: SIGTERM to work whose launcher exited or that started since: $DESCRIPTION"
  kill -TERM -- "${TOPS[@]}" 2>/dev/null || true
}

# Steps 1 and 2. Sets WORK_ENDED_IN_TIME to 1 when all of the user's work exited within STOP_TIMEOUT.
stop_user_work() {
  local timeout=${STOP_TIMEOUT:-$DEFAULT_STOP_TIMEOUT_S}
  WORK_ENDED_IN_TIME=1
  scan_processes
  ((${#WORK[@]})) || return 0
  find_tops
  describe_processes "${TOPS[@]}" "${READERS[@]}"
  log_info "stopping: SIGTERM to your work first, waiting up to ${timeout} s for it: $DESCRIPTION"
  ((${#TOPS[@]} == 0)) || kill -TERM -- "${TOPS[@]}" 2>/dev/null || true
  wait_for_work "$timeout"
  if ((${#LEFT[@]})); then
    WORK_ENDED_IN_TIME=0
    describe_processes "${LEFT[@]}"
    log_warn "still running after ${timeout} s, stopped with the services now: $DESCRIPTION"
  else
    log_info "your processes have exited"
  fi
}

# Step 3: everything else, sshd and its sessions, tmux, shells, JupyterLab and its terminals.
stop_everything_left() {
  scan_processes
  ((${#LIVE[@]} == 0)) || kill -TERM -- "${LIVE[@]}" 2>/dev/null || true
}

# The log's last word on the stop: "stopped cleanly" only when the work ended within STOP_TIMEOUT.
report_stop() {
  if ((WORK_ENDED_IN_TIME)); then
    log_info "stopped cleanly"
  else
    log_warn "stopped, but not cleanly: your work did not end within STOP_TIMEOUT and got SIGTERM late"
  fi
}

stop_user_work_then_services() {
  stop_user_work
  stop_everything_left
  wait || true
  report_stop
}
