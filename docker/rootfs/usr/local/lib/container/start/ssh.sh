# Core start-up step (sourced by entrypoint.sh; defines functions only): prepare sshd when the SSH
# service will run.
# Key-only logins for the container user. Host keys are made here, at first start, into a volume
# (/etc/ssh/host_keys): never baked into the image, so two deployments never share host keys.
# Authorized keys come from SSH_AUTHORIZED_KEYS (one or more public keys, one a line) and/or
# SSH_AUTHORIZED_KEYS_FILE (a mounted file); keys in ~/.ssh/authorized_keys work as well.

readonly HOST_KEYS_DIR=/etc/ssh/host_keys
readonly AUTHORIZED_KEYS_DIR=/etc/ssh/authorized_keys

# One ed25519 host key: every client that speaks this sshd's key exchanges (OpenSSH 8.5+, paramiko, PuTTY)
# knows it, and it takes milliseconds to make, where an RSA key took one to three seconds of each first
# start. An RSA key left in the volume by an older image is no longer offered.
ensure_host_keys() {
  local key=$HOST_KEYS_DIR/ssh_host_ed25519_key
  mkdir -p "$HOST_KEYS_DIR" 2>/dev/null || true
  [[ -s $key ]] && return 0
  [[ -w $HOST_KEYS_DIR ]] ||
    fatal "cannot write the SSH host key into $HOST_KEYS_DIR (read-only or missing); mount it writable for" \
          "the first start, or put ssh_host_ed25519_key there"
  ssh-keygen -q -t ed25519 -N '' -C "" -f "$key"
  log_info "generated SSH host key $(ssh-keygen -l -f "$key.pub" | cut -d' ' -f2) (ed25519)"
}

# Key types this sshd accepts (OpenSSH 9 refuses DSA, and RSA keys under 1024 bits), as ssh-keygen -l
# names them.
readonly ACCEPTED_KEY_TYPES='^(ED25519|ED25519-SK|ECDSA|ECDSA-SK|RSA)$'
readonly MIN_RSA_BITS=1024

# Prints each public key of $2 (text), failing with a line that names $1 when one is malformed or of a
# kind sshd would refuse at login.
validated_keys() {
  local source=$1 text=$2 line number=0 fingerprint bits type
  while IFS= read -r line || [[ -n $line ]]; do
    number=$((number + 1))
    [[ -z ${line// /} || $line == \#* ]] && continue
    fingerprint=$(ssh-keygen -l -f /dev/stdin <<<"$line" 2>/dev/null) ||
      fatal "$source line $number is not an SSH public key; use the single line of your ~/.ssh/id_ed25519.pub"
    bits=${fingerprint%% *} type=${fingerprint##*(} type=${type%)}
    if [[ ! $type =~ $ACCEPTED_KEY_TYPES ]] || { [[ $type == RSA ]] && ((bits < MIN_RSA_BITS)); }; then
      fatal "$source line $number is a $bits-bit $type key, which sshd refuses; make an ed25519 key" \
            "(ssh-keygen -t ed25519) and use its .pub line"
    fi
    printf '%s\n' "$line"
  done <<<"$text"
}

write_authorized_keys() {
  local keys_from_env="" keys_from_file=""
  # validated_keys runs in a subshell: its fatal line is printed there, and `|| exit_after_its_line` stops
  # us here.
  if [[ -n ${SSH_AUTHORIZED_KEYS:-} ]]; then
    keys_from_env=$(validated_keys SSH_AUTHORIZED_KEYS "$SSH_AUTHORIZED_KEYS") || exit_after_its_line
  fi
  if [[ -n ${SSH_AUTHORIZED_KEYS_FILE:-} ]]; then
    [[ -f $SSH_AUTHORIZED_KEYS_FILE && -r $SSH_AUTHORIZED_KEYS_FILE ]] ||
      fatal "SSH_AUTHORIZED_KEYS_FILE=$SSH_AUTHORIZED_KEYS_FILE cannot be read; mount your public key file" \
            "there (read-only)"
    keys_from_file=$(validated_keys "SSH_AUTHORIZED_KEYS_FILE ($SSH_AUTHORIZED_KEYS_FILE)" \
                       "$(<"$SSH_AUTHORIZED_KEYS_FILE")") || exit_after_its_line
  fi
  # Root-owned and read-only for the user: sshd reads it, the user cannot widen it by accident.
  install -d -m 0755 "$AUTHORIZED_KEYS_DIR"
  printf '%s\n%s\n' "$keys_from_env" "$keys_from_file" | sed '/^$/d' >"$AUTHORIZED_KEYS_DIR/$CONTAINER_USER"
  chmod 0644 "$AUTHORIZED_KEYS_DIR/$CONTAINER_USER"
  if [[ ! -s $AUTHORIZED_KEYS_DIR/$CONTAINER_USER && ! -s /home/$CONTAINER_USER/.ssh/authorized_keys ]]; then
    log_warn "SSH is on but no public key was given, so nobody can log in; set SSH_AUTHORIZED_KEYS or" \
             "SSH_AUTHORIZED_KEYS_FILE (or ENABLE_SSH=0)"
  fi
}

# sshd switches to the user who logs in, which only root can do.
ssh_can_run() {
  ((EUID == 0)) && return 0
  log_warn "SSH is off: sshd must start as root to log users in, and this container runs as uid $(id -u)" \
           "(--user, Apptainer, Kubernetes); use exec (docker, kubectl) to get a shell, or start as root" \
           "with PUID/PGID"
  return 1
}

prepare_ssh() {
  ensure_host_keys
  write_authorized_keys
  # sshd drops privileges into this directory.
  install -d -m 0755 /run/sshd
  # The image's home is group-writable for OpenShift (g=u), which sshd's StrictModes refuses for keys in
  # ~/.ssh/authorized_keys; a container that runs sshd runs as root, never under OpenShift's rules.
  # A home mounted from the host is the host's folder, whose mode is the host's business, not ours.
  if ! mountpoint -q "/home/$CONTAINER_USER"; then
    chmod g-w "/home/$CONTAINER_USER" 2>/dev/null || true
  fi
}
