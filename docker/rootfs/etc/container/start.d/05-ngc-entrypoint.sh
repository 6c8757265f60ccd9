# Start-up hook (sourced by entrypoint.sh): NGC images keep start-up scripts in /opt/nvidia/entrypoint.d
# (banner, driver and CUDA forward-compatibility set-up) that their own entrypoint sources. Ours
# replaces that entrypoint, so it sources them here, first. They are not written for `set -eu`, and
# their banner goes to stderr so that `docker run IMAGE CMD > file` captures CMD's output alone.

readonly NGC_ENTRYPOINT_D=/opt/nvidia/entrypoint.d

if [[ -d $NGC_ENTRYPOINT_D ]]; then
  set +eu
  for ngc_script in "$NGC_ENTRYPOINT_D"/*.sh; do
    # shellcheck source=/dev/null
    [[ -e $ngc_script ]] && source "$ngc_script" >&2
  done
  set -eu
fi
