"""The soak: a container cycled, again and again, through what a team does to it, each stop checked.

    make soak CYCLES=3                                     # FLAVOR=cpu ...; SOAK_SEED, SOAK_JSON
    IMAGE_UNDER_TEST=pytorch-dev:cpu-latest .venv-test/bin/python -m tools.soak --cycles 30 --json .build/soak.json

Each cycle starts a container, starts TRAINERS_PER_CYCLE trainers in launch shapes drawn from SHAPES (the
ones the stop contract covers: an SSH session's foreground, tmux, `nohup`, `docker exec`, a JupyterLab
terminal, a notebook kernel, torchrun with 2 workers, a `| tee` pipeline), waits until each has trained,
waits a random while, and stops the container in a way drawn from STOPS, under a condition drawn from
CONDITIONS. Then it checks that every trainer saved a checkpoint at or past the last step it logged, that
the container's last line is honest ("stopped cleanly" exactly when nothing was lost), and, after
`docker start`, that each checkpoint loads and a resume goes on from the step after it. It ends with

    soak: C cycles, T trainers stopped, L checkpoints lost, D dishonest log lines, longest stop S s

exits 1 when L or D is not 0, and writes every cycle to the JSON file. BENCHMARKS.md, "Soak", records runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import tempfile
import time

import requests

from tests.support import HTTP_TIMEOUT_S
from tests.support.containers import Container, docker, start_container
from tests.support.jupyter_websockets import JupyterAccess, run_in_terminal
from tests.support.notebook_kernel import start_in_a_notebook_kernel
from tests.support.ssh_client import generate_key, public_line, ssh_session
from tests.support.stopping import (GRACE_PERIOD_S, endless_flags, endless_run_command, training_in_a_kernel,
                                    wait_until_trained)
from tests.support.training import trainer_command
from tests.support.waiting import wait_until

SHAPES = ("ssh", "tmux", "nohup", "docker exec", "terminal", "kernel", "torchrun", "tee")
STOPS = ("docker stop", "docker kill -s TERM", "File > Shut Down")
CONDITIONS = ("as it is", "CPU load", "memory limit")
TRAINERS_PER_CYCLE = 3
WAIT_S = (0.0, 20.0)  # the random wait between the trainers' second step and the stop
MEMORY_LIMIT = "3g"
TOKEN = "soak-token-2f7c9a41e6b3"
ENDS_S = GRACE_PERIOD_S + 30  # a stop that takes longer failed, whatever it says
RESUME_S = 300


def launch(shape: str, name: str, container: Container, key, held: contextlib.ExitStack) -> None:
    """Starts trainer NAME as SHAPE starts it; what must stay open until the stop (an SSH session whose
    foreground runs the trainer) is entered into HELD."""
    single = endless_run_command(name, None)
    if shape == "ssh":
        client = held.enter_context(ssh_session(container.published_port(2222), key=key))
        client.exec_command(single)  # the session's foreground, open until the stop
    elif shape == "nohup":
        with ssh_session(container.published_port(2222), key=key) as client:
            # stdin from /dev/null: a job that kept the session's would keep the session open
            client.exec_command(f"{endless_run_command(name, None, detached=True)} < /dev/null &")[1] \
                .channel.recv_exit_status()
    elif shape in ("tmux", "torchrun", "tee"):
        command = {"tmux": single, "torchrun": endless_run_command(name, 2),
                   "tee": f"{trainer_command(endless_flags(name), nproc=None, timeout_s=None)} 2>&1 "
                          f"| tee /tmp/{name}.log"}[shape]
        docker("exec", "--user", "dev", container.name, "tmux", "new-session", "-d", "-s", name, command)
    elif shape == "docker exec":
        docker("exec", "--detach", "--user", "dev", container.name, "bash", "-c", single)
    elif shape == "terminal":
        run_in_terminal(jupyter(container), f"echo start''ed; {single}", until="started")
    elif shape == "kernel":
        start_in_a_notebook_kernel(container, jupyter(container).base_url.rstrip("/"), TOKEN,
                                   training_in_a_kernel(name))


def jupyter(container: Container) -> JupyterAccess:
    return JupyterAccess(base_url=f"http://127.0.0.1:{container.published_port(8888)}/", token=TOKEN)


def stop(kind: str, container: Container) -> float:
    """Stops the container as KIND does; returns how long it took to end."""
    started = time.monotonic()
    if kind == "docker stop":
        docker("stop", "--time", str(GRACE_PERIOD_S), container.name, timeout=ENDS_S)
    elif kind == "docker kill -s TERM":
        docker("kill", "--signal", "TERM", container.name)
    else:
        reply = requests.post(f"{jupyter(container).base_url}api/shutdown",
                              headers={"Authorization": f"token {TOKEN}"}, timeout=HTTP_TIMEOUT_S)
        reply.raise_for_status()
    wait_until(lambda: not container.state()["Running"], ENDS_S, interval=0.2,
               failure=lambda: f"the container did not end within {ENDS_S} s of {kind}")
    return time.monotonic() - started


def copied(container: Container, path: str, into: pathlib.Path) -> pathlib.Path | None:
    target = into / pathlib.Path(path).name
    return target if docker("cp", f"{container.name}:{path}", str(target), check=False).returncode == 0 else None


def steps_logged(metrics: pathlib.Path | None) -> list[int]:
    if metrics is None:
        return []
    steps = []
    for line in metrics.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                steps.append(record["step"])
    return steps


def what_it_left(container: Container, name: str, folder: pathlib.Path) -> dict:
    """The last step trainer NAME logged and the newest checkpoint it saved, read from the stopped container."""
    folder.mkdir()
    logged = steps_logged(copied(container, f"/tmp/{name}.jsonl", folder))
    checkpoints = copied(container, f"/tmp/{name}-ckpt", folder)
    saved = sorted(int(match.group(1)) for path in (checkpoints.glob("step_*.pt") if checkpoints else [])
                   if (match := re.fullmatch(r"step_(\d+)\.pt", path.name)))
    last, newest = max(logged, default=None), max(saved, default=None)
    return {"last_logged": last, "saved": newest, "lost": newest is None or (last is not None and newest < last)}


def resume(container: Container, trainers: list[dict]) -> None:
    """Each trainer that saved, started again on its checkpoint folder for one more step, all at once:
    RESUMED_AT is the first step its new metrics file shows (its checkpoint's step plus one when it works)."""
    runs = []
    for trainer in trainers:
        if trainer["saved"] is None:
            continue
        name, nproc = trainer["name"], 2 if trainer["shape"] == "torchrun" else None
        flags = f"{endless_flags(name)} --max-steps {trainer['saved'] + 1} --metrics-file /tmp/{name}-resumed.jsonl"
        command = trainer_command(flags, nproc=nproc, timeout_s=RESUME_S)
        runs.append((trainer, subprocess.Popen(["docker", "exec", "--user", "dev", container.name, "bash", "-c",
                                                f"{command} > /tmp/{name}-resumed.log 2>&1"])))
    for trainer, process in runs:
        process.wait(timeout=RESUME_S + 60)
        result = container.run(f"cat /tmp/{trainer['name']}-resumed.jsonl")
        steps = [json.loads(line)["step"] for line in result.stdout.splitlines() if '"step"' in line]
        trainer["resumed_at"] = min(steps, default=None)
        if trainer["resumed_at"] != trainer["saved"] + 1:
            trainer["lost"] = True  # a checkpoint that does not load, or a resume that does not go on, lost it
            trainer["resume_log"] = container.run(f"tail -5 /tmp/{trainer['name']}-resumed.log").stdout


def load(condition: str) -> list[subprocess.Popen]:
    """Two busy processes on the host beside the container, for the CPU load condition."""
    if condition != "CPU load":
        return []
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]


def cycle(image: str, number: int, rng: random.Random, scratch: pathlib.Path) -> dict:
    shapes = rng.sample(SHAPES, TRAINERS_PER_CYCLE)
    kind, condition, wait_s = rng.choice(STOPS), rng.choice(CONDITIONS), round(rng.uniform(*WAIT_S), 1)
    key = generate_key()
    options = ["--publish", "127.0.0.1::2222", "--publish", "127.0.0.1::8888",
               "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}", "--env", f"JUPYTER_TOKEN={TOKEN}"]
    if condition == "memory limit":
        options += ["--memory", MEMORY_LIMIT, "--memory-swap", MEMORY_LIMIT]
    container = start_container(image, options=options)
    record = {"cycle": number, "shapes": shapes, "stop": kind, "condition": condition, "wait_s": wait_s}
    try:
        container.wait_until_healthy()
        names = [f"{shape.replace(' ', '-')}{index}" for index, shape in enumerate(shapes)]
        busy: list[subprocess.Popen] = []
        with contextlib.ExitStack() as held:
            for shape, name in zip(shapes, names):
                launch(shape, name, container, key, held)
            for name in names:
                wait_until_trained(container, name)
            busy = load(condition)
            time.sleep(wait_s)
            record["stop_s"] = round(stop(kind, container), 1)
        for process in busy:
            process.kill()
        lines = container.logs().splitlines()
        record["last_line"] = lines[-1] if lines else ""
        record["exit_code"] = container.state()["ExitCode"]
        trainers = [{"name": name, "shape": shape, **what_it_left(container, name, scratch / f"{number}-{name}")}
                    for shape, name in zip(shapes, names)]
        says_clean = record["last_line"].endswith("stopped cleanly")
        record["honest"] = says_clean == (not any(trainer["lost"] for trainer in trainers))
        docker("start", container.name)
        container.wait_until_started()
        resume(container, trainers)
        record["trainers"] = trainers
        return record
    finally:
        container.remove()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="the random draws' seed (default: the time)")
    parser.add_argument("--json", default=".build/soak.json", help="where every cycle is written")
    arguments = parser.parse_args(argv)
    image = os.environ.get("IMAGE_UNDER_TEST")
    if not image:
        print("soak: IMAGE_UNDER_TEST is not set: run it with `make soak`, which builds the image", file=sys.stderr)
        return 2
    seed = arguments.seed if arguments.seed is not None else int(time.time())
    rng, cycles = random.Random(seed), []
    output = pathlib.Path(arguments.json)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        for number in range(1, arguments.cycles + 1):
            cycles.append(cycle(image, number, rng, pathlib.Path(scratch)))
            record = cycles[-1]
            lost = sum(trainer["lost"] for trainer in record["trainers"])
            print(f"cycle {number}: {', '.join(record['shapes'])}; {record['stop']}, {record['condition']}, after "
                  f"{record['wait_s']} s; stop {record['stop_s']} s; {lost} lost; "
                  f"{'honest' if record['honest'] else 'DISHONEST'}: {record['last_line'][-60:]}", flush=True)
            output.write_text(json.dumps({"seed": seed, "image": image, "cycles": cycles}, indent=2) + "\n")
    trainers = sum(len(record["trainers"]) for record in cycles)
    lost = sum(trainer["lost"] for record in cycles for trainer in record["trainers"])
    dishonest = sum(not record["honest"] for record in cycles)
    longest = max((record["stop_s"] for record in cycles), default=0.0)
    print(f"soak: {len(cycles)} cycles, {trainers} trainers stopped, {lost} checkpoints lost, {dishonest} dishonest "
          f"log lines, longest stop {longest:.1f} s (seed {seed}; every cycle in {output})")
    return 1 if lost or dishonest else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
