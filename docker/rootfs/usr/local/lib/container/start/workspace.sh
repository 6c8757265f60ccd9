# Core start-up step (sourced by entrypoint.sh; defines functions only): where the user's work is kept.
# shellcheck disable=SC2034  # CONTAINER_WORKSPACE: declared in entrypoint.sh, read by the later steps
#
# /workspace, unless nothing is mounted there and the platform mounted its volume as a home folder
# instead: Kubeflow's New Notebook form mounts the notebook's workspace volume at /home/jovyan (its
# default; an admin may name another /home/NAME). The image's own /workspace is then in the container's
# layer, lost with the pod, so that volume becomes the workspace: JupyterLab's root, where its terminals
# and kernels start, where the sample notebook goes. A tmpfs is no place to keep work, and the user's own
# home (compose mounts only its .cache) stays the home.

resolve_workspace() {
  local homes=()
  CONTAINER_WORKSPACE=/workspace
  mountpoint -q /workspace && return 0
  # In mountinfo, field 5 is the mount point and the field after the lone "-" the file system type; a
  # space in a name is written \040, which a /home/NAME of Kubeflow's never has.
  mapfile -t homes < <(awk -v own="/home/$CONTAINER_USER" '
    { for (i = 7; $i != "-"; i++) ; type = $(i + 1) }
    $5 ~ "^/home/[^/]+$" && $5 != own && type != "tmpfs" { print $5 }' /proc/self/mountinfo | sort -u)
  if ((${#homes[@]} == 1)); then
    CONTAINER_WORKSPACE=${homes[0]}
    log_info "workspace: ${homes[0]}, the volume mounted there (none is at /workspace): JupyterLab opens" \
             "there, and what you save there outlives the container"
  elif ((${#homes[@]} > 1)); then
    log_warn "volumes are mounted at ${homes[*]} but none at /workspace; JupyterLab opens /workspace, which" \
             "is lost with the container: mount the one to work in at /workspace"
  fi
}
