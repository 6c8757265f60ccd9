#!/usr/bin/env python3
"""Benchmark: seconds from `docker run` to the container's healthcheck reporting healthy, with the
image's own HEALTHCHECK (a 0.5 s start interval), with a 1 s start interval (the image's until
2026-12-01), and with the same check probing every 5 s from the start (what engines before Docker 25
do) (BENCHMARKS.md, "Start to healthy").

    python3 tools/bench_healthy.py IMAGE [ROUNDS]

The ways alternate, ROUNDS each, so background load hits them alike; the health state is polled every
0.1 s. The containers run with SSH and JupyterLab, as compose starts them (with tests' 1 GB of shm).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid

WAYS = {"start interval 0.5 s (this image)": [],
        "start interval 1 s": ["--health-start-interval=1s"],
        "every 5 s from the start": ["--health-start-interval=5s"]}
TIMEOUT_S = 300


def seconds_to_healthy(image: str, options: list[str]) -> float:
    name = f"bench-healthy-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    subprocess.run(["docker", "run", "--detach", "--name", name, "--shm-size=1g", *options, image], capture_output=True, check=True)
    try:
        while time.monotonic() - started < TIMEOUT_S:
            state = json.loads(subprocess.run(["docker", "inspect", "--format", "{{json .State}}", name],
                                              capture_output=True, text=True, check=True).stdout)
            if (state.get("Health") or {}).get("Status") == "healthy":
                return time.monotonic() - started
            if not state.get("Running"):
                raise SystemExit(f"{name} exited before turning healthy")
            time.sleep(0.1)
        raise SystemExit(f"{name} was not healthy after {TIMEOUT_S} s")
    finally:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: bench_healthy.py IMAGE [ROUNDS]", file=sys.stderr)
        return 2
    rounds = int(argv[2]) if len(argv) == 3 else 5
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way, options in WAYS.items():
            times[way].append(seconds_to_healthy(argv[1], options))
            print(f"{way}: healthy after {times[way][-1]:.1f} s", flush=True)
    for way, values in times.items():
        print(f"{way}: median {statistics.median(values):.1f} s, runs {', '.join(f'{v:.1f}' for v in values)}")
    print("load average: " + " ".join(f"{load:.2f}" for load in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
