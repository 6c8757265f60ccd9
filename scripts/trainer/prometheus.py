"""The trainer's Prometheus endpoint (--prometheus-port): step, loss, throughput, step times, checkpoints,
and the time to the first step.

One process per node serves /metrics: local rank 0, on --prometheus-port. Every node is scraped (not
only the node of global rank 0) with one port per node, which is what a PodMonitor, a static target
list or Docker's DNS can name. DDP keeps the ranks of a job in lock-step, so local rank 0's step times
are the node's; the loss is the mean over all ranks, as rank 0 reports it.

Labels tell jobs and nodes apart: `training_job` (torchrun's --rdzv-id, TORCHELASTIC_RUN_ID; "standalone"
for a plain `python train_ddp.py`), `node` (the host name) and `rank` (the global rank of the process
that serves). The label is not called `job`: Prometheus gives every target a `job` label of its own.

The loss, throughput and MFU are not computed here: trainer.metrics computes each report once and
`record_reported` shows that record, so /metrics, the progress line and the JSON file always agree.
Only the per-step histogram of step times is this module's own.

Like prometheus_client's own default registry there is one exporter per process, kept in this module, so
the training loop calls `step_finished(step)` and friends without passing an object around; every call
is a no-op in processes that serve nothing. The cost per step is one histogram observation and a gauge
update, a few microseconds (BENCHMARKS.md, "Prometheus metrics").

/metrics has no authentication and listens on --prometheus-address (every interface by default). The
server (trainer/metrics_server.py) gives each connection a total deadline and no thread of its own, so
no client, however slow, can cost the trainer threads or time.
"""
from __future__ import annotations

import errno
import math
import socket
import time
from typing import Any

from trainer.distributed import Placement
from trainer.metrics_server import serve_registry

LABELS = ("training_job", "node", "rank")
# From a small CNN on a CPU (milliseconds) to a large model's step on many GPUs (a minute).
STEP_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, math.inf)


class TrainingExporter:
    """The trainer's metrics in a registry of their own, served over HTTP on ADDRESS:PORT."""

    def __init__(self, address: str, port: int, placement: Placement) -> None:
        # An optional dependency (config.py checks it up front), so the trainer imports without it.
        from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector

        labels = {"training_job": placement.job_id or "standalone",
                  "node": socket.gethostname(), "rank": str(placement.rank)}
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_start_time_seconds, memory and CPU of the trainer

        def gauge(name: str, documentation: str) -> Any:
            return Gauge(name, documentation, LABELS, registry=self.registry)

        # A series appears when its first value is known: a loss of 0 before the first report would be a lie.
        self.step = gauge("trainer_step", "Optimizer steps completed (resumes at the checkpoint's step)")
        self.loss = gauge("trainer_loss", "Training loss, mean over the steps since the last report and all ranks")
        self.learning_rate = gauge("trainer_learning_rate", "Learning rate of the last reported step")
        self.samples_per_second = gauge("trainer_samples_per_second",
                                        "Samples per second of the whole job since the last report, by wall clock")
        self.tokens_per_second = gauge("trainer_tokens_per_second",
                                       "Tokens per second of the whole job (models with tokens only)")
        self.mfu = gauge("trainer_mfu_ratio", "Model FLOPs utilization, 0 to 1, where the GPU's peak is known")
        self.data_wait = gauge("trainer_data_wait_ratio",
                               "Share of wall time since the last report the slowest rank waited for its next batch, 0 to 1")
        self.step_seconds = Histogram("trainer_step_duration_seconds", "Wall time of one optimizer step",
                                      LABELS, buckets=STEP_SECONDS_BUCKETS, registry=self.registry).labels(**labels)
        # Every node's exporter has these two: all ranks take part in a save and see it end.
        self.checkpoint_time = gauge("trainer_last_checkpoint_timestamp_seconds",
                                     "Unix time the last checkpoint was written")
        self.checkpoint_seconds = gauge("trainer_last_checkpoint_duration_seconds",
                                        "Seconds the last checkpoint took to write")
        self.restarts = gauge("trainer_restarts", "Times torchrun restarted the workers of this job")
        self.world_size = gauge("trainer_world_size", "Ranks in the job")
        self.started = gauge("trainer_start_timestamp_seconds",
                             "Unix time this trainer process started (before its rendezvous)")
        self.time_to_first_step = gauge("trainer_time_to_first_step_seconds",
                                        "Seconds from this process's start to its first finished step")
        self.start_phases = Gauge("trainer_start_phase_seconds", "Where the time to the first step went: "
                                  "startup, checkpoint_load, compile, first_step", (*LABELS, "phase"),
                                  registry=self.registry)
        self.labels = labels
        self.series: dict[int, Any] = {}
        self.set(self.restarts, placement.restart_count)
        self.set(self.world_size, placement.world_size)
        self.set(self.started, time.time())
        # The histogram leaves out the first step after a start or resume, which includes start-up work
        # (DataLoader workers, compile).
        self.last_step_time: float | None = None
        self.server = serve_registry(self.registry, address, port)

    def set(self, family: Any, value: float) -> None:
        """Sets FAMILY's series for our labels; the series is looked up once, as this runs every step."""
        series = self.series.get(id(family))
        if series is None:
            series = self.series[id(family)] = family.labels(**self.labels)
        series.set(value)

    def step_finished(self, step: int) -> None:
        now = time.perf_counter()
        if self.last_step_time is not None:
            self.step_seconds.observe(now - self.last_step_time)
        self.last_step_time = now
        self.set(self.step, step)

    def record_reported(self, record: dict[str, Any]) -> None:
        """Shows the report trainer.metrics computed: the same numbers as its JSON line."""
        self.set(self.loss, record["loss"])
        self.set(self.learning_rate, record["lr"])
        self.set(self.samples_per_second, record["samples_per_sec"])
        if "tokens_per_sec" in record:
            self.set(self.tokens_per_second, record["tokens_per_sec"])
        if "mfu" in record:
            self.set(self.mfu, record["mfu"])
        if "data_wait_share" in record:
            self.set(self.data_wait, record["data_wait_share"])

    def first_step_done(self, figures: dict[str, float]) -> None:
        """The figures trainer.first_step measured, as its record for the JSON file has them."""
        self.set(self.time_to_first_step, figures["time_to_first_step_s"])
        for phase in ("startup", "checkpoint_load", "compile", "first_step"):
            self.start_phases.labels(**self.labels, phase=phase).set(figures[f"{phase}_s"])

    def checkpoint_saved(self, seconds: float) -> None:
        self.set(self.checkpoint_time, time.time())
        self.set(self.checkpoint_seconds, seconds)


# The process's exporter: set by serve() on local rank 0 when --prometheus-port is given, else None.
_exporter: TrainingExporter | None = None


def serve(address: str, port: int | None, placement: Placement) -> None:
    """Starts /metrics on ADDRESS:PORT in local rank 0; exits with one line when it cannot listen there."""
    global _exporter
    if port is None or placement.local_rank != 0:
        return
    try:
        _exporter = TrainingExporter(address, port, placement)
    except OSError as error:
        where = socket.gethostname() if address in ("0.0.0.0", "::") else f"{address} on {socket.gethostname()}"
        hint = ("another trainer may hold it: pick a free port" if error.errno == errno.EADDRINUSE
                else "give --prometheus-address an address of this host, or 0.0.0.0")
        raise SystemExit(f"--prometheus-port {port}: cannot listen on {where} ({error.strerror}); {hint}") from None


def training_started(step: int) -> None:
    """The step training starts at: 0, or the checkpoint's step after a resume."""
    if _exporter is not None:
        _exporter.set(_exporter.step, step)


def step_finished(step: int) -> None:
    if _exporter is not None:
        _exporter.step_finished(step)


def record_reported(record: dict[str, Any]) -> None:
    if _exporter is not None:
        _exporter.record_reported(record)


def first_step_done(figures: dict[str, float]) -> None:
    if _exporter is not None:
        _exporter.first_step_done(figures)


def checkpoint_saved(seconds: float) -> None:
    if _exporter is not None:
        _exporter.checkpoint_saved(seconds)
