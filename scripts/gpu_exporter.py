#!/usr/bin/env python3
"""GPU metrics from NVML for Prometheus, under dcgm-exporter's names, for hosts where no sidecar runs.

    python /opt/scripts/gpu_exporter.py --port 9400        # then: curl http://127.0.0.1:9400/metrics

Where NVIDIA's dcgm-exporter can run beside the job (compose.monitoring.yaml --profile gpu, the GPU
operator on Kubernetes) use it. Where it cannot (Slurm nodes, bare Kubernetes, a rented box with only
this container) this script serves the essentials from NVML inside the container: utilization, memory
used and free, temperature, power and SM clock per GPU, as DCGM_FI_DEV_* series with dcgm-exporter's
labels (gpu, UUID, device, modelName, Hostname), so one dashboard and one set of alerts serve both.
Without a GPU or driver it serves gpu_exporter_gpus 0 and keeps running, so a scrape never fails.
Values are read from NVML on every scrape: nothing runs between scrapes. The server is the trainer's
(trainer/metrics_server.py): a total deadline per request and a fixed number of threads, so no client
can hold a thread. The container starts it with GPU_EXPORTER_PORT and GPU_EXPORTER_ADDRESS, which are
its flags' defaults, so an error names the variable that was set.
"""
from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator

import pynvml
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainer.cli import OneLineErrorParser
from trainer.metrics_server import serve_registry

LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
MIB = 2**20


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


# Each flag, and the container's variable that gives its default (entrypoint.sh passes it on as the flag).
SETTINGS = {"--port": "GPU_EXPORTER_PORT", "--address": "GPU_EXPORTER_ADDRESS"}


def tcp_port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {text!r}")
    return int(text)


def ip_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address such as 0.0.0.0 or 127.0.0.1, got {text!r}") from None


def setting_name(flag: str, value: object) -> str:
    """How the user gave FLAG its VALUE: the container's variable when it holds that value, else the flag."""
    variable = SETTINGS[flag]
    return f"{variable}={value}" if os.environ.get(variable) == str(value) else f"{flag} {value}"


class ExporterParser(OneLineErrorParser):
    """A bad value that the container's variable holds names the variable, not only the flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        for flag, variable in SETTINGS.items():
            value = os.environ.get(variable)
            if message.startswith(f"argument {flag}:") and value is not None and repr(value) in message:
                message = f"{variable}={value!r} (passed as {flag}): {message.partition(': ')[2]}"
        super().error(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ExporterParser(prog="gpu_exporter.py", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=tcp_port, default=os.environ.get("GPU_EXPORTER_PORT", "9400"),
                        help="TCP port of /metrics (dcgm-exporter's is 9400); default: GPU_EXPORTER_PORT, else 9400")
    parser.add_argument("--address", type=ip_address, default=os.environ.get("GPU_EXPORTER_ADDRESS", "0.0.0.0"),
                        help="IP address to listen on (no authentication: anyone who reaches it reads the metrics); "
                             "0.0.0.0 lets Prometheus on another host or container scrape, 127.0.0.1 keeps it "
                             "local; default: GPU_EXPORTER_ADDRESS, else 0.0.0.0")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    registry = CollectorRegistry()
    registry.register(NvmlCollector(start_nvml()))
    try:
        serve_registry(registry, args.address, args.port)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            culprit, hint = setting_name("--port", args.port), "another process holds it: pick another port"
        else:  # EADDRNOTAVAIL and the like: no interface of this host has that address
            culprit, hint = setting_name("--address", args.address), "give an address of this host, or 0.0.0.0"
        print(f"gpu_exporter: error: {culprit}: cannot listen on {args.address}:{args.port} ({error.strerror}); "
              f"{hint}", file=sys.stderr)
        return 2
    print(f"gpu_exporter: serving http://{args.address}:{args.port}/metrics", file=sys.stderr, flush=True)
    threading.Event().wait()  # the server runs in its own thread; SIGTERM ends the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
