# The one log helper of the entrypoint and its start-up hooks. Every line names its level, and a fatal
# line says what is wrong and what to do, then exits non-zero (the container does not start).
# shellcheck source=docker/rootfs/usr/local/lib/container/run_folder.sh
source /usr/local/lib/container/run_folder.sh
readonly CONTAINER_EXIT_BAD_CONFIG=2
# Set once a fatal line is out, so the entrypoint adds no second line for the same stop (it reads it).
# shellcheck disable=SC2034
FATAL_REPORTED=0
log_info() { printf '%s %s\n' "$LOG_PREFIX" "$*" >&2; }
log_warn() { printf '%s WARNING: %s\n' "$LOG_PREFIX" "$*" >&2; }
fatal() {
  printf '%s ERROR: %s\n' "$LOG_PREFIX" "$*" >&2
  # shellcheck disable=SC2034
  FATAL_REPORTED=1
  exit "$CONTAINER_EXIT_BAD_CONFIG"
}
# After a step run in a subshell, whose fatal line is already out there: VALUE=$(step) || exit_after_its_line
# ends start-up with its status and no second line (the subshell's FATAL_REPORTED did not reach us).
exit_after_its_line() {
  local status=$?
  # shellcheck disable=SC2034  # read by the entrypoint's EXIT trap
  FATAL_REPORTED=1
  exit "$status"
}
# Accepts 1/0, true/false, yes/no, on/off for the switch named $1; prints 1 or 0.
read_switch() {
  local name=$1 default=$2 value
  value=${!name:-$default}
  case ${value,,} in
    1|true|yes|on) echo 1 ;;
    0|false|no|off) echo 0 ;;
    *) fatal "$name='$value' is not a switch; set it to 1 or 0" ;;
  esac
}
