#!/usr/bin/env python3
"""GPU metrics from NVML for Prometheus, under dcgm-exporter's names, for hosts where no sidecar runs.

    python /opt/scripts/gpu_exporter.py --port 9400        # then: curl http://127.0.0.1:9400/metrics

Where NVIDIA's dcgm-exporter can run beside the job (compose.monitoring.yaml --profile gpu, the GPU
operator on Kubernetes) use it. Where it cannot (Slurm nodes, bare Kubernetes, a rented box with only
this container) this script serves the essentials from NVML inside the container: utilization, memory
used and free, temperature, power and SM clock per GPU, as DCGM_FI_DEV_* series with dcgm-exporter's
labels (gpu, UUID, device, modelName, Hostname), so one dashboard and one set of alerts serve both.
Without a GPU or driver it serves gpu_exporter_gpus 0 and keeps running, so a scrape never fails.
Values are read from NVML on every scrape: nothing runs between scrapes.
"""
from __future__ import annotations

import argparse
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pynvml
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainer.cli import OneLineErrorParser

LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
MIB = 2**20
# A client that connects and sends nothing holds a thread until this many seconds pass (a scrape sends
# its request at once); without it, 500 half-open connections held 500 threads for as long as they liked.
READ_TIMEOUT_S = 10
# Connections the kernel queues while every thread is busy (socketserver's default of 5 drops a burst).
LISTEN_BACKLOG = 128


def utilization(handle: object) -> float:
    return pynvml.nvmlDeviceGetUtilizationRates(handle).gpu


def memory_copy_utilization(handle: object) -> float:
    return pynvml.nvmlDeviceGetUtilizationRates(handle).memory


def framebuffer_used_mib(handle: object) -> float:
    return pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB


def framebuffer_free_mib(handle: object) -> float:
    return pynvml.nvmlDeviceGetMemoryInfo(handle).free / MIB


def temperature_celsius(handle: object) -> float:
    return pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)


def power_watts(handle: object) -> float:
    return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000  # NVML reports milliwatts


def sm_clock_mhz(handle: object) -> float:
    return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)


def memory_clock_mhz(handle: object) -> float:
    return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)


# dcgm-exporter's name, its help text in short, and how NVML gives the value.
FIELDS: list[tuple[str, str, Callable[[object], float]]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", utilization),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", memory_copy_utilization),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", framebuffer_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", framebuffer_free_mib),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", temperature_celsius),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", power_watts),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", memory_clock_mhz),
]


def start_nvml() -> bool:
    """Whether NVML answers; on a host without an NVIDIA driver it says why, once, and we serve 0 GPUs."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        print(f"gpu_exporter: NVML unavailable ({error}): serving 0 GPUs", file=sys.stderr, flush=True)
        return False
    return True


class NvmlCollector(Collector):
    """Reads every GPU NVML sees on each scrape."""

    def __init__(self, nvml_up: bool) -> None:
        self.nvml_up = nvml_up
        self.hostname = socket.gethostname()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        handles = self.gpu_handles()
        yield GaugeMetricFamily("gpu_exporter_nvml_up", "1 when NVML answered at start, 0 without an NVIDIA driver",
                                value=int(self.nvml_up))
        yield GaugeMetricFamily("gpu_exporter_gpus", "GPUs NVML sees in this container", value=len(handles))
        families = [GaugeMetricFamily(name, help_text, labels=LABELS) for name, help_text, _ in FIELDS]
        for index, handle in enumerate(handles):
            labels = self.gpu_labels(index, handle)
            for family, (_, _, read) in zip(families, FIELDS, strict=True):
                try:
                    family.add_metric(labels, read(handle))
                except pynvml.NVMLError:
                    pass  # not supported on this GPU (power on some boards), or the GPU fell off the bus
        yield from families

    def gpu_handles(self) -> list[object]:
        if not self.nvml_up:
            return []
        try:
            return [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError:
            return []

    def gpu_labels(self, index: int, handle: object) -> list[str]:
        def text(read: Callable[[object], str | bytes]) -> str:
            try:
                value = read(handle)
            except pynvml.NVMLError:
                return ""
            return value.decode() if isinstance(value, bytes) else value

        minor = text(lambda h: str(pynvml.nvmlDeviceGetMinorNumber(h)))
        return [str(index), text(pynvml.nvmlDeviceGetUUID), f"nvidia{minor}" if minor else "",
                text(pynvml.nvmlDeviceGetName), self.hostname]


class MetricsServer(ThreadingMixIn, WSGIServer):
    """One daemon thread per scrape, as prometheus_client's own server, with a longer listen queue."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that timed out or hung up is no fault of the exporter's: no traceback for it."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class TimedRequestHandler(WSGIRequestHandler):
    """Drops a connection that sends no request within READ_TIMEOUT_S, and logs nothing per scrape."""

    timeout = READ_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


def serve_metrics(address: str, port: int, registry: CollectorRegistry) -> None:
    """Serves REGISTRY on http://ADDRESS:PORT/metrics from a thread of its own."""
    MetricsServer.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server = make_server(address, port, make_wsgi_app(registry), MetricsServer, TimedRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()


def tcp_port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="gpu_exporter.py", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=tcp_port, default=9400, help="TCP port of /metrics (dcgm-exporter's is 9400)")
    parser.add_argument("--address", default="0.0.0.0",
                        help="address to listen on (no authentication: anyone who reaches it reads the metrics); "
                             "0.0.0.0 lets Prometheus on another host or container scrape, 127.0.0.1 keeps it local")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    registry = CollectorRegistry()
    registry.register(NvmlCollector(start_nvml()))
    try:
        serve_metrics(args.address, args.port, registry)
    except OSError as error:
        print(f"gpu_exporter: cannot listen on {args.address}:{args.port} ({error.strerror}); pick another --port",
              file=sys.stderr)
        return 2
    print(f"gpu_exporter: serving http://{args.address}:{args.port}/metrics", file=sys.stderr, flush=True)
    threading.Event().wait()  # the server runs in its own thread; SIGTERM ends the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
