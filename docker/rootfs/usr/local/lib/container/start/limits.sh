# Core start-up step (sourced by entrypoint.sh; defines functions only): warn, with the fix, about
# limits that break training later. The thresholds and fix texts are doctor's (scripts/doctor/limits.py, the
# one place they are spelled); start-up only picks which of doctor's checks matter here, and the supervisor
# runs them in its own interpreter (no second one at every start) and relays what warns.

# shm: every container, since DataLoader workers and NCCL die with 'Bus error' when it is small.
# memlock: only where RDMA devices (InfiniBand, RoCE) are, since only RDMA makes NCCL pin memory against it.
# stack: left to `doctor`: NVIDIA's recommended value is advice, and the default one trains.
limit_checks_that_matter_here() {
  local checks=shm
  [[ -d /dev/infiniband ]] && checks+=,memlock
  printf '%s' "$checks"
}
