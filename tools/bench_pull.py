#!/usr/bin/env python3
"""Benchmark: seconds to pull each variant of a release (gzip, -zstd) into an empty engine, and the
compressed size of our layers (BENCHMARKS.md, "Releases: zstd and gzip").

    sudo python3 tools/bench_pull.py REGISTRY/NAME:TAG [ROUNDS]    # after make push and make zstd

An empty engine is a private dockerd (its own data root, exec root, socket and bridge, no iptables)
started for each pull and removed after it, so no layer is ever already there. Its bridge is one of its
own (BENCH_BRIDGE, on the documentation range 192.0.2.0/24, which carries no traffic): a dockerd given
`--bridge=none` deletes the machine's docker0 at start, cutting every running container of the
machine's own engine off its network. Rounds alternate between the variants, so background load hits both alike.
"""
from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "release"))
from registry_api import Registry  # noqa: E402  (the release tools' registry client)


def manifest(reference: str) -> dict:
    """The image manifest REFERENCE (REGISTRY/NAME:TAG) names, through the release tools' registry client."""
    repository, _, tag = reference.rpartition(":")
    return Registry(repository).manifest(tag)[0]


BENCH_BRIDGE = "pdbench0"


def own_bridge() -> None:
    if subprocess.run(["ip", "link", "show", BENCH_BRIDGE], capture_output=True, check=False).returncode != 0:
        subprocess.run(["ip", "link", "add", BENCH_BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", "192.0.2.1/24", "dev", BENCH_BRIDGE], check=True)


def timed_pull_into_empty_engine(reference: str) -> float:
    own_bridge()
    root = tempfile.mkdtemp(prefix="bench-pull-")
    socket = f"unix://{root}/docker.sock"
    daemon = subprocess.Popen(["dockerd", f"--data-root={root}/data", f"--exec-root={root}/exec", f"--host={socket}",
                               f"--pidfile={root}/docker.pid", f"--bridge={BENCH_BRIDGE}", "--iptables=false",
                               "--ip6tables=false", "--storage-driver=overlay2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = ["docker", f"--host={socket}"]
    try:
        for _ in range(120):
            if subprocess.run([*client, "info"], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.5)
        started = time.monotonic()
        subprocess.run([*client, "pull", "--quiet", reference], capture_output=True, check=True, timeout=1800)
        return time.monotonic() - started
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        # Removing a whole engine's layers takes minutes on a busy disk: it goes on behind the next pull.
        subprocess.Popen(["rm", "-rf", root])


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or os.geteuid() != 0:
        print("usage (as root): bench_pull.py REGISTRY/NAME:TAG [ROUNDS]", file=sys.stderr)
        return 2
    gzip_ref, rounds = argv[1], int(argv[2]) if len(argv) == 3 else 3
    variants = {"gzip": gzip_ref, "zstd": gzip_ref + "-zstd"}
    gzip_layers, zstd_layers = manifest(variants["gzip"])["layers"], manifest(variants["zstd"])["layers"]
    ours = [index for index, (a, b) in enumerate(zip(gzip_layers, zstd_layers)) if a["digest"] != b["digest"]]
    for name, layers in (("gzip", gzip_layers), ("zstd", zstd_layers)):
        print(f"{name}: our {len(ours)} layers {sum(layers[i]['size'] for i in ours) / 1e6:.1f} MB compressed, "
              f"the base's {len(layers) - len(ours)} layers {sum(l['size'] for l in layers) / 1e6 - sum(layers[i]['size'] for i in ours) / 1e6:.1f} MB")
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, reference in variants.items():
            times[name].append(timed_pull_into_empty_engine(reference))
            print(f"{name}: pulled in {times[name][-1]:.1f} s", flush=True)
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.1f} s, runs {', '.join(f'{v:.1f}' for v in values)}")
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    subprocess.run(["ip", "link", "delete", BENCH_BRIDGE], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
