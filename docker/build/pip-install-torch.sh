#!/usr/bin/env bash
# Usage: pip-install-torch.sh REQUIREMENT INDEX_URL
# Installs torch for the CPU flavor (and for the test venv's unit tier: `make test-unit`). The wheelhouse
# (WHEELHOUSE_DIR, /wheelhouse in builds; set and empty: none) is searched first: when it holds a matching
# torch wheel, that file is installed and only missing dependencies come from PIP_INDEX_URL (or the
# wheelhouse too).
# Otherwise torch comes from INDEX_URL, the PyTorch CPU index by default.
set -euo pipefail
requirement=$1 index_url=$2
wheelhouse=${WHEELHOUSE_DIR-/wheelhouse}  # set and empty: none
# shellcheck source-path=SCRIPTDIR source=pip-trust-ca.sh
source "$(dirname "$0")/pip-trust-ca.sh"
if [[ -n $wheelhouse ]] && pip install --quiet --no-index --no-deps --find-links "$wheelhouse" "$requirement" 2>/dev/null; then
  echo "installed $requirement from the wheelhouse"
  pip install --find-links "$wheelhouse" "$requirement"
else
  echo "the wheelhouse has no $requirement; installing it from $index_url"
  pip install --index-url "$index_url" --extra-index-url "${PIP_INDEX_URL:-https://pypi.org/simple}" "$requirement"
fi
python3 -c 'import torch; print("torch", torch.__version__)'
