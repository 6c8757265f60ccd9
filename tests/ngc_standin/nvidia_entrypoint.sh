#!/bin/bash
# Stand-in for NGC's entrypoint: print every /opt/nvidia/entrypoint.d/*.txt and source every *.sh, in
# name order, then run the command.
shopt -s nullglob extglob
for part in /opt/nvidia/entrypoint.d/*@(.txt|.sh); do
  # shellcheck source=/dev/null
  case $part in
    *.txt) cat "$part" ;;
    *.sh) source "$part" ;;
  esac
done
shopt -u nullglob extglob
if [[ $# -eq 0 ]]; then
  exec /bin/bash
fi
exec "$@"
