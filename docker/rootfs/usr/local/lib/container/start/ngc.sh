# Core start-up step (sourced by entrypoint.sh; defines functions only).
# NGC images keep start-up parts in /opt/nvidia/entrypoint.d that their own entrypoint takes in name
# order: it prints each *.txt (the banner, the license) and sources each *.sh (driver and CUDA
# forward-compatibility checks). Ours replaces that entrypoint, so it does the same, first, once per
# start. The scripts are not written for `set -eu`, and all of it goes to stderr so that
# `docker run IMAGE CMD > file` captures CMD's output alone.

readonly NGC_ENTRYPOINT_D=/opt/nvidia/entrypoint.d

run_ngc_start_scripts() {
  local ngc_part
  [[ -d $NGC_ENTRYPOINT_D ]] || return 0
  set +eu
  for ngc_part in "$NGC_ENTRYPOINT_D"/*; do
    # shellcheck source=/dev/null
    case $ngc_part in
      *.txt) cat -- "$ngc_part" >&2 ;;
      *.sh) source "$ngc_part" >&2 ;;
    esac
  done
  set -eu
}
