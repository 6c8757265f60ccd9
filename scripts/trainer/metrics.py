"""What rank 0 reports: a human progress line, JSON lines for machines, TensorBoard when asked.

Throughput, step time and MFU are averaged over the steps since the previous report, measured by
wall clock, so checkpoint writes and data stalls count against them as they would in real time.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# Dense bf16 peak of common data-centre GPUs, TFLOP/s; --peak-tflops overrides it. Matched by substring
# of the device name in this order, so A100 and A10G are tried before A10.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0,
                    "A10": 125.0, "L4": 121.0, "V100": 125.0}
BAR_WIDTH = 20


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    """FLOP/s the device can do at best, for MFU; None when unknown (then MFU is not reported)."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tflops * 1e12 for gpu, tflops in PEAK_BF16_TFLOPS.items() if gpu in name), None)


def count_training_flops_per_sample(model: nn.Module, sample: torch.Tensor) -> int:
    """FLOPs of one forward and backward pass over one sample, counted by running it once."""
    with FlopCounterMode(display=False) as counter:
        model(sample.unsqueeze(0)).sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


class MetricsReporter:
    """Prints progress lines and writes one JSON object per report; used on rank 0 only."""

    def __init__(self, max_steps: int, global_batch: int, metrics_file: str | None,
                 tensorboard_dir: str | None, device: torch.device, flops_per_sample: int | None,
                 peak: float | None) -> None:
        self.max_steps, self.global_batch, self.device = max_steps, global_batch, device
        self.flops_per_sample, self.peak = flops_per_sample, peak
        self.restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        self.metrics = open(metrics_file, "a", buffering=1) if metrics_file else None  # line-buffered
        self.tensorboard = None
        if tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter  # optional dependency, checked up front
            self.tensorboard = SummaryWriter(tensorboard_dir)
        self.restart_clock(step=0)

    def restart_clock(self, step: int) -> None:
        """Starts a new averaging window at STEP (after start-up, resume or a report)."""
        self.window_start_step, self.window_start_time = step, time.perf_counter()

    def report(self, step: int, epoch: int, loss: float, lr: float) -> None:
        elapsed = time.perf_counter() - self.window_start_time
        steps = max(step - self.window_start_step, 1)
        record: dict[str, Any] = {
            "step": step, "epoch": epoch, "loss": loss, "lr": lr,
            "samples_per_sec": steps * self.global_batch / elapsed, "step_time_ms": 1000 * elapsed / steps,
            "restart_count": self.restart_count,
        }
        if self.flops_per_sample and self.peak:
            record["mfu"] = record["samples_per_sec"] * self.flops_per_sample / self.peak
        if self.device.type == "cuda":
            record["max_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        print(self.progress_line(record), flush=True)
        if self.metrics:
            self.metrics.write(json.dumps(record) + "\n")
        if self.tensorboard:
            for name, value in record.items():
                if name != "step":
                    self.tensorboard.add_scalar(f"train/{name}", value, step)
        self.restart_clock(step)

    def progress_line(self, record: dict[str, Any]) -> str:
        done = record["step"] / self.max_steps
        bar = "#" * round(done * BAR_WIDTH)
        line = (f"[{bar:<{BAR_WIDTH}}] step {record['step']}/{self.max_steps} | loss {record['loss']:.4f}"
                f" | lr {record['lr']:.2e} | {record['samples_per_sec']:.0f} samples/s"
                f" | {record['step_time_ms']:.1f} ms/step")
        if "mfu" in record:
            line += f" | mfu {100 * record['mfu']:.1f}%"
        if "max_memory_gib" in record:
            line += f" | mem {record['max_memory_gib']:.2f} GiB"
        return line

    def close(self) -> None:
        if self.metrics:
            self.metrics.close()
        if self.tensorboard:
            self.tensorboard.close()
