# Core start-up step (sourced by entrypoint.sh; defines functions only): JupyterLab always runs behind
# authentication.
# JUPYTER_PASSWORD_HASH (from jupyter_server.auth.passwd) or JUPYTER_TOKEN; when neither is given a
# random token is made, printed once with the URL, and kept in ~/.jupyter/token for the user.

readonly JUPYTER_TOKEN_FILE_NAME=.jupyter/token

generate_jupyter_token() {
  local token_file=$HOME/$JUPYTER_TOKEN_FILE_NAME
  JUPYTER_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$(dirname "$token_file")"
  (umask 077 && printf '%s\n' "$JUPYTER_TOKEN" >"$token_file")
  ((EUID == 0)) && chown -R "$CONTAINER_UID:$CONTAINER_GID" "$(dirname "$token_file")"
  log_info "JupyterLab: http://127.0.0.1:${JUPYTER_HOST_PORT:-8888}/?token=$JUPYTER_TOKEN" \
           "(token also in $token_file; set JUPYTER_TOKEN to choose your own)"
}

prepare_jupyter_auth() {
  if [[ -n ${JUPYTER_PASSWORD_HASH:-} ]]; then
    [[ $JUPYTER_PASSWORD_HASH =~ ^(argon2|sha1|sha256|sha512): ]] ||
      fatal "JUPYTER_PASSWORD_HASH is not a Jupyter password hash; make one with: python -c \"from jupyter_server.auth import passwd; print(passwd())\""
    log_info "JupyterLab: password login (JUPYTER_PASSWORD_HASH)"
  elif [[ -z ${JUPYTER_TOKEN:-} ]]; then
    generate_jupyter_token
  fi
  export JUPYTER_TOKEN=${JUPYTER_TOKEN:-}
}
