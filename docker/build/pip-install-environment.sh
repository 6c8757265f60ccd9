#!/usr/bin/env bash
# Usage: pip-install-environment.sh PYTHON_DIR FLAVOR
# Installs the Python packages we add on top of either base: PYTHON_DIR/requirements-FLAVOR.lock when
# it exists (every version pinned and hashed: `make lock`), else the ranges of requirements.txt; then it
# uninstalls what PYTHON_DIR/left-out.txt names.
# The base's torch must survive: NGC pins it (and hundreds of packages) in PIP_CONSTRAINT, which pip
# honours here, and the build fails if the torch version changed or `pip check` finds a conflict.
set -euo pipefail
python_dir=$1 flavor=$2
# shellcheck source-path=SCRIPTDIR source=pip-trust-ca.sh
source "$(dirname "$0")/pip-trust-ca.sh"
torch_version() { python3 -c 'import torch; print(torch.__version__)'; }
torch_before=$(torch_version)
lock=$python_dir/requirements-$flavor.lock
if [[ -f $lock ]]; then
  echo "installing the locked set $(basename "$lock")"
  # --no-deps: the lock is complete, so nothing unlocked and unhashed can slip in.
  pip install --require-hashes --no-deps --requirement "$lock"
else
  echo "no $(basename "$lock"): installing the ranges of requirements.txt (make lock FLAVOR=$flavor pins them)"
  pip install --find-links /wheelhouse --requirement "$python_dir/requirements.txt"
fi
# What left-out.txt names goes, wherever the ranges or the base brought it in (the lock never pins it);
# pip skips, with a warning, a name that is not installed.
mapfile -t left_out < <(grep -v '^\s*\(#\|$\)' "$python_dir/left-out.txt")
pip uninstall --yes "${left_out[@]}"
torch_after=$(torch_version)
if [[ $torch_before != "$torch_after" ]]; then
  echo "ERROR: installing our packages replaced the base's torch $torch_before with $torch_after;" \
       "loosen the requirement that pulled it in" >&2
  exit 1
fi
pip check
echo "torch $torch_after kept; pip check clean"
