#!/usr/bin/env bash
# Usage: pip-install-environment.sh REQUIREMENTS_FILE
# Installs the Python packages we add on top of either base. The base's torch must survive: NGC pins
# it (and hundreds of packages) in PIP_CONSTRAINT, which pip honours here, and the build fails if the
# torch version changed or `pip check` finds a conflict.
set -euo pipefail
requirements=$1
# shellcheck source-path=SCRIPTDIR source=pip-trust-ca.sh
source "$(dirname "$0")/pip-trust-ca.sh"
torch_version() { python -c 'import torch; print(torch.__version__)'; }
torch_before=$(torch_version)
pip install --find-links /wheelhouse --requirement "$requirements"
torch_after=$(torch_version)
if [[ $torch_before != "$torch_after" ]]; then
  echo "ERROR: installing $requirements replaced the base's torch $torch_before with $torch_after;" \
       "loosen the pin that pulled it in" >&2
  exit 1
fi
pip check
echo "torch $torch_after kept; pip check clean"
