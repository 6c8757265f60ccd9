#!/usr/bin/env bash
# The pipeline's steps in order, as the example workflows run them (examples/github-actions,
# examples/gitlab-ci): resolve the newly published image to its digest, verify its signature, run the
# regression gate on it, and only then submit the training job with that digest and wait for it.
#
#   CKPT_DIR=/shared/runs/nightly tools/pipeline/gate_and_submit.sh REGISTRY/pytorch-dev:TAG [-- TRAINER FLAGS]
#
# Variables: CKPT_DIR (required), SLURM_LOGIN (user@login-node; empty: this machine), LAUNCH_MODE
# (docker or podman), NODES (1), NPROC_PER_NODE (gpu), SBATCH_OPTIONS (e.g. --partition=gpu),
# COSIGN_PUB (a public key: verify with `make verify`; empty: the step says it is skipped).
# A step that fails stops the pipeline there: an image the gate did not pass is never submitted.
set -euo pipefail

log() { printf '[pipeline] %s\n' "$*" >&2; }
fail() { printf 'gate_and_submit.sh: %s\n' "$*" >&2; exit 2; }

(($# >= 1)) || fail "name the image: gate_and_submit.sh REGISTRY/pytorch-dev:TAG [-- TRAINER FLAGS]"
reference=$1
shift
[[ ${1:-} == -- ]] && shift
[[ -n ${CKPT_DIR:-} ]] || fail "set CKPT_DIR to a folder every node sees: the job checkpoints and resumes there"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log "1/4 resolving $reference"
digest_reference=$(python3 tools/regression/resolve.py "$reference")
log "    $digest_reference"

log "2/4 verifying the signature"
if [[ -n ${COSIGN_PUB:-} ]]; then
  # The reference as named, pinned to the digest resolved: verify checks the tag's signature (and that a
  # moving tag names its newest release), and the digest that runs is the one that passed.
  named=$reference
  [[ ${named##*/} == *[:@]* ]] || named="$named:latest"  # what docker pull took it to mean
  [[ $named == *@sha256:* ]] || named="$named@${digest_reference#*@}"
  make --no-print-directory verify IMAGE="$named" COSIGN_PUB="$COSIGN_PUB"
else
  log "    skipped: COSIGN_PUB is not set (set it to the release key to verify, docs/pipeline.md)"
fi

log "3/4 regression gate"
make --no-print-directory regression IMAGE="$digest_reference"

log "4/4 submitting to Slurm${SLURM_LOGIN:+ on $SLURM_LOGIN}"
sbatch_options=()
# shellcheck disable=SC2206  # a list of sbatch options, split on spaces on purpose
for option in ${SBATCH_OPTIONS:-}; do sbatch_options+=(--sbatch-option="$option"); done
exec python3 tools/pipeline/submit_slurm.py "$digest_reference" --ckpt-dir "$CKPT_DIR" \
  --login "${SLURM_LOGIN:-}" --launch-mode "${LAUNCH_MODE:-docker}" --nodes "${NODES:-1}" \
  --nproc-per-node "${NPROC_PER_NODE:-gpu}" ${sbatch_options[@]+"${sbatch_options[@]}"} -- "$@"
