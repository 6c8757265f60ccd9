# Core start-up step (sourced by entrypoint.sh; defines functions only): warn, with the fix, about
# limits that break training later. The thresholds and fix texts are doctor's (scripts/doctor.py, the one
# place they are spelled); start-up only picks which of doctor's checks to relay.

readonly DOCTOR=/opt/scripts/doctor.py

# shm: every container, since DataLoader workers and NCCL die with 'Bus error' when it is small.
# memlock: only where RDMA devices (InfiniBand, RoCE) are, since only RDMA makes NCCL pin memory against it.
# stack: left to `doctor`: NVIDIA's recommended value is advice, and the default one trains.
limit_checks_that_matter_here() {
  local checks=shm
  [[ -d /dev/infiniband ]] && checks+=,memlock
  printf '%s' "$checks"
}

warn_about_limits() {
  local line
  # Each line is one finding with its fix. doctor's status (1 when a check warns) adds nothing, and a crash
  # would print its traceback on stderr, where the container's log shows it.
  while IFS= read -r line; do
    log_warn "$line"
  done < <(python3 "$DOCTOR" --only "$(limit_checks_that_matter_here)" --brief)
}
