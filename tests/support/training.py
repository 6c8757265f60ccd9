"""The tiny training run every suite uses, and helpers that run the trainer on the torch host and read
back what it wrote.

Everything goes through the testinfra host (a shell in the image, or this machine), so the same tests
check the image and a local checkout. Every command has a coreutils timeout, so nothing hangs.
"""
from __future__ import annotations

import json
import shlex

import testinfra

from tests.support.waiting import wait_until

# The model and data of every test run: a tiny CNN on 512 synthetic 16x16 images, seconds on a CPU.
TINY_MODEL = "--model tiny --image-size 16 --synthetic-samples 512"
# The trainer tests' run: an epoch is 16 steps of 32 samples over 2 ranks (batch 8 x grad-accum 2), so
# a 40-step run crosses two epoch boundaries.
TINY_RUN = f"{TINY_MODEL} --batch-size 8 --grad-accum 2 --warmup-steps 5 --lr 3e-3 --log-every 1 --seed 7"
RUN_TIMEOUT_S = 120
IMAGE_SCRIPTS_DIR = "/opt/scripts"
ENV = "OMP_NUM_THREADS=1"

# Runs train_ddp.main() unchanged, but also saves each rank's own parameters whenever the trainer saves
# a checkpoint, so a test can compare the ranks (a checkpoint holds rank 0's copy only).
PER_RANK_DUMP = """
import os, sys
import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict
sys.path.insert(0, sys.argv.pop(1))
import train_ddp
from trainer.checkpointer import Checkpointer
save = Checkpointer.save
def save_and_dump_this_rank(checkpointer, **options):
    save(checkpointer, **options)
    parameters = {name: tensor.cpu() for name, tensor in get_model_state_dict(checkpointer.state.model).items()}
    torch.save(parameters, checkpointer.ckpt_dir / f"rank{os.environ.get('RANK', '0')}_params.pt")
Checkpointer.save = save_and_dump_this_rank
sys.exit(train_ddp.main(sys.argv[1:]))
"""


def make_workdir(host: testinfra.host.Host) -> str:
    return host.check_output("mktemp -d")


def launcher_words(nproc: int | None, nnodes: int = 1, rdzv_endpoint: str | None = None,
                   rdzv_id: str | None = None) -> list[str]:
    """torchrun with NPROC ranks on this node: standalone (a free rendezvous port), or one of NNODES nodes
    meeting at RDZV_ENDPOINT; plain python when NPROC is None."""
    if nproc is None:
        return ["python"]
    if rdzv_endpoint is None:
        return ["torchrun", "--standalone", f"--nproc-per-node={nproc}"]
    return ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]


def trainer_command(flags: str = "", *, nproc: int | None = 2, nnodes: int = 1, rdzv_endpoint: str | None = None,
                    rdzv_id: str | None = None, scripts_dir: str = IMAGE_SCRIPTS_DIR, script: str | None = None,
                    launcher_options: str = "", timeout_s: int | None = RUN_TIMEOUT_S, detached: bool = False) -> str:
    """The one launch line of the sample trainer in every suite: SCRIPTS_DIR/train_ddp.py (or SCRIPT, a
    wrapper around it) under torchrun (launcher_words) or plain python; one thread per rank; under
    coreutils timeout, so nothing hangs. FLAGS follow the script (TINY_MODEL or TINY_RUN for the tiny
    run). TIMEOUT_S None leaves timeout out, for a run that the container's stop must find as the
    launcher itself (tests/image/test_stop.py). DETACHED starts the launcher under `nohup`, as a user
    who detaches a run from its terminal does; after timeout, which would take SIGHUP back for its child.
    tests/unit/test_launch_lines.py fails on a launch line written anywhere else."""
    launcher = " ".join(["nohup"] * detached + launcher_words(nproc, nnodes, rdzv_endpoint, rdzv_id))
    timeout = f"timeout {timeout_s}" if timeout_s else ""
    script = script or f"{scripts_dir}/train_ddp.py"
    return " ".join(part for part in (ENV, timeout, launcher, launcher_options, script, flags) if part)


def trainer_argv(flags: str = "", *, nproc: int | None = 2, nnodes: int = 1, rdzv_endpoint: str | None = None,
                 rdzv_id: str | None = None, scripts_dir: str = IMAGE_SCRIPTS_DIR) -> list[str]:
    """The same launch line as words, for `docker exec` or a container's command: no timeout, and no
    environment (the caller's, or its own `env OMP_NUM_THREADS=1`)."""
    return [*launcher_words(nproc, nnodes, rdzv_endpoint, rdzv_id), f"{scripts_dir}/train_ddp.py", *shlex.split(flags)]


# What interrupt_when_step_logged sends, where $pid is coreutils timeout (trainer_command() wraps torchrun in it),
# torchrun its child and the workers torchrun's children. `kill $pid` would signal timeout, which passes a
# signal on twice (to torchrun, then to its whole process group), and torchrun's agent raises once per
# signal it receives, so a second one cuts its shutdown of the workers short.
SIGTERM_TO_TORCHRUN = "kill -TERM $(pgrep -P $pid)"
SIGTERM_TO_THE_WORKERS = "pkill -TERM -P $(pgrep -P $pid)"


def interrupt_when_logged(host: testinfra.host.Host, command: str, workdir: str, name: str, text: str, kill: str,
                          watched: str | None = None) -> tuple[int, float, str]:
    """Starts COMMAND in the background with its output in WORKDIR/NAME.log; runs the shell command KILL
    ($pid is COMMAND's pid) once TEXT appears in WATCHED (that log by default), and waits for COMMAND to
    end. Returns its exit status, the seconds it took to exit after KILL, and its output.

    The watch runs on the host itself, beside COMMAND, every 0.05 s: watched from here, through one
    `docker exec` a look, a loaded machine saw TEXT seconds late, and a short run was over before KILL."""
    log, run = f"{workdir}/{name}.log", f"{workdir}/{name}.run"
    watched = watched or log
    # In the background: COMMAND; its pid in .pid; the watcher, which stamps .signalled and runs KILL (a
    # watcher whose COMMAND ended first just ends); once COMMAND and the watcher ended, COMMAND's exit
    # status and the time it ended in .end.
    watcher = (f"until grep -qF -- {shlex.quote(text)} {watched} 2>/dev/null; do "
               f"kill -0 $pid 2>/dev/null || exit 0; sleep 0.05; done; date +%s%N > {run}.signalled; {kill}")
    background = (f"{command} > {log} 2>&1 & pid=$!; echo $pid > {run}.pid; ( {watcher} ) & "
                  f'wait $pid; status=$?; ended=$(date +%s%N); wait; echo "$status $ended" > {run}.end')
    host.check_output(f"{{ {background}; }} > /dev/null 2>&1 &")

    def stamp(suffix: str) -> list[str]:
        return host.run(f"cat {run}.{suffix} 2>/dev/null").stdout.split()
    wait_until(lambda: stamp("signalled") or stamp("end"), RUN_TIMEOUT_S, interval=0.1,
               failure=lambda: f"{text!r} never reached {watched}; the run's log:\n{host.file(log).content_string}")
    status, end_ns = wait_until(lambda: stamp("end"), RUN_TIMEOUT_S, interval=0.1, failure=lambda: (
        f"the run did not end within {RUN_TIMEOUT_S} s of `{kill}`; its log:\n{host.file(log).content_string}"))
    signalled = stamp("signalled")
    assert signalled, f"the run ended before {text!r} reached {watched}; its log:\n{host.file(log).content_string}"
    return int(status), (int(end_ns) - int(signalled[0])) / 1e9, host.file(log).content_string


def interrupt_when_step_logged(host: testinfra.host.Host, command: str, workdir: str, name: str, step: int,
                               kill: str) -> tuple[int, float, str]:
    """interrupt_when_logged for a trainer whose COMMAND logs its metrics to WORKDIR/NAME.jsonl: KILL
    runs once STEP is logged there."""
    return interrupt_when_logged(host, command, workdir, name, f'"step": {step},', kill,
                                 watched=f"{workdir}/{name}.jsonl")


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
