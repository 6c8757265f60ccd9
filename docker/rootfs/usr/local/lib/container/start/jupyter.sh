# Core start-up step (sourced by entrypoint.sh; defines functions only): JupyterLab always runs behind
# authentication that works.
# JUPYTER_PASSWORD_HASH (from jupyter_server.auth.passwd) or JUPYTER_TOKEN; when neither is given a
# random token is made once, printed with the URL, and kept in ~/.jupyter/token, so a restart (the
# restart policy's too) keeps the URL in `make logs` valid. A new container makes a new one.
# Two other kinds of authentication, each named explicitly: a JupyterHub that spawned the container
# (JUPYTERHUB_API_TOKEN: jupyterhub-singleuser logs users in through the hub), and a platform in
# front of it (JUPYTER_AUTH=platform: Kubeflow's Istio and auth proxy), the only way to run with no
# token of its own. JUPYTER_BASE_URL, or Kubeflow's NB_PREFIX, serves everything under a path prefix.
# The image's config comes first on Jupyter's config path, so no other config there decides who gets in,
# and the server runs behind a check that it refuses a request without a login before it counts as up.

readonly JUPYTER_TOKEN_FILE_NAME=.jupyter/token
readonly MIN_JUPYTER_TOKEN_LENGTH=16
readonly PASSWORD_HASH_CHECK=/usr/local/lib/container/jupyter/check_jupyter_password_hash.py
readonly MAKE_PASSWORD_HASH="python3 -c \"from jupyter_server.auth import passwd; print(passwd())\""
readonly IMAGE_JUPYTER_CONFIG_DIR=/etc/jupyter
readonly GUARDED_JUPYTER=/usr/local/lib/container/jupyter/jupyter-refusing-strangers

# The token file lives in the user's home, where the user may plant a link: it is read and written as
# the user, never as root, so a link can lead only where the user could write anyway.
read_kept_jupyter_token() {
  local token
  token=$("${AS_USER[@]}" cat -- "$HOME/$JUPYTER_TOKEN_FILE_NAME" 2>/dev/null) || return 0
  if [[ $token =~ ^[0-9a-f]{48}$ ]]; then echo "$token"; fi
}

keep_jupyter_token() {
  # shellcheck disable=SC2016  # $1 is expanded by the user's sh
  printf '%s\n' "$1" | "${AS_USER[@]}" sh -c 'umask 077 && mkdir -p "$(dirname "$1")" && cat >"$1"' \
    keep-token "$HOME/$JUPYTER_TOKEN_FILE_NAME" && return
  log_warn "could not keep the Jupyter token in $HOME/$JUPYTER_TOKEN_FILE_NAME;" \
           "the next start makes a new one"
  return 1
}

use_kept_or_new_jupyter_token() {
  local where="token also in $HOME/$JUPYTER_TOKEN_FILE_NAME"
  JUPYTER_TOKEN=$(read_kept_jupyter_token)
  if [[ -z $JUPYTER_TOKEN ]]; then
    JUPYTER_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
    keep_jupyter_token "$JUPYTER_TOKEN" || where="token only in this log, until the container stops"
  fi
  log_info "JupyterLab: http://127.0.0.1:${JUPYTER_HOST_PORT:-8888}${JUPYTER_BASE_URL}?token=$JUPYTER_TOKEN" \
           "($where; set JUPYTER_TOKEN to choose your own)"
}

check_jupyter_password_hash() {
  [[ $JUPYTER_PASSWORD_HASH =~ ^(argon2|sha1|sha256|sha512): ]] ||
    fatal "JUPYTER_PASSWORD_HASH is not a Jupyter password hash; make one with: $MAKE_PASSWORD_HASH"
  local status=0
  "${AS_USER[@]}" python3 "$PASSWORD_HASH_CHECK" || status=$?
  case $status in
    0) ;;
    3) fatal "JUPYTER_PASSWORD_HASH is the hash of an empty password, which lets anyone in; make one of a" \
             "real password with: $MAKE_PASSWORD_HASH" ;;
    *) fatal "JUPYTER_PASSWORD_HASH cannot be checked (damaged or cut short?), so nobody could log in; make" \
             "a new one with: $MAKE_PASSWORD_HASH" ;;
  esac
}

check_jupyter_token() {
  [[ -n ${JUPYTER_TOKEN//[[:space:]]/} ]] ||
    fatal "JUPYTER_TOKEN is only whitespace; set a real token (openssl rand -hex 24), or leave it empty to" \
          "get one"
  ((${#JUPYTER_TOKEN} >= MIN_JUPYTER_TOKEN_LENGTH)) ||
    fatal "JUPYTER_TOKEN has ${#JUPYTER_TOKEN} characters, too few to be secret; use at least" \
          "$MIN_JUPYTER_TOKEN_LENGTH (openssl rand -hex 24), or leave it empty to get one"
}

# `start-services ARGS` hands ARGS to JupyterLab, and one of them may be its base URL, which the healthcheck
# and the start line must know too: taken out of the arguments, it becomes JUPYTER_BASE_URL, checked as
# that is. (A hub's arguments are the hub's: under a hub the base URL is the hub's to give.)
take_the_base_url_from_jupyters_arguments() {
  local i=0 argument value="" kept=()
  while ((i < ${#JUPYTER_EXTRA_ARGS[@]})); do
    argument=${JUPYTER_EXTRA_ARGS[i]}
    i=$((i + 1))
    case $argument in
      --ServerApp.base_url=* | --NotebookApp.base_url=*) value=${argument#*=} ;;
      --ServerApp.base_url | --NotebookApp.base_url) value=${JUPYTER_EXTRA_ARGS[i]:-} i=$((i + 1)) ;;
      *) kept+=("$argument"); continue ;;
    esac
    if [[ -n ${JUPYTER_BASE_URL:-} && ${JUPYTER_BASE_URL%/} != "${value%/}" ]]; then
      fatal "JUPYTER_BASE_URL=$JUPYTER_BASE_URL and JupyterLab's argument ${argument%%=*} $value disagree;" \
            "set only one of them"
    fi
    JUPYTER_BASE_URL=$value
  done
  JUPYTER_EXTRA_ARGS=(${kept[@]+"${kept[@]}"})
}

# JupyterLab's login is the image's to set (jupyter_server_config.py, from JUPYTER_TOKEN,
# JUPYTER_PASSWORD_HASH and JUPYTER_AUTH), and its settings there win over the same ones given as
# arguments: an argument that sets the token, password or identity provider would be overridden without a
# word, so it stops the start. A config file named by argument (--config, or a config_file setting) is
# read instead of the image's jupyter_server_config.py, which would drop its login, address and folder
# without a word (the server's probe then finds an open server only where the base URL is /).
refuse_login_arguments() {
  local argument
  for argument in ${JUPYTER_EXTRA_ARGS[@]+"${JUPYTER_EXTRA_ARGS[@]}"}; do
    case $argument in
      --*IdentityProvider.* | --ServerApp.token* | --ServerApp.password* | --NotebookApp.token* | \
        --NotebookApp.password* | --ServerApp.identity_provider_class* | --ServerApp.login_handler_class*)
        fatal "JupyterLab's argument ${argument%%=*} would be overridden by the image's login settings; set" \
              "JUPYTER_TOKEN or JUPYTER_PASSWORD_HASH instead (JUPYTER_AUTH=platform where a platform in" \
              "front authenticates)" ;;
      --config | --config=* | --*.config_file*)
        fatal "JupyterLab's argument ${argument%%=*} would make it read that file instead of the image's" \
              "settings (its login, address and folder); put your settings in" \
              "$HOME/.jupyter/jupyter_server_config.py, which it reads for what the image leaves unset" ;;
    esac
  done
}

# Prints the base URL, with a slash at either end, from JUPYTER_BASE_URL or NB_PREFIX (Kubeflow's).
read_jupyter_base_url() {
  local base=${JUPYTER_BASE_URL:-} prefix=${NB_PREFIX:-}
  if [[ -n $base && -n $prefix && ${base%/} != "${prefix%/}" ]]; then
    fatal "JUPYTER_BASE_URL=$base and NB_PREFIX=$prefix disagree; set only one of them"
  fi
  base=${base:-${prefix:-/}}
  [[ $base =~ ^/[A-Za-z0-9._~/-]*$ && $base != *//* && ! $base =~ (^|/)\.\.?(/|$) ]] ||
    fatal "JUPYTER_BASE_URL (or NB_PREFIX) '$base' is not a URL path; use one like /gpu/ or /notebook/team/me"
  echo "${base%/}/"
}

# Jupyter reads every config on its path and lets the first folder win: the image's goes first (the
# Dockerfile sets the same; this holds also when a derived image or `docker run -e` changed it).
# (Both variables are Jupyter's own, not settings of this image.)
put_the_image_config_first() {
  if [[ -v JUPYTER_NO_CONFIG && -n $JUPYTER_NO_CONFIG ]]; then
    fatal "JUPYTER_NO_CONFIG is set, which makes JupyterLab skip the image's settings (its login, address" \
          "and folder); unset it"
  fi
  local given=""
  [[ -v JUPYTER_CONFIG_PATH ]] && given=$JUPYTER_CONFIG_PATH
  if [[ $given != "$IMAGE_JUPYTER_CONFIG_DIR" && $given != "$IMAGE_JUPYTER_CONFIG_DIR":* ]]; then
    JUPYTER_CONFIG_PATH=$IMAGE_JUPYTER_CONFIG_DIR${given:+:$given}
  fi
  export JUPYTER_CONFIG_PATH
}

# What the healthcheck probes: the server's own port and base URL, both of which a hub may choose; the
# check that the server refuses strangers (jupyter-refusing-strangers) asks there too.
record_jupyter_probe_url() {
  local port=$JUPYTER_CONTAINER_PORT base=$JUPYTER_BASE_URL
  if ((SPAWNED_BY_JUPYTERHUB)); then
    [[ ${JUPYTERHUB_SERVICE_URL:-} =~ :([0-9]+)(/|$) ]] && port=${BASH_REMATCH[1]}
    base=${JUPYTERHUB_SERVICE_PREFIX:-/}
  fi
  printf 'http://127.0.0.1:%s%s\n' "$port" "$base" >"$JUPYTER_URL_FILE"
}

use_the_hubs_authentication() {
  # shellcheck disable=SC2034  # entrypoint.sh starts it
  JUPYTER_SERVER_COMMAND=(jupyterhub-singleuser)
  log_info "JupyterHub single-user server for hub user '${JUPYTERHUB_USER:-?}':" \
           "the hub logs users in (${JUPYTERHUB_SERVICE_PREFIX:-/})"
  # The hub's idle culler sees only JupyterLab's own activity: the supervisor reports the user's running
  # work too (supervisor.py, HubActivity).
}

# JUPYTER_ALLOWED_HOSTS: the host names the platform serves JupyterLab under, comma-separated, as one
# lower-case list. Without a login of its own JupyterLab answers no other Host header (and loopback
# addresses): else a web page whose name its owner points at 127.0.0.1 (DNS rebinding) reaches a
# terminal through a port published there. Jupyter matches names only, so an address or a port is refused.
read_jupyter_allowed_hosts() {
  local names=() name listed=() HOST_NAME='^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$'
  IFS=, read -ra names <<<"${JUPYTER_ALLOWED_HOSTS:-}"
  for name in "${names[@]}"; do
    name=${name//[[:space:]]/} name=${name,,}
    [[ -n $name ]] || continue
    [[ $name =~ $HOST_NAME && ! $name =~ ^[0-9.]+$ ]] ||
      fatal "JUPYTER_ALLOWED_HOSTS: '$name' is not a host name; list the names the platform serves" \
            "JupyterLab under, without a port or scheme (Jupyter admits addresses only on loopback)"
    listed+=("$name")
  done
  local IFS=,
  echo "${listed[*]}"
}

use_the_platforms_authentication() {
  [[ -z ${JUPYTER_TOKEN:-}${JUPYTER_PASSWORD_HASH:-} ]] ||
    fatal "JUPYTER_AUTH=platform turns Jupyter's own login off, but JUPYTER_TOKEN or JUPYTER_PASSWORD_HASH" \
          "is set too; unset them, or unset JUPYTER_AUTH"
  JUPYTER_ALLOWED_HOSTS=$(read_jupyter_allowed_hosts) || exit_after_its_line
  log_warn "JUPYTER_AUTH=platform: JupyterLab runs WITHOUT its own token or password; only the platform in" \
           "front of it (Kubeflow's Istio and auth proxy, an authenticating reverse proxy) keeps others" \
           "out. It answers only requests for localhost${JUPYTER_ALLOWED_HOSTS:+,$JUPYTER_ALLOWED_HOSTS}" \
           "and loopback addresses (JUPYTER_ALLOWED_HOSTS: the platform's host names). Never publish port" \
           "$JUPYTER_CONTAINER_PORT where anyone can reach it directly."
  export JUPYTER_ALLOWED_HOSTS
  log_info "JupyterLab: http://127.0.0.1:${JUPYTER_HOST_PORT:-8888}${JUPYTER_BASE_URL} (authenticated by" \
           "the platform)"
  # jupyter_server_config.py leaves the token empty only with this mark of the checks above.
  export JUPYTER_PLATFORM_AUTH_CHECKED=1
}

use_jupyters_own_authentication() {
  if [[ -n ${JUPYTER_PASSWORD_HASH:-} ]]; then
    check_jupyter_password_hash
    log_info "JupyterLab: password login (JUPYTER_PASSWORD_HASH) at" \
             "http://127.0.0.1:${JUPYTER_HOST_PORT:-8888}${JUPYTER_BASE_URL}"
  elif [[ -n ${JUPYTER_TOKEN:-} ]]; then
    check_jupyter_token
  else
    use_kept_or_new_jupyter_token
  fi
}

prepare_jupyter_auth() {
  ((SPAWNED_BY_JUPYTERHUB)) || take_the_base_url_from_jupyters_arguments
  ((SPAWNED_BY_JUPYTERHUB)) || refuse_login_arguments
  JUPYTER_BASE_URL=$(read_jupyter_base_url) || exit_after_its_line
  JUPYTER_AUTH=${JUPYTER_AUTH:-token}
  if ((SPAWNED_BY_JUPYTERHUB)); then
    JUPYTER_AUTH=hub
    use_the_hubs_authentication
  else
    case $JUPYTER_AUTH in
      token) use_jupyters_own_authentication ;;
      platform) use_the_platforms_authentication ;;
      *) fatal "JUPYTER_AUTH='$JUPYTER_AUTH' is not a kind of authentication; leave it unset (Jupyter's own" \
               "token or password), or set it to platform where a platform in front of JupyterLab" \
               "authenticates (Kubeflow)" ;;
    esac
  fi
  put_the_image_config_first
  record_jupyter_probe_url
  # Jupyter refuses root without this; start-up chose root only for the rootless caller (start/user.sh).
  if ((WORK_RUNS_AS_CONTAINER_ROOT)); then JUPYTER_SERVER_COMMAND+=(--allow-root); fi
  JUPYTER_SERVER_COMMAND=("$GUARDED_JUPYTER" "${JUPYTER_SERVER_COMMAND[@]}")
  # jupyter_server_config.py reads these three, as this step left them.
  export JUPYTER_TOKEN=${JUPYTER_TOKEN:-} JUPYTER_AUTH JUPYTER_BASE_URL
}
