"""The tiny training run every suite uses, and helpers that run the trainer on the torch host and read
back what it wrote.

Everything goes through the testinfra host (a shell in the image, or this machine), so the same tests
check the image and a local checkout. Every command has a coreutils timeout, so nothing hangs.
"""
from __future__ import annotations

import json
import shlex

import testinfra

# The model and data of every test run: a tiny CNN on 512 synthetic 16x16 images, seconds on a CPU.
TINY_MODEL = "--model tiny --image-size 16 --synthetic-samples 512"
# The trainer tests' run: an epoch is 16 steps of 32 samples over 2 ranks (batch 8 x grad-accum 2), so
# a 40-step run crosses two epoch boundaries.
TINY_RUN = f"{TINY_MODEL} --batch-size 8 --grad-accum 2 --warmup-steps 5 --lr 3e-3 --log-every 1 --seed 7"
RUN_TIMEOUT_S = 120
ENV = "OMP_NUM_THREADS=1"

# Runs train_ddp.main() unchanged, but also saves each rank's own parameters when the trainer saves
# its final checkpoint, so a test can compare the ranks (a checkpoint holds rank 0's copy only).
PER_RANK_DUMP = """
import os, sys
import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict
sys.path.insert(0, sys.argv.pop(1))
import train_ddp
save_training_state = train_ddp.save_training_state
def save_and_dump_this_rank(state, saver):
    save_training_state(state, saver)
    parameters = {name: tensor.cpu() for name, tensor in get_model_state_dict(state.model).items()}
    torch.save(parameters, state.args.ckpt_dir / f"rank{os.environ.get('RANK', '0')}_params.pt")
train_ddp.save_training_state = save_and_dump_this_rank
sys.exit(train_ddp.main(sys.argv[1:]))
"""


def make_workdir(host: testinfra.host.Host) -> str:
    return host.check_output("mktemp -d")


def torchrun(script: str, nproc: int = 2, options: str = "") -> str:
    """A torchrun command line for SCRIPT on one node, on a free rendezvous port."""
    return f"{ENV} timeout {RUN_TIMEOUT_S} torchrun --standalone --nproc-per-node={nproc} {options} {script}"


# What interrupt_when_step_logged sends, where $pid is coreutils timeout (torchrun() wraps torchrun in it),
# torchrun its child and the workers torchrun's children. `kill $pid` would signal timeout, which passes a
# signal on twice (to torchrun, then to its whole process group), and torchrun's agent raises once per
# signal it receives, so a second one cuts its shutdown of the workers short.
SIGTERM_TO_TORCHRUN = "kill -TERM $(pgrep -P $pid)"
SIGTERM_TO_THE_WORKERS = "pkill -TERM -P $(pgrep -P $pid)"


def interrupt_when_step_logged(host: testinfra.host.Host, command: str, workdir: str, name: str, step: int,
                               kill: str) -> tuple[int, float, str]:
    """Starts COMMAND, which logs its metrics to WORKDIR/NAME.jsonl, in the background; runs the shell
    command KILL ($pid is COMMAND's pid) once STEP is logged, and waits for COMMAND to end. Returns its
    exit status, the seconds it took to exit after KILL, and its output (kept in WORKDIR/NAME.log)."""
    log, metrics = f"{workdir}/{name}.log", f"{workdir}/{name}.jsonl"
    status, milliseconds = host.check_output(f"""
{command} > {log} 2>&1 &
pid=$!
timeout {RUN_TIMEOUT_S} bash -c 'until grep -q "\\"step\\": {step}," {metrics} 2>/dev/null; do sleep 0.05; done'
{kill}
signalled=$(date +%s%N)
wait $pid
status=$?
echo "$status $(( ($(date +%s%N) - signalled) / 1000000 ))"
""").split()[-2:]
    return int(status), int(milliseconds) / 1000, host.file(log).content_string


def write_per_rank_dump(host: testinfra.host.Host, workdir: str) -> str:
    """Writes the PER_RANK_DUMP wrapper into WORKDIR on the host and returns its path."""
    path = f"{workdir}/dump_ranks.py"
    host.check_output(f"cat > {path} <<'EOF'\n{PER_RANK_DUMP}\nEOF")
    return path


def read_metrics(host: testinfra.host.Host, path: str) -> list[dict]:
    return [json.loads(line) for line in host.file(path).content_string.splitlines() if line.strip()]


def python_json(host: testinfra.host.Host, code: str) -> object:
    """Runs CODE with the host's python and returns what it printed as JSON."""
    return json.loads(host.check_output(f"{ENV} timeout 60 python -c {shlex.quote(code)}"))


def tensors_equal(host: testinfra.host.Host, first: str, second: str, first_key: str | None = "model",
                  second_key: str | None = "model") -> bool:
    """Whether two files hold bit-identical tensor dicts: a checkpoint's KEY entry, or (key None) the file.

    Both are loaded with weights_only=True, as the trainer loads them.
    """
    return python_json(host, f"""
import json, torch
a = torch.load({first!r}, weights_only=True)
b = torch.load({second!r}, weights_only=True)
a, b = (a[{first_key!r}] if {first_key!r} else a), (b[{second_key!r}] if {second_key!r} else b)
print(json.dumps(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))
""")
