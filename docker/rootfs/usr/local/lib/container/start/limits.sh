# Core start-up step (sourced by entrypoint.sh; defines functions only): warn, with the fix, about
# limits that break training later.

readonly DOCKER_DEFAULT_SHM_KB=65536

warn_if_shm_is_small() {
  local shm_kb
  shm_kb=$(df --output=size -k /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ') || return 0
  [[ $shm_kb =~ ^[0-9]+$ ]] || return 0
  if ((shm_kb <= DOCKER_DEFAULT_SHM_KB)); then
    log_warn "/dev/shm is only $((shm_kb / 1024)) MB (Docker's default): DataLoader workers and NCCL die with" \
             "'bus error'; restart with --shm-size=16g or --ipc=host (compose: shm_size or ipc: host)"
  fi
}

# Only RDMA (InfiniBand, RoCE) makes NCCL pin memory against this limit, so only hosts that give the
# container RDMA devices hear about it.
warn_if_memlock_is_limited() {
  local memlock
  [[ -d /dev/infiniband ]] || return 0
  memlock=$(ulimit -l)
  if [[ $memlock != unlimited ]]; then
    log_warn "memlock is limited to $memlock KB: NCCL over InfiniBand/RoCE cannot pin its buffers; restart" \
             "with --ulimit memlock=-1 (compose: ulimits: memlock: -1)"
  fi
}

warn_about_limits() {
  warn_if_shm_is_small
  warn_if_memlock_is_limited
}
