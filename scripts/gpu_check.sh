#!/usr/bin/env bash
# GPU check for a machine lent for a few minutes: a bare host with torch, no Docker, no network.
#
#   bash scripts/gpu_check.sh                 # from a checkout; about 3 minutes on one GPU
#   bash scripts/gpu_check.sh --steps 30 --skip-tests
#
# 1. runs the `gpu`-marked tests (tests/image/test_gpu.py, tests/trainer) on this host, if pytest and
#    pytest-testinfra are installed and the tests are here (a checkout, not the image's /opt/scripts);
# 2. trains gpt2-small (bf16, torch.compile, synthetic tokens, 1024-token context) for --steps steps
#    on every visible GPU, first with DDP and then with FSDP;
# 3. measures NCCL all-reduce bus bandwidth with bench_allreduce.py;
# 4. runs the regression gate on this host (tools/regression/gate.py check --host, in a checkout):
#    the GPU reference run against tools/regression/baselines/gpu-gpu.json, the same report as
#    `make regression` prints on a GPU runner; where that file is missing, it records it (review it);
# and prints one Markdown table (tokens/s, MFU, peak memory, busbw) to paste into BENCHMARKS.md.
# For throughput, scripts/gpu_bench.py beside it is the benchmark a short loan completes: trainer against
# bare loop, DDP and FSDP, batch 16 and 32, 90 measured steps each, with NVML's view; run it first
# (docs/training.md, "On a GPU machine").
# Throughput and MFU are the trainer's last report: the last 10 steps, after compilation and warm-up.
# Exit status: 0 all well, 1 a gpu-marked test or a gate check failed (the table is still printed), 2 a bad argument or
# no GPU; a failed training or all-reduce run stops the script with its own output.
set -euo pipefail

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "$SCRIPTS_DIR")
PYTHON=${PYTHON:-python3}

log() { printf '[gpu_check] %s\n' "$*" >&2; }
fail() { printf 'gpu_check.sh: error: %s\n' "$*" >&2; exit 2; }

usage() {
    cat <<'EOF'
usage: gpu_check.sh [--steps N] [--batch-size N] [--skip-tests] [--workdir DIR]
  --steps N        training steps per run (default 50; at least 20, as the table reports steps after 10)
  --batch-size N   sequences of 1024 tokens per GPU per step (default 16)
  --skip-tests     do not run the gpu-marked tests
  --workdir DIR    where metrics and checkpoints go (default: a new temporary folder, removed at the end)
EOF
}

parse_args() {
    steps=50 batch_size=16 skip_tests=0 workdir="" tests_failed=0 gate_failed=0
    while (($#)); do
        case $1 in
            --steps|--batch-size|--workdir)
                (($# >= 2)) || fail "$1 needs a value (see --help)"
                case $1 in
                    --steps) steps=$2 ;;
                    --batch-size) batch_size=$2 ;;
                    --workdir) workdir=$2 ;;
                esac
                shift 2 ;;
            --skip-tests) skip_tests=1; shift ;;
            -h|--help) usage; exit 0 ;;
            *) fail "unknown argument '$1' (see --help)" ;;
        esac
    done
    if ! [[ $steps =~ ^[0-9]+$ ]] || ((steps < 20)); then
        fail "--steps must be a whole number of at least 20, not '$steps'"
    fi
    if ! [[ $batch_size =~ ^[0-9]+$ ]] || ((batch_size < 1)); then
        fail "--batch-size must be a positive whole number, not '$batch_size'"
    fi
    if [[ -n $workdir && ! -d $workdir ]]; then
        fail "--workdir $workdir is not a directory"
    fi
    return 0
}

count_gpus() {
    local count
    count=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)') \
        || fail "$PYTHON cannot import torch; set PYTHON to an interpreter that has it"
    ((count > 0)) || fail "torch sees no CUDA GPU on this host; run this script on a GPU machine"
    echo "$count"
}

run_gpu_tests() {
    if ((skip_tests)); then
        log "skipping the gpu-marked tests (--skip-tests)"
    elif [[ ! -f $REPO_ROOT/tests/image/test_gpu.py ]]; then
        log "no tests beside $SCRIPTS_DIR (not a checkout): skipping the gpu-marked tests"
    elif ! "$PYTHON" -c 'import pytest, testinfra' 2>/dev/null; then
        log "pytest or pytest-testinfra is not installed: skipping the gpu-marked tests"
    else
        log "running the gpu-marked tests"
        # A failure is reported at the end: the measurements are still worth having from a short loan.
        (cd "$REPO_ROOT" && TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none \
            "$PYTHON" -m pytest -m gpu -q tests/image/test_gpu.py tests/trainer) >&2 || tests_failed=1
    fi
}

run_regression_gate() {
    local gate=$REPO_ROOT/tools/regression/gate.py baseline=$REPO_ROOT/tools/regression/baselines/gpu-gpu.json action=check
    if [[ ! -f $gate ]]; then
        log "no tools/regression beside $SCRIPTS_DIR (not a checkout): skipping the regression gate"
        return 0
    fi
    if [[ ! -f $baseline ]]; then
        action=record
        log "no GPU baseline yet: recording $baseline (review it, then commit it)"
    fi
    log "regression gate ($action) on this host"
    "$PYTHON" "$gate" "$action" --host --flavor gpu --device gpu --python "$PYTHON" \
        --report-dir "$workdir/regression" || gate_failed=1
}

train() {  # train PARALLEL GPUS: gpt2-small for $steps steps; metrics in $workdir/PARALLEL.jsonl
    log "training gpt2-small, bf16, compile, $1, on $2 GPU(s), $steps steps"
    "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$2" "$SCRIPTS_DIR/train_ddp.py" \
        --model gpt2-small --parallel "$1" --precision bf16 --compile --seq-len 1024 \
        --batch-size "$batch_size" --max-steps "$steps" --warmup-steps 10 --log-every 10 --save-every 0 \
        --num-workers 2 --metrics-file "$workdir/$1.jsonl" --ckpt-dir "$workdir/checkpoints-$1" >&2
}

measure_allreduce() {  # measure_allreduce GPUS: bench_allreduce.py's JSON in $workdir/allreduce.json
    log "measuring NCCL all-reduce over $1 GPU(s)"
    "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$1" "$SCRIPTS_DIR/bench_allreduce.py" \
        --max-bytes 1G --json-file "$workdir/allreduce.json" >&2
}

print_table() {  # print_table GPUS
    "$PYTHON" - "$workdir" "$1" "$steps" "$batch_size" <<'EOF'
import json, pathlib, sys
import torch

workdir, gpus, steps, batch = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
allreduce = json.loads((workdir / "allreduce.json").read_text())
busbw = f"{allreduce['avg_busbw_gbps']:.1f}" if gpus > 1 else "n/a (1 GPU)"
print(f"\n{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
      f"gpt2-small, bf16, compile, seq 1024, batch {batch}/GPU, {steps} steps (last 10 reported)\n")
print("| parallel | GPUs | tokens/s | MFU | peak memory/GPU (GiB) | NCCL all-reduce busbw (GB/s) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for parallel in ("ddp", "fsdp"):
    last = json.loads((workdir / f"{parallel}.jsonl").read_text().splitlines()[-1])
    mfu = f"{100 * last['mfu']:.1f}%" if "mfu" in last else "n/a (unknown GPU peak)"
    print(f"| {parallel} | {gpus} | {last['tokens_per_sec']:.0f} | {mfu} | {last['max_memory_gib']:.1f} | {busbw} |")
EOF
}

main() {
    parse_args "$@"
    local gpus
    gpus=$(count_gpus)
    if [[ -z $workdir ]]; then
        workdir=$(mktemp -d)
        trap 'rm -rf "$workdir"' EXIT
    fi
    run_gpu_tests
    train ddp "$gpus"
    train fsdp "$gpus"
    measure_allreduce "$gpus"
    run_regression_gate
    print_table "$gpus"
    if ((tests_failed)); then
        printf 'gpu_check.sh: error: gpu-marked tests failed (their output is above the table)\n' >&2
        exit 1
    fi
    if ((gate_failed)); then
        printf 'gpu_check.sh: error: the regression gate failed (its report is above the table)\n' >&2
        exit 1
    fi
}

main "$@"
