# Core start-up step (sourced by entrypoint.sh; defines functions only): who the container user is.
# CONTAINER_UID/GID, AS_USER, WORK_RUNS_AS_CONTAINER_ROOT: declared here, read by entrypoint.sh.
# shellcheck disable=SC2034
# Started as root (the default): PUID/PGID remap the user so files in bind mounts carry the host's ids.
# Started with `docker run --user UID:GID`: that uid gets a passwd entry and a HOME through nss_wrapper,
# because tools such as torch.compile (getpass) and ssh-keygen fail for a uid the system does not know.

readonly MAX_ID=2147483647       # the largest id every tool (usermod, tar, NFS) handles
readonly FIRST_REGULAR_ID=1000  # ids below are the system's own accounts and groups
readonly OVERFLOW_ID=65534       # nobody/nogroup: a system account above them, shared by unmapped NFS files

# PUID/PGID: a plain decimal number from 1 to MAX_ID (no sign, no leading zero: bash would read 08 as
# octal, and usermod rejects what does not fit).
validate_numeric_id() {
  local name=$1 value=${!1:-} hint=$2
  [[ -z $value ]] && return 0
  [[ $value =~ ^[0-9]+$ ]] || fatal "$name='$value' is not a numeric id; set it to the output of \`$hint\`" \
                                    "on the host"
  [[ $value != 0 ]] || fatal "$name=0 would give the container user root's id; set it to a non-root id" \
                             "(\`$hint\` on the host)"
  if [[ ! $value =~ ^[1-9][0-9]{0,9}$ ]] || ((value > MAX_ID)); then
    fatal "$name='$value' is not an id from 1 to $MAX_ID without leading zeros; set it to the output of" \
          "\`$hint\` on the host"
  fi
}

# An id below FIRST_REGULAR_ID, or nobody's, that names an account or group of the image hands the
# container user its rights (group shadow reads /etc/shadow, group sudo may administer, nobody owns what
# NFS cannot map): allowed, since the host may really use it, but said.
warn_if_system_id() {
  local name=$1 database=$2 value=${!1:-} owner
  [[ -n $value ]] && ((value < FIRST_REGULAR_ID || value == OVERFLOW_ID)) || return 0
  owner=$(entry_field "$database" "$value" 1)
  [[ -n $owner && $owner != "$CONTAINER_USER" ]] || return 0
  log_warn "$name=$value is the image's own $( [[ $database == passwd ]] && echo user || echo group )" \
           "'$owner': the container user shares its rights; use your own id on the host (id -u / id -g)" \
           "unless you mean it"
}

# Field $3 of the passwd or group entry with id $2, or nothing where the image has no such id. getent's
# exit 2 for an unknown id is an answer, not a failure: a Mac's uid 501 and gid 20 name no account here.
entry_field() {
  local entry
  entry=$(getent "$1" "$2") || return 0
  cut -d: -f"$3" <<<"$entry"
}

# When PUID/PGID also belong to an account of the base (Debian's sshd is 100), lookups by id must
# still name our user (id -un, docker exec -u, HOME): its entry moves up to right after root's.
list_user_first_for_its_ids() {
  local database entry
  for database in /etc/passwd /etc/group; do
    entry=$(grep "^$CONTAINER_USER:" "$database")
    { head -n 1 "$database"; printf '%s\n' "$entry"; tail -n +2 "$database" | grep -v "^$CONTAINER_USER:"; } \
      >"$database.new"
    chmod --reference="$database" "$database.new"
    # Renamed into place in one step: a `docker exec --user dev` at this moment (the Dev Containers CLI
    # starts its shell server while start-up runs) must never read a file cut short. A database that is
    # a bind mount (it cannot be renamed over) is rewritten in place, as before.
    mv -f "$database.new" "$database" 2>/dev/null ||
      { cat "$database.new" >"$database" && rm "$database.new"; }
  done
}

remap_user_ids() {
  local current_uid current_gid
  current_uid=$(id -u "$CONTAINER_USER")
  current_gid=$(id -g "$CONTAINER_USER")
  if [[ -n ${PGID:-} && $PGID != "$current_gid" ]]; then
    # -o: the id may already belong to a group of the base image; sharing it is what the host does.
    groupmod --non-unique --gid "$PGID" "$CONTAINER_USER"
  fi
  if [[ -n ${PUID:-} && $PUID != "$current_uid" ]]; then
    usermod --non-unique --uid "$PUID" "$CONTAINER_USER"
  fi
  if [[ ${PUID:-$current_uid} != "$current_uid" || ${PGID:-$current_gid} != "$current_gid" ]]; then
    list_user_first_for_its_ids
    log_info "container user $CONTAINER_USER now has uid:gid" \
             "$(id -u "$CONTAINER_USER"):$(id -g "$CONTAINER_USER")"
    # The home, and the cache volume mounted in it, still carry the old ids.
    # -h with -R's default -P: links are re-owned themselves, never followed to what they point at.
    chown -R -h "$(id -u "$CONTAINER_USER"):$(id -g "$CONTAINER_USER")" "/home/$CONTAINER_USER"
  fi
  if workspace_is_unclaimed "$current_uid"; then
    chown "$(id -u "$CONTAINER_USER"):$(id -g "$CONTAINER_USER")" /workspace 2>/dev/null || true
  fi
}

# Whether /workspace is safe to give to the container user: empty, and either the image's own (a new
# named volume is a copy of it; $1 is its uid) or root's where root is the host's root (Docker made the
# folder for a bind mount). Anything else belongs to someone on the host; under rootless Podman the host
# user shows up as root here, and re-owning their folder would lock them out of it.
workspace_is_unclaimed() {
  local image_uid=$1 owner
  # One entry is enough to know: a large workspace is not listed.
  [[ -z $(find /workspace -mindepth 1 -maxdepth 1 -print -quit) ]] || return 1
  owner=$(stat -c %u /workspace)
  [[ $owner == "$image_uid" ]] && return 0
  # Root's own only without a user namespace: uid 0 maps to uid 0 for the whole id range.
  [[ $owner == 0 && $(awk '{print $1, $2, $3}' /proc/self/uid_map) == "0 0 4294967295" ]]
}

# Rootless Podman's (and rootless Docker's) default user namespace: the container's root is the one host
# user who started it (uid 0 maps to a single host uid other than 0), and a folder of theirs mounted at
# /workspace shows up as root's. dev is a subordinate uid there and cannot write it; root can, and what
# root writes is the host user's. (keep-id maps uid 0 elsewhere; Kubernetes' user namespaces map a range.)
workspace_is_the_rootless_callers() {
  mountpoint -q /workspace && [[ $(stat -c %u /workspace) == 0 ]] &&
    awk '$1 == 0 && $2 != 0 && $3 == 1 {found = 1} END {exit !found}' /proc/self/uid_map
}

# In that namespace the user's work (the command, JupyterLab with its kernels and terminals) runs as the
# container's root, as jupyter/docker-stacks does there; sshd still logs people in as dev only.
run_work_as_the_rootless_caller() {
  WORK_RUNS_AS_CONTAINER_ROOT=1
  log_info "rootless Podman without --userns=keep-id: /workspace is your folder, root's in here, so your" \
           "command and JupyterLab run as the container's root, which is you on the host: their files" \
           "stay yours"
  ((ENABLE_SSH)) || return 0
  log_warn "SSH logs in as $CONTAINER_USER, who cannot write your /workspace in this mode; to work over SSH" \
           "start with --userns=keep-id:uid=1000,gid=1000 --user root (make up does)"
}

warn_if_workspace_not_writable() {
  "${AS_USER[@]}" test -w /workspace && return 0
  if ! mountpoint -q /workspace && findmnt -n -o OPTIONS --target /workspace | grep -qw ro; then
    log_warn "/workspace is the image's own, on a read-only root; mount a folder or volume there" \
             "(-v DIR:/workspace, a Kubernetes volume)"
    return 0
  fi
  if ! mountpoint -q /workspace; then
    log_warn "/workspace (the image's own, owner $(stat -c %u:%g /workspace)) is not writable for uid" \
             "$CONTAINER_UID:$CONTAINER_GID; mount a folder of that uid there (-v DIR:/workspace), or run" \
             "as the image's user (--user 1000) or in group 0 (--user UID:0)"
    return 0
  fi
  log_warn "/workspace (owner $(stat -c %u:%g /workspace)) is not writable for the container user" \
           "($CONTAINER_UID:$CONTAINER_GID); give the mounted folder to that user (chown on the host), or" \
           "set PUID/PGID (or --user) to its owner's ids; under rootless Podman, add --userns=keep-id"
}

# The home of a start that has no writable one: /tmp/home-UID, made as UID's. /tmp is everyone's, so a
# folder of that name that someone else made first, or a link planted there, is refused, never used.
claim_fallback_home() {
  local home=/tmp/home-$1
  "${AS_USER[@]}" mkdir -p -m 0700 "$home" 2>/dev/null
  "${AS_USER[@]}" test -d "$home" && ! "${AS_USER[@]}" test -L "$home" && "${AS_USER[@]}" test -O "$home"
}

# HOME must be writable (JupyterLab, pip and torch.compile write there); the image's may not be, under
# a read-only root or for a uid that owns nothing: then a home of this start's own, in /tmp.
ensure_writable_home() {
  "${AS_USER[@]}" test -w "$HOME" && return 0
  local fallback=/tmp/home-$CONTAINER_UID
  if ! claim_fallback_home "$CONTAINER_UID"; then
    fatal "HOME=$HOME is not writable for uid $CONTAINER_UID, nor is $fallback; mount a writable folder at" \
          "$HOME (Kubernetes: an emptyDir), or add --tmpfs /tmp"
  fi
  log_warn "HOME=$HOME is not writable for uid $CONTAINER_UID: using $fallback, lost with the container;" \
           "mount a volume at $HOME to keep it"
  HOME=$fallback
}

give_unknown_uid_a_passwd_entry() {
  local uid gid home library
  uid=$(id -u) gid=$(id -g)
  getent passwd "$uid" >/dev/null && return 0
  library=$(compgen -G '/usr/lib/*/libnss_wrapper.so' | head -n 1) ||
    fatal "uid $uid has no passwd entry and libnss_wrapper is missing from the image; rebuild it"
  home=/home/$CONTAINER_USER
  if [[ ! -w $home ]]; then
    home=/tmp/home-$uid
    claim_fallback_home "$uid" ||
      fatal "$home is not a folder of uid $uid, and /home/$CONTAINER_USER is not writable; mount a writable" \
            "folder at /home/$CONTAINER_USER, or remove $home"
  fi
  NSS_WRAPPER_PASSWD=$(mktemp) NSS_WRAPPER_GROUP=$(mktemp)
  grep -v "^$CONTAINER_USER:" /etc/passwd >"$NSS_WRAPPER_PASSWD"
  echo "$CONTAINER_USER:x:$uid:$gid:container user:$home:/bin/bash" >>"$NSS_WRAPPER_PASSWD"
  cp /etc/group "$NSS_WRAPPER_GROUP"
  getent group "$gid" >/dev/null || echo "$CONTAINER_USER:x:$gid:" >>"$NSS_WRAPPER_GROUP"
  export LD_PRELOAD=$library NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
  log_info "uid $uid is not in /etc/passwd: running as $CONTAINER_USER ($uid:$gid), whose passwd home is" \
           "$home"
}

# The runtime may give the container's processes groups of their own: Kubernetes' fsGroup (which owns the
# pod's volumes: Kubeflow's notebook form sets 100) and supplementalGroups, docker run --group-add. Root
# has them here; dropping to the user by /etc/group alone would lose them, and with them the right to
# write those volumes. So the user keeps them: in /etc/group too where it can be written, for SSH logins
# and docker exec. Group 0 stays root's (OpenShift's arbitrary uids get it by their own start).
RUNTIME_GROUPS=()
join_the_runtimes_groups() {
  local gid name users_own
  users_own=" $(id -G "$CONTAINER_USER") "
  for gid in $(id -G); do
    if ((gid == 0)) || [[ $users_own == *" $gid "* ]]; then continue; fi
    RUNTIME_GROUPS+=("$gid")
    name=$(entry_field group "$gid" 1)
    if [[ -z $name ]]; then
      name=runtime-$gid
      groupadd --gid "$gid" "$name" 2>/dev/null || continue
    fi
    usermod --append --groups "$name" "$CONTAINER_USER" 2>/dev/null || true
  done
  ((${#RUNTIME_GROUPS[@]} == 0)) ||
    log_info "container user $CONTAINER_USER keeps the groups the runtime gave the container:" \
             "${RUNTIME_GROUPS[*]}"
}

# The user's groups, comma-separated, for setpriv: /etc/group's, and the runtime's even where /etc/group
# could not be written (a read-only root).
groups_of_the_user() {
  local groups=()
  read -ra groups <<<"$(id -G "$CONTAINER_USER")"
  printf '%s\n' "${groups[@]}" "${RUNTIME_GROUPS[@]}" | sort -un | paste -sd, -
}

# Maps or names the container user, then sets what the entrypoint declared: CONTAINER_UID, CONTAINER_GID,
# HOME/USER/LOGNAME, and AS_USER, the prefix that runs a command as that user.
set_up_container_user() {
  validate_numeric_id PUID "id -u"
  validate_numeric_id PGID "id -g"
  if ((EUID == 0)); then
    warn_if_system_id PUID passwd
    warn_if_system_id PGID group
    remap_user_ids
    join_the_runtimes_groups
  else
    [[ -z ${PUID:-}${PGID:-} ]] ||
      log_warn "PUID/PGID are ignored: the container was started as uid $(id -u) (--user); drop --user to" \
               "use them"
    give_unknown_uid_a_passwd_entry
  fi
  # Started as another uid (--user), that uid is the container user, whatever account of the image has it.
  if ((EUID == 0)); then
    CONTAINER_UID=$(id -u "$CONTAINER_USER") CONTAINER_GID=$(id -g "$CONTAINER_USER")
  else
    CONTAINER_UID=$(id -u) CONTAINER_GID=$(id -g)
  fi
  # A runtime that starts us as the caller (Apptainer, Kubernetes) may give a HOME of its own; "/" is
  # what Docker gives a uid without a passwd entry, which now has one.
  if ((EUID == 0)); then
    HOME=/home/$CONTAINER_USER
  elif [[ ${HOME:-/} == / ]]; then
    HOME=$(entry_field passwd "$(id -u)" 6)
  fi
  export HOME USER=$CONTAINER_USER LOGNAME=$CONTAINER_USER
  # The prefix that runs a command as the container user: it drops root when started as root, except
  # for the rootless caller's own folder (then CONTAINER_UID/GID say who runs the work: 0:0).
  if ((EUID == 0)) && workspace_is_the_rootless_callers; then
    run_work_as_the_rootless_caller
    CONTAINER_UID=0 CONTAINER_GID=0 AS_USER=()
  elif ((EUID == 0)); then
    AS_USER=(setpriv --reuid="$CONTAINER_UID" --regid="$CONTAINER_GID" --groups="$(groups_of_the_user)" --)
  else
    AS_USER=()
  fi
  ensure_writable_home
  warn_if_workspace_not_writable
}
