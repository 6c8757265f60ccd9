# Core start-up step (sourced by entrypoint.sh; defines functions only): put the sample notebook in the
# workspace, where JupyterLab opens it by default (jupyter_server_config.py). Never overwrites a user's
# edited copy. It copies to a hidden name and renames, so a full disk leaves no cut-short notebook, and
# an empty copy (what a full disk left before) counts as missing.

readonly SAMPLE_NOTEBOOKS_DIR=/opt/notebooks

copy_sample_notebooks() {
  local notebook name target partial error examples=$CONTAINER_WORKSPACE/examples
  # set_up_container_user has said why, in one line
  "${AS_USER[@]}" test -w "$CONTAINER_WORKSPACE" || return 0
  for notebook in "$SAMPLE_NOTEBOOKS_DIR"/*.ipynb; do
    name=$(basename "$notebook")
    target=$examples/$name
    partial=$examples/.$name.partial
    [[ -L $target || -s $target ]] && continue
    # As the user, so the copy carries PUID:PGID in a bind-mounted workspace, and mv replaces a link
    # planted at the partial name instead of following it.
    if error=$({ "${AS_USER[@]}" mkdir -p "$examples" && "${AS_USER[@]}" cp "$notebook" "$partial" &&
                 "${AS_USER[@]}" mv -f "$partial" "$target"; } 2>&1); then
      log_info "sample notebook: $target"
    else
      "${AS_USER[@]}" rm -f "$partial" 2>/dev/null || true
      log_warn "could not copy the sample notebook to $target;" \
               "$(fix_for_write_error "$error" "$CONTAINER_WORKSPACE")"
    fi
  done
}

# What to do about a failed write under FOLDER, picked from the error's text (coreutils prints strerror):
# a full disk is not fixed by permissions.
fix_for_write_error() {
  local error=$1 folder=$2
  case $error in
    *"No space left on device"* | *"Disk quota exceeded"*)
      echo "$folder is full; free some space there (df -h $folder)" ;;
    *"Read-only file system"*) echo "$folder is mounted read-only; mount it read-write" ;;
    *) echo "make $folder writable for PUID:PGID" ;;
  esac
}
