#!/usr/bin/env bash
# Usage: apt-install-without-services.sh PACKAGE...
# Installs Debian packages whose postinst would start a daemon nobody uses (nginx on 80, a registry on
# 5000): policy-rc.d refuses every start while they install, and the tests start their own instances.
set -euo pipefail
policy=/usr/sbin/policy-rc.d
[[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; created_policy=1; }
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
[[ -z ${created_policy-} ]] || rm -f "$policy"
