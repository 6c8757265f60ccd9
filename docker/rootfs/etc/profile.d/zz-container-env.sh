# Login shells (ssh, tmux) get the container's environment back after /etc/profile reset PATH.
if [ -r /etc/container/session-env.sh ]; then
  . /etc/container/session-env.sh
fi
