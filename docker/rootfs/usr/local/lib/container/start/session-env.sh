# Core start-up step (sourced by entrypoint.sh; defines functions only): SSH sessions see the
# container's environment, including what the user's start-up hooks exported.
# sshd starts sessions with a minimal environment, and Debian's /etc/profile resets PATH, so the
# container's variables (PATH with the venv, CUDA_*, NCCL_*, LD_LIBRARY_PATH, ...) are written here once.
# Login shells (ssh, tmux, Jupyter terminals) read it through /etc/profile.d; `ssh host CMD` through
# /etc/bash.bashrc, which Debian's and Ubuntu's bash read first when sshd runs a command.

readonly SESSION_ENV_FILE=/etc/container/session-env.sh
# Per-session, per-process or start-up only: never copied into sessions.
readonly SESSION_ENV_EXCLUDED='^(HOME|HOSTNAME|PWD|OLDPWD|SHLVL|TERM|USER|LOGNAME|SHELL|MAIL|_|CONTAINER_MODE|CONTAINER_SESSION_ENV_LOADED|SSH_AUTHORIZED_KEYS|SSH_AUTHORIZED_KEYS_FILE|PUID|PGID)$'
# Secrets (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, JUPYTER_TOKEN...): they reach the services and
# the command, never a file. Sessions that need one read it from a file of the user's (~/.cache/huggingface/token).
readonly SESSION_ENV_SECRETS='(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|_HASH)'

write_session_env() {
  local name value
  {
    echo "# Written at container start by the entrypoint (write_session_env); do not edit."
    for name in $(compgen -e); do
      [[ $name =~ $SESSION_ENV_EXCLUDED || $name =~ $SESSION_ENV_SECRETS ]] && continue
      value=${!name}
      printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
    done
    # bash.bashrc reads the file once per session, so a subshell keeps the PATH its caller changed.
    echo "export CONTAINER_SESSION_ENV_LOADED=1"
  } >"$SESSION_ENV_FILE"
  # Readable by root and the container user's group only: the environment is nobody else's business.
  chgrp "$CONTAINER_GID" "$SESSION_ENV_FILE"
  chmod 0640 "$SESSION_ENV_FILE"
}
