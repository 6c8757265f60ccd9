# Core start-up step (sourced by entrypoint.sh; defines functions only): SSH sessions see the
# container's environment, including what the user's start-up hooks exported.
# sshd starts sessions with a minimal environment, and Debian's /etc/profile resets PATH, so the
# container's variables (PATH with the venv, CUDA_*, NCCL_*, LD_LIBRARY_PATH, ...) are written here once.
# Login shells (ssh, tmux, Jupyter terminals) read it through /etc/profile.d; `ssh host CMD` through
# /etc/bash.bashrc, which Debian's and Ubuntu's bash read first when sshd runs a command.

readonly SESSION_ENV_FILE=/etc/container/session-env.sh
# Which variables a session gets, by where they came from:
#   - the image's own (its ENV and NGC's, listed at build): all;
#   - set during start-up (by the entrypoint or the user's start-up hooks, which export on purpose): all;
#   - given to the container (docker run -e, compose's environment): only those named like something a
#     training session needs. A token or a URL with a password under any other name (GITHUB_PAT,
#     DATABASE_URL) stays with the services and the command, out of a file.
# Secret-looking names are left out whatever their source.
readonly IMAGE_ENV_NAMES_FILE=/usr/local/lib/container/image-env-names
readonly SESSION_ENV_ALLOWED='^(PATH|LD_[A-Z_]+|LIBRARY_PATH|CUDA_[A-Z0-9_]+|CUDNN_[A-Z0-9_]+|'\
'NCCL_[A-Z0-9_]+|NVIDIA_[A-Z0-9_]+|PYTHON[A-Z0-9_]*|PYTORCH_[A-Z0-9_]+|TORCH[A-Z0-9_]*|OMP_[A-Z_]+|'\
'MKL_[A-Z_]+|OPENBLAS_[A-Z_]+|GLOO_[A-Z_]+|UCX_[A-Z_]+|HF_HOME|HF_HUB_OFFLINE|HF_DATASETS_CACHE|'\
'TRANSFORMERS_CACHE|TZ|LANG|LC_[A-Z]+|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK)$'
# The names the container was started with (image's and given), read when the entrypoint sources this
# file, before any step runs.
SESSION_ENV_GIVEN=" $(compgen -e | tr '\n' ' ') "
readonly SESSION_ENV_GIVEN
# Per-session, per-process or start-up only: never copied into sessions.
readonly SESSION_ENV_EXCLUDED='^(HOME|HOSTNAME|PWD|OLDPWD|SHLVL|TERM|USER|LOGNAME|SHELL|MAIL|_|'\
'CONTAINER_MODE|CONTAINER_SESSION_ENV_LOADED|JUPYTER_PLATFORM_AUTH_CHECKED|SSH_AUTHORIZED_KEYS|'\
'SSH_AUTHORIZED_KEYS_FILE|PUID|PGID)$'
# Secrets (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, JUPYTER_TOKEN...): they reach the services and
# the command, never a file. Sessions that need one read it from a file of the user's
# (~/.cache/huggingface/token).
readonly SESSION_ENV_SECRETS='(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|_HASH)'
# A value with credentials in a URL (https://user:pass@host, https://TOKEN@host) is a secret under any name.
readonly SESSION_ENV_URL_CREDENTIALS='://[^/[:space:]]+@'

# Whether NAME, given to the container at start, reaches sessions (see SESSION_ENV_ALLOWED above).
session_may_get() {
  local name=$1
  [[ $SESSION_ENV_GIVEN != *" $name "* || $name =~ $SESSION_ENV_ALLOWED ]] && return 0
  [[ -r $IMAGE_ENV_NAMES_FILE ]] && grep -qx -- "$name" "$IMAGE_ENV_NAMES_FILE"
}

write_session_env() {
  local name value
  {
    echo "# Written at container start by the entrypoint (write_session_env); do not edit."
    for name in $(compgen -e); do
      [[ $name =~ $SESSION_ENV_EXCLUDED || $name =~ $SESSION_ENV_SECRETS ]] && continue
      session_may_get "$name" || continue
      value=${!name}
      [[ $value =~ $SESSION_ENV_URL_CREDENTIALS ]] && continue
      printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
    done
    # bash.bashrc reads the file once per session, so a subshell keeps the PATH its caller changed.
    echo "export CONTAINER_SESSION_ENV_LOADED=1"
  } >"$SESSION_ENV_FILE"
  # Readable by root and the container user's group only: the environment is nobody else's business.
  chgrp "$CONTAINER_GID" "$SESSION_ENV_FILE"
  chmod 0640 "$SESSION_ENV_FILE"
}
