# A start-up hook of the team's image (sourced as root by the entrypoint, after the image's own steps).
# What it exports reaches JupyterLab, SSH sessions and the command; a failure stops start-up with one line.
export TEAM_DATA_DIR=${TEAM_DATA_DIR:-/workspace/data}
log_info "team data folder: $TEAM_DATA_DIR"
