#!/usr/bin/env bash
# Installs what tests/deploy/test_slurm.py runs a one-node Slurm cluster with: Debian's slurmctld, slurmd,
# the client commands and munge (Slurm's authentication). The test writes its own slurm.conf and
# starts the daemons itself; this only installs them. Run as root on a Debian CI machine.
set -euo pipefail

if ((EUID != 0)); then
  echo "install-slurm.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  echo "installed: $(slurmctld -V)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the packages' postinst from starting daemons: the test starts its own.
policy=/usr/sbin/policy-rc.d
[[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; created_policy=1; }
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge python3-venv >/dev/null
[[ -z ${created_policy-} ]] || rm -f "$policy"
echo "installed: $(slurmctld -V), munge $(dpkg-query -W -f='${Version}' munge)"
