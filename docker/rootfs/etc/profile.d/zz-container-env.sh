# Login shells (ssh, tmux, Jupyter and VS Code terminals, `docker exec bash -l`) get the container's
# environment back after /etc/profile reset PATH, then your own packages first (user-packages).
if [ -r /etc/container/session-env.sh ]; then
  # shellcheck source=/dev/null  # written at start (start/session-env.sh)
  . /etc/container/session-env.sh
elif [ -r "/proc/$$/environ" ]; then
  # No session file (SSH is off, or this is a CI job): the PATH this shell was started with is the
  # image's (the venv, CUDA's tools), which /etc/profile has just replaced with the distribution's.
  container_start_path=$(tr '\0' '\n' <"/proc/$$/environ" | sed -n 's/^PATH=//p')
  [ -n "$container_start_path" ] && PATH=$container_start_path && export PATH
  unset container_start_path
fi
# `docker exec` and `kubectl exec` give a uid without a passwd entry (OpenShift's, `--user UID:GID`) HOME=/,
# which it cannot write. The image's home is group 0's with the owner's rights, for the uid the work runs
# as (OpenShift's arbitrary uid in group 0): that uid, as start-up recorded it, gets it. Any other uid,
# even in group 0, gets a home of its own, /tmp/home-UID, as start-up gives one (start/user.sh), made now
# if need be: a folder of its own, never one someone else made or a link planted there. (A stranger's
# caches in the shared home once left the user unable to write its own ~/.cache.)
container_work_uid=$(sed -n 's/.*"user": {[^}]*"uid": \([0-9]*\).*/\1/p' /run/container/settings.json 2>/dev/null)
if [ ! -w "${HOME:-/}" ]; then
  container_home=/tmp/home-$(id -u)
  if [ -w "/home/${CONTAINER_USER:-dev}" ] && [ "$(id -u)" = "${container_work_uid:-none}" ]; then
    HOME=/home/${CONTAINER_USER:-dev}
  elif { mkdir -m 0700 "$container_home" 2>/dev/null || [ -d "$container_home" ]; } &&
       [ ! -L "$container_home" ] && [ -O "$container_home" ]; then
    HOME=$container_home
  fi
  export HOME
  unset container_home
fi
unset container_work_uid
# Root installs into the image itself (CI job containers, derived images); everyone else into a
# persisted environment of their own that sees the image's packages (docs/editors.md).
if [ "$(id -u)" != 0 ] && command -v user-packages >/dev/null 2>&1; then
  eval "$(user-packages activate)"
fi
