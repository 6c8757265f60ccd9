"""Benchmark: seconds from starting the image to JupyterLab answering and to the first SSH login, under
each runtime's rules, next to Docker, in one run (BENCHMARKS.md, "Start-up under other runtimes").

    IMAGE_UNDER_TEST=pytorch-dev:cpu-latest .venv-test/bin/python -m tools.bench_start_times

Each runtime starts the image ROUNDS times, in turn (docker, then each other runtime, then again), so
background load hits all alike; the median of each is printed. Rootless Podman needs
.ci/install-podman.sh; the image is loaded into its store once, before the clock runs, and removed after.
Enroot/Pyxis and `apptainer exec` run no services, so they have no row.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

import paramiko
import requests

from tests.support.runtime_rules import (OPENSHIFT_UID, TOKEN, apptainer_run_flags, fs_group_volume,
                                          kubernetes_restricted_flags, make_home)
from tests.support.containers import free_port
from tests.support.podman import RootlessPodman, load_image, reset, rootless_podman
from tests.support.ssh_client import generate_key, public_line, ssh_session

TIMEOUT_S = 180


def seconds_until(predicate: Callable[[], bool], started: float) -> float:
    while time.monotonic() - started < TIMEOUT_S:
        try:
            if predicate():
                return time.monotonic() - started
        except (requests.ConnectionError, OSError, EOFError, paramiko.SSHException):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"no answer within {TIMEOUT_S} s")


def jupyter_answers(port: int) -> bool:
    return requests.get(f"http://127.0.0.1:{port}/api/status", params={"token": TOKEN}, timeout=2).status_code == 200


def ssh_logs_in(port: int, key) -> bool:
    with ssh_session(port, key=key):
        return True


def measure(command: list[str], remove: list[str], jupyter_port: int, ssh_port: int | None, key) -> tuple[float, float | None]:
    started = time.monotonic()
    subprocess.run(command, check=True, capture_output=True, timeout=TIMEOUT_S)
    try:
        to_ssh = seconds_until(lambda: ssh_logs_in(ssh_port, key), started) if ssh_port else None
        to_jupyter = seconds_until(lambda: jupyter_answers(jupyter_port), started)
    finally:
        subprocess.run(remove, capture_output=True, timeout=TIMEOUT_S)
    return to_jupyter, to_ssh


def service_options(jupyter_port: int, ssh_port: int | None, key) -> list[str]:
    options = ["--shm-size=1g", "--publish", f"127.0.0.1:{jupyter_port}:8888", "--env", f"JUPYTER_TOKEN={TOKEN}"]
    if ssh_port:
        options += ["--publish", f"127.0.0.1:{ssh_port}:2222", "--env", f"SSH_AUTHORIZED_KEYS={public_line(key)}"]
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    image = os.environ["IMAGE_UNDER_TEST"]
    key = generate_key()
    podman: RootlessPodman = rootless_podman()
    podman_image = load_image(podman, image)
    scratch = pathlib.Path(tempfile.mkdtemp())
    home = make_home(scratch)
    volume = fs_group_volume(scratch)
    # name -> (options before the image, whether SSH runs, docker or podman)
    runtimes = {
        "Docker (root, PUID/PGID)": ([], True, "docker"),
        "Kubernetes restricted (docker flags)": (kubernetes_restricted_flags(1000, 1000, volume), False, "docker"),
        "OpenShift (docker flags)": (kubernetes_restricted_flags(OPENSHIFT_UID, 0, volume), False, "docker"),
        "Apptainer run (docker flags)": (apptainer_run_flags(home), False, "docker"),
        "rootless Podman": ([], True, "podman"),
        "rootless Podman, --userns=keep-id": (["--userns=keep-id"], False, "podman"),
    }
    results: dict[str, list[tuple[float, float | None]]] = {name: [] for name in runtimes}
    try:
        for _ in range(args.rounds):
            for name, (options, with_ssh, engine) in runtimes.items():
                container, jupyter_port = f"pt-bench-{uuid.uuid4().hex[:8]}", free_port()
                ssh_port = free_port() if with_ssh else None
                run_options = ["run", "--detach", "--name", container, *service_options(jupyter_port, ssh_port, key),
                               *options]
                if engine == "docker":
                    command, remove = ["docker", *run_options, image], ["docker", "rm", "--force", container]
                else:
                    command = podman.command(*run_options, podman_image)
                    remove = podman.command("rm", "--force", container)
                results[name].append(measure(command, remove, jupyter_port, ssh_port, key))
    finally:
        reset(podman)
        shutil.rmtree(scratch)
    print("| runtime | to JupyterLab answering (median, s) | to the first SSH login (median, s) |")
    print("|---|---|---|")
    for name, samples in results.items():
        jupyter = statistics.median(sample[0] for sample in samples)
        ssh = [sample[1] for sample in samples if sample[1] is not None]
        print(f"| {name} | {jupyter:.1f} | {f'{statistics.median(ssh):.1f}' if ssh else 'no SSH (non-root)'} |")


if __name__ == "__main__":
    main()
