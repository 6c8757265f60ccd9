"""Each report computed once, then written to every sink: the progress line, the JSON file and
TensorBoard on rank 0, and /metrics (trainer.prometheus) on every node that serves it, so no two sinks
can disagree about the same report (torchtitan's components/metrics.py fans out the same way).

Throughput (samples/s, and tokens/s for the GPT models), step time and MFU are averaged over the steps
since the previous report, measured by wall clock, so checkpoint writes and data stalls count against
them as they would in real time. The data-wait share says how much of that wall time the slowest rank
spent waiting for its next batch (torchtitan reports its data-loading time the same way): near 0 the
data keeps up, and a high share means the GPU waits for the DataLoader (more --num-workers, faster
storage, or data prepared ahead). Memory is each rank's peak: on a GPU the most it allocated, on a CPU
the bytes of parameters, gradients and optimizer state it holds (under FSDP, its shards).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.flop_counter import FlopCounterMode

from trainer import output, prometheus
from trainer.distributed import Placement

# Dense bf16 peak of common data-centre GPUs, TFLOP/s, by the part their device name names; --peak-tflops
# overrides it. The first part found in the name wins, so H100's and H200's PCIe and NVL parts (slower
# clocks, lower power) are tried before the SXM part whose name they contain, A100 and A10G before A10,
# and L40S before L4.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200 NVL", 835.0), ("H100", 989.0),
                    ("H200", 989.0), ("A100", 312.0), ("L40S", 362.0), ("A10G", 70.0), ("A10", 125.0),
                    ("L4", 121.0), ("V100", 125.0))
BAR_WIDTH = 20


def known_peak(device_name: str) -> tuple[str, float] | None:
    """The part DEVICE_NAME (as CUDA and NVML spell it) names, and its dense bf16 peak in FLOP/s."""
    return next(((part, tflops * 1e12) for part, tflops in PEAK_BF16_TFLOPS if part in device_name), None)


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    """FLOP/s the device can do at best, for MFU; None when unknown (then MFU is not reported)."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    known = known_peak(torch.cuda.get_device_name(device))
    return known[1] if known else None


def count_training_flops_per_sample(model: nn.Module, sample: torch.Tensor) -> int:
    """FLOPs of one forward and backward pass over one sample, counted by running it once."""
    with FlopCounterMode(display=False) as counter:
        model(sample.unsqueeze(0)).sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients (as large as the parameters) and optimizer state on this rank."""
    def local_bytes(tensor: torch.Tensor) -> int:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor  # FSDP: this rank's shard only
        return local.numel() * local.element_size()

    parameters = sum(local_bytes(parameter) for parameter in model.parameters())
    optimizer_state = sum(local_bytes(value) for state in optimizer.state.values() for value in state.values()
                          if isinstance(value, torch.Tensor))
    return 2 * parameters + optimizer_state


class RankTotals(NamedTuple):
    """What the ranks gather for a report: the loss summed over the window's steps (averaged over the
    ranks), every rank's peak memory in bytes, and every rank's seconds spent waiting for batches."""

    loss_sum: float
    memory_per_rank: list[int]
    data_wait_seconds: tuple[float, ...] = ()


class MetricsReporter:
    """Computes one record per report on every rank and hands it to the sinks this rank has."""

    def __init__(self, args: argparse.Namespace, *, placement: Placement, device: torch.device,
                 flops_per_sample: int | None, peak: float | None) -> None:
        self.max_steps, self.device = args.max_steps, device
        self.world_size = placement.world_size
        self.global_batch = args.batch_size * args.grad_accum * self.world_size
        self.tokens_per_sample: int | None = args.seq_len  # None for the CNN
        self.flops_per_sample, self.peak = flops_per_sample, peak
        self.restart_count = placement.restart_count
        self.is_main = placement.is_main  # the rank that prints and writes files
        self.metrics = (open(args.metrics_file, "a", buffering=1)  # line-buffered
                        if args.metrics_file and self.is_main else None)
        if self.metrics:
            output.also_note_to(self.metrics)  # where a lost stdout and stderr are noted
        self.tensorboard = None
        if args.tensorboard_dir and self.is_main:
            from torch.utils.tensorboard import SummaryWriter  # optional dependency, checked up front
            self.tensorboard = SummaryWriter(args.tensorboard_dir)
        self.restart_clock(step=0)
        self.extra: dict[str, Any] = {}  # figures for the next record only (the first step's, first_step.py)

    def add_to_next_record(self, figures: dict[str, Any]) -> None:
        self.extra.update(figures)

    def restart_clock(self, step: int) -> None:
        """Starts a new averaging window at STEP (after start-up, resume or a report)."""
        self.window_start_step, self.window_start_time = step, time.perf_counter()

    def report(self, state: Any, lr: float, totals: RankTotals) -> None:
        """Reports the window ending at STATE's step (a TrainingState: its step and epoch), whose loss and
        memory the ranks gathered into TOTALS; LR is the learning rate its last step used."""
        record = self.compute_record(state.step, epoch=state.stream.epoch, loss_sum=totals.loss_sum, lr=lr,
                                     memory_per_rank=totals.memory_per_rank,
                                     data_wait_seconds=totals.data_wait_seconds)
        record.update(self.extra)
        self.extra = {}
        prometheus.record_reported(record)
        if self.is_main:
            print(self.progress_line(record), flush=True)
        if self.metrics:
            try:
                self.metrics.write(json.dumps(record) + "\n")
            except OSError as error:  # a full disk: the file's records stop, training goes on
                self.metrics = None
                output.note(f"train_ddp.py: warning: --metrics-file cannot be written ({error.strerror}); "
                            f"its records are dropped from step {state.step} on and training goes on")
        if self.tensorboard:
            for name, value in record.items():
                if name not in ("step", "memory_gib_per_rank"):
                    self.tensorboard.add_scalar(f"train/{name}", value, state.step)
        self.restart_clock(state.step)

    def compute_record(self, step: int, *, epoch: int, loss_sum: float, lr: float,
                       memory_per_rank: list[int], data_wait_seconds: tuple[float, ...] = ()) -> dict[str, Any]:
        """The one record of a report, which every sink shows as it is."""
        elapsed = time.perf_counter() - self.window_start_time
        steps = max(step - self.window_start_step, 1)
        record: dict[str, Any] = {
            "step": step, "epoch": epoch, "loss": loss_sum / steps, "lr": lr,
            "samples_per_sec": steps * self.global_batch / elapsed, "step_time_ms": 1000 * elapsed / steps,
            "restart_count": self.restart_count,
            "max_memory_gib": max(memory_per_rank) / 2**30,
            "memory_gib_per_rank": [round(value / 2**30, 6) for value in memory_per_rank],
        }
        if data_wait_seconds:
            # The slowest rank's: the ranks move in lock-step, so every rank waits as long as it does.
            record["data_wait_share"] = min(max(data_wait_seconds) / elapsed, 1.0)
        if self.tokens_per_sample:
            record["tokens_per_sec"] = record["samples_per_sec"] * self.tokens_per_sample
        if self.flops_per_sample and self.peak:
            # MFU of one device: the whole job's useful FLOP/s over the peak of all its devices.
            record["mfu"] = record["samples_per_sec"] * self.flops_per_sample / (self.peak * self.world_size)
        return record

    def progress_line(self, record: dict[str, Any]) -> str:
        done = record["step"] / self.max_steps
        bar = "#" * round(done * BAR_WIDTH)
        line = (f"[{bar:<{BAR_WIDTH}}] step {record['step']}/{self.max_steps} | loss {record['loss']:.4f}"
                f" | lr {record['lr']:.2e} | {record['samples_per_sec']:.0f} samples/s")
        if "tokens_per_sec" in record:
            line += f" | {record['tokens_per_sec']:.0f} tokens/s"
        line += f" | {record['step_time_ms']:.1f} ms/step"
        if "data_wait_share" in record:
            line += f" | data wait {100 * record['data_wait_share']:.0f}%"
        if "mfu" in record:
            line += f" | mfu {100 * record['mfu']:.1f}%"
        kind = "GPU max allocated" if self.device.type == "cuda" else "state"
        return line + f" | mem {record['max_memory_gib']:.3f} GiB/rank ({kind}, largest rank)"

    def close(self) -> None:
        if self.metrics:
            try:
                self.metrics.close()
            except OSError:
                pass  # the last buffered record met a full disk: already lost, and no reason to fail now
        if self.tensorboard:
            self.tensorboard.close()
