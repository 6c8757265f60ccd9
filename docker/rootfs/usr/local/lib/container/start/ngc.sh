# Core start-up step (sourced by entrypoint.sh; defines functions only).
# NGC images keep start-up scripts in /opt/nvidia/entrypoint.d (banner, driver and CUDA
# forward-compatibility set-up) that their own entrypoint sources. Ours replaces that entrypoint, so
# it sources them, first. They are not written for `set -eu`, and their banner goes to stderr so that
# `docker run IMAGE CMD > file` captures CMD's output alone.

readonly NGC_ENTRYPOINT_D=/opt/nvidia/entrypoint.d

run_ngc_start_scripts() {
  local ngc_script
  [[ -d $NGC_ENTRYPOINT_D ]] || return 0
  set +eu
  for ngc_script in "$NGC_ENTRYPOINT_D"/*.sh; do
    # shellcheck source=/dev/null
    [[ -e $ngc_script ]] && source "$ngc_script" >&2
  done
  set -eu
}
