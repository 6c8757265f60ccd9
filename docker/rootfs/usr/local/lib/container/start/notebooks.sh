# Core start-up step (sourced by entrypoint.sh; defines functions only): put the sample notebook in the
# workspace, where JupyterLab opens it by default (jupyter_server_config.py). Never overwrites: a user's
# edited copy stays theirs.

readonly SAMPLE_NOTEBOOKS_DIR=/opt/notebooks
readonly WORKSPACE_EXAMPLES_DIR=/workspace/examples

copy_sample_notebooks() {
  local notebook target
  "${AS_USER[@]}" test -w /workspace || return 0  # set_up_container_user has said why, in one line
  for notebook in "$SAMPLE_NOTEBOOKS_DIR"/*.ipynb; do
    target=$WORKSPACE_EXAMPLES_DIR/$(basename "$notebook")
    [[ -e $target ]] && continue
    # As the user, so the copy carries PUID:PGID in a bind-mounted workspace.
    if "${AS_USER[@]}" mkdir -p "$WORKSPACE_EXAMPLES_DIR" && "${AS_USER[@]}" cp "$notebook" "$target"; then
      log_info "sample notebook: $target"
    else
      log_warn "could not copy the sample notebook to $target; make /workspace writable for uid:gid $CONTAINER_UID:$CONTAINER_GID"
    fi
  done
}
