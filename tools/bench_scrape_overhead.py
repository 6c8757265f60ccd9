"""Benchmark: the trainer's throughput with --prometheus-port while a real Prometheus scrapes it every
second, against the same run without it (BENCHMARKS.md, "Prometheus metrics").

    IMAGE_UNDER_TEST=pytorch-dev:cpu-latest .venv-test/bin/python -m tools.bench_scrape_overhead

One container of the image (named node0 on a docker network, as compose.multinode.yaml names its first
node) runs the sample trainer under torchrun, 2 CPU ranks, again and again: with the flag and without,
in ABBA order, so background load hits both alike. Prometheus (the test image, the repository's config
at a 1 s scrape interval) finds it by name. Throughput is the trainer's own samples/s from
--metrics-file, leaving out the first --warmup steps. Printed: the exporter's own cost per step and per
scrape, measured apart from any training run; the median of each variant and their ratio; and the
median of the ratios of back-to-back pairs, which cancels most of the background load.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import tempfile
import uuid
from pathlib import Path

from tests.support.containers import docker, start_container
from tests.support.prometheus_server import build_prometheus_image, fast_config_copy, start_prometheus

LOG_EVERY = 10
# The exporter's own cost, measured in the trainer's image without the noise of a training run: the
# calls the training loop makes per step (and per report), and rendering one scrape's page.
COST_PER_CALL = """
import json, sys, time, timeit
sys.path.insert(0, "/opt/scripts")
from prometheus_client import generate_latest
from trainer import prometheus
from trainer.distributed import Placement
prometheus.serve("127.0.0.1", 9402, Placement(rank=0, local_rank=0, world_size=8))
prometheus.training_started(0)
record = {"loss": 2.5, "lr": 1e-3, "samples_per_sec": 512.0, "tokens_per_sec": 524288.0, "mfu": 0.4}
steps = 200_000
started = time.perf_counter()
for step in range(1, steps + 1):
    prometheus.step_finished(step)
    if step % 10 == 0:
        prometheus.record_reported(record)
per_step = (time.perf_counter() - started) / steps
registry = prometheus._exporter.registry
per_scrape = timeit.timeit(lambda: generate_latest(registry), number=500) / 500
print(json.dumps({"per_step_us": per_step * 1e6, "per_scrape_ms": per_scrape * 1e3,
                  "page_bytes": len(generate_latest(registry))}))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the throughput")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each variant")
    parser.add_argument("--model", default="small", help="trainer --model")
    return parser.parse_args()


def trainer_command(args: argparse.Namespace, run: str, with_metrics: bool) -> str:
    flags = (f"--model {args.model} --batch-size 32 --num-workers 1 --device cpu --max-steps {args.steps} "
             f"--log-every {LOG_EVERY} --save-every 0 --seed 0 --ckpt-dir /tmp/{run}/ckpt "
             f"--metrics-file /tmp/{run}/metrics.jsonl")
    if with_metrics:
        flags += " --prometheus-port 9401"
    return (f"mkdir -p /tmp/{run} && OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 "
            f"/opt/scripts/train_ddp.py {flags} >/tmp/{run}/log 2>&1 && cat /tmp/{run}/metrics.jsonl")


def samples_per_second(metrics_lines: str, warmup: int) -> float:
    """Samples/s over the reports after WARMUP, weighted by time (as scripts/bench_trainer.py does)."""
    records = [json.loads(line) for line in metrics_lines.splitlines() if line.startswith("{")]
    measured = [record for record in records if record["step"] > warmup]
    seconds = sum(record["step_time_ms"] / 1000 * LOG_EVERY for record in measured)
    samples = sum(record["samples_per_sec"] * record["step_time_ms"] / 1000 * LOG_EVERY for record in measured)
    return samples / seconds


def main() -> None:
    args = parse_args()
    image = os.environ["IMAGE_UNDER_TEST"]
    build_prometheus_image()
    network = f"pt-bench-monitoring-{uuid.uuid4().hex[:8]}"
    docker("network", "create", network)
    node = prometheus = None
    try:
        node = start_container(image, command=["sleep", "infinity"],
                               options=["--network", network, "--network-alias", "node0", "--hostname", "node0"])
        cost = node.run(f"python -c {shlex.quote(COST_PER_CALL)}")
        assert cost.rc == 0, cost.stderr
        print(f"exporter cost: {cost.stdout.strip()}", flush=True)
        with tempfile.TemporaryDirectory() as config_root:
            prometheus = start_prometheus(network, fast_config_copy(Path(config_root) / "prometheus", []))
            rates: dict[bool, list[float]] = {True: [], False: []}
            for repeat in range(args.repeats):
                # ABBA order: neither variant always runs first, after the other's warm caches.
                for with_metrics in ((True, False) if repeat % 2 == 0 else (False, True)):
                    run = f"run-{repeat}-{int(with_metrics)}"
                    result = node.run(trainer_command(args, run, with_metrics), timeout=1800)
                    assert result.rc == 0, node.run(f"cat /tmp/{run}/log").stdout[-3000:]
                    rates[with_metrics].append(samples_per_second(result.stdout, args.warmup))
                scrapes = prometheus.query('count_over_time(up{job="trainer"}[1h])')
                print(f"repeat {repeat + 1}/{args.repeats}: with metrics {rates[True][-1]:.1f}, without "
                      f"{rates[False][-1]:.1f} samples/s; scrapes so far "
                      f"{scrapes[0]['value'][1] if scrapes else 0}", flush=True)
        with_median, without_median = statistics.median(rates[True]), statistics.median(rates[False])
        # Each pair ran back to back, under about the same background load: their ratio cancels most of it.
        paired = statistics.median(a / b for a, b in zip(rates[True], rates[False], strict=True))
        print(f"\n{args.model} model, 2 CPU ranks x batch 32, {args.steps} steps ({args.warmup} warm-up), "
              f"{args.repeats} runs each, Prometheus scraping every 1 s")
        print("| variant | samples/s median | best | ratio of medians |\n| --- | ---: | ---: | ---: |")
        print(f"| without --prometheus-port | {without_median:.1f} | {max(rates[False]):.1f} | 1.000 |")
        print(f"| with --prometheus-port, scraped every 1 s | {with_median:.1f} | {max(rates[True]):.1f} "
              f"| {with_median / without_median:.3f} |")
        print(f"median of the {args.repeats} paired ratios (with / without, back to back): {paired:.3f}")
    finally:
        for container in (node, prometheus and prometheus.container):
            if container:
                container.remove()
        docker("network", "rm", network, check=False)


if __name__ == "__main__":
    main()
