#!/bin/bash
# Stand-in for NGC's entrypoint: source every /opt/nvidia/entrypoint.d/*.sh, then run the command.
for script in /opt/nvidia/entrypoint.d/*.sh; do
  # shellcheck source=/dev/null
  source "$script"
done
if [[ $# -eq 0 ]]; then
  exec /bin/bash
fi
exec "$@"
