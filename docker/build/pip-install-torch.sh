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

# torchvision is built against one torch, so the one for this torch comes from where torch came from: the
# wheelhouse, or INDEX_URL, never PIP_INDEX_URL, whose torchvision is built for PyPI's own torch (a CUDA
# build on x86_64: `import torchvision` there fails with "operator torchvision::nms does not exist").
# torchvision 0.(Y+15).Z goes with torch 2.Y.Z. Where neither place has it, one line says so and the image
# goes without; its index is kept for user-packages, which points a user's `pip install torchvision` at it.
torch_version=$(python3 -c 'import importlib.metadata; print(importlib.metadata.version("torch"))')
IFS=. read -r _ minor patch <<<"${torch_version%%+*}"
vision="torchvision==0.$((minor + 15)).${patch%%[!0-9]*}"
echo "$index_url" >"$(python3 -c 'import sys; print(sys.prefix)')/torch-index-url"
if { [[ -n $wheelhouse ]] && pip install --quiet --no-index --no-deps --find-links "$wheelhouse" "$vision" 2>/dev/null; } ||
  pip install --quiet --no-deps --retries 1 --timeout 30 --index-url "$index_url" "$vision" 2>/dev/null; then
  # Then what it needs besides torch (numpy, Pillow: `import torchvision` imports both), from the wheelhouse
  # or PIP_INDEX_URL, as torch's own; the lock pins them later. Without them the check below always failed.
  links=()
  [[ -n $wheelhouse ]] && links=(--find-links "$wheelhouse")
  pip install --quiet "${links[@]}" "$vision" 2>/dev/null || true  # what is still missing, the check names
  if problem=$(python3 -c 'import torch, torchvision.ops; torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)' 2>&1); then
    python3 -c 'import torchvision; print("torchvision", torchvision.__version__, "for torch", torchvision.version.cuda or "cpu")'
  else
    pip uninstall --quiet --yes torchvision
    echo "the $vision found does not run with torch $torch_version (${problem##*$'\n'}): left out"
  fi
else
  echo "$vision (for torch $torch_version) is in neither the wheelhouse nor $index_url: the image has no torchvision; pip install --index-url $index_url $vision adds it"
fi
