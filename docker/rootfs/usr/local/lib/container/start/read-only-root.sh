# Core start-up step (sourced by entrypoint.sh; defines functions only): a read-only root filesystem
# (docker run --read-only, Kubernetes readOnlyRootFilesystem, Apptainer) gets one line naming the
# tmpfs mounts start-up needs, instead of a raw error from whichever step first writes.

# Folders sshd and its set-up write (sshd's pid file and privilege-separation folder are in /run); they
# come before RUN_DIR, which a tmpfs on /run then holds too. docs/runtimes.md lists them.
readonly SSH_RUN_PATHS=(/run /etc/ssh/authorized_keys /etc/container)

# Prints each folder of $@ that start-up cannot create or write (a read-only filesystem fails access(2)),
# leaving out those inside one already printed: one tmpfs there holds both.
unwritable_paths() {
  local path printed=()
  for path in "$@"; do
    mkdir -p "$path" 2>/dev/null || true
    [[ -d $path && -w $path ]] && continue
    [[ " ${printed[*]/%//} " == *" ${path%/*}/ "* ]] && continue
    printed+=("$path")
    printf '%s\n' "$path"
  done
}

check_paths_start_up_writes() {
  local needed=() missing
  if ((ENABLE_SSH && EUID == 0)); then
    needed+=("${SSH_RUN_PATHS[@]}")
    # A read-only key volume of its own gets its own line (start/ssh.sh); a read-only root names it here.
    if [[ ! -w / && ! -s $HOST_KEYS_DIR/ssh_host_ed25519_key ]]; then needed+=("$HOST_KEYS_DIR"); fi
  fi
  needed+=("$RUN_DIR")
  # A uid without a passwd entry gets one, and maybe its HOME, in /tmp (start/user.sh); so does the
  # container user whose home is on the read-only root (root's -w fails there only for that reason).
  if ((EUID != 0)) || [[ ! -w /home/$CONTAINER_USER ]]; then needed+=(/tmp); fi
  mapfile -t missing < <(unwritable_paths "${needed[@]}")
  if ((${#missing[@]})); then
    fatal "start-up must write ${missing[*]}, read-only here (docker run --read-only?);" \
          "add$(printf ' --tmpfs %s' "${missing[@]}")" \
          "(Kubernetes: an emptyDir volume at each; ENABLE_SSH=0 needs none of the SSH ones)"
  fi
  if ((EUID == 0)) && [[ -n ${PUID:-}${PGID:-} ]] && [[ ! -w /etc/passwd ]]; then
    fatal "PUID/PGID rewrite /etc/passwd, which is read-only here; start with --user UID:GID instead" \
          "(Kubernetes: runAsUser/runAsGroup)"
  fi
}
