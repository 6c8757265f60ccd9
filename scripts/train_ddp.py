#!/usr/bin/env python3
"""Sample DistributedDataParallel trainer: read it, run it, copy it.

    torchrun --nproc-per-node=2 /opt/scripts/train_ddp.py --max-steps 200     # one node, 2 ranks
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:29500 /opt/scripts/train_ddp.py                  # several nodes
    python /opt/scripts/train_ddp.py                                          # one process
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 \
        torchrun --max-restarts=3 ... /opt/scripts/train_ddp.py              # survive a crashed worker
(the variable works around pytorch/pytorch#135712: without it a restarted worker can read the
previous attempt's addresses and fail to connect.)

What it does, in the order this file does it:
  * parses and checks every flag before any process group exists (`--help` lists them);
  * joins the process group (NCCL on GPU, gloo on CPU) with each rank on its own device;
  * trains a small CNN on deterministic synthetic images (or an image folder) with a
    DistributedSampler, bf16/fp16/fp32 autocast, gradient accumulation, clipping and optional
    torch.compile;
  * resumes from the newest readable checkpoint in --ckpt-dir at the exact batch it stopped at,
    so a restarted job repeats and skips nothing;
  * writes checkpoints atomically on rank 0 and keeps the newest --keep;
  * on SIGTERM/SIGINT stops every rank at the same step, saves, and exits 0 well within the
    30 s that docker stop, Slurm and torchrun allow.
Helpers live in trainer/ beside this file; each does one job.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import pathlib
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from trainer import prometheus
from trainer.checkpoint import (capture_rng_state, checkpoint_path, load_newest_checkpoint,
                                remove_old_checkpoints, restore_rng_state, save_checkpoint_atomically)
from trainer.config import parse_config
from trainer.data import (MicroBatchStream, ResumableDistributedSampler, SyntheticImages,
                          detach_from_terminal_signals, load_image_folder)
from trainer.distributed import (Placement, StopSignal, choose_device, finish_process_group,
                                 read_placement, start_process_group)
from trainer.metrics import MetricsReporter, count_training_flops_per_sample, peak_flops
from trainer.model import build_model

PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main(argv: list[str] | None = None) -> int:
    placement = read_placement()
    args = parse_config(argv, placement.world_size)  # bad flags end here, before any rendezvous
    prometheus.serve(args.prometheus_port, placement)  # a taken port ends here too
    device = choose_device(args.device, placement)
    control_group = start_process_group(placement, device, args.backend, args.pg_timeout)
    # From here on SIGTERM/SIGINT means "stop at the next step boundary". Not earlier: a signal during
    # the rendezvous must still end the process, which has nothing to save yet.
    stop = StopSignal()
    try:
        train(args, placement, device, control_group, stop)
    finally:
        finish_process_group()
    return 0


def train(args: argparse.Namespace, placement: Placement, device: torch.device,
          control_group: dist.ProcessGroup, stop: StopSignal) -> None:
    precision = choose_precision(args.precision, device)
    dataset, num_classes = build_dataset(args)
    torch.manual_seed(args.seed)  # identical initial weights on every rank and in every run
    model = build_model(args.model, num_classes).to(device)
    peak = peak_flops(device, args.peak_tflops)
    flops_per_sample = (count_training_flops_per_sample(model, dataset[0][0].to(device))
                        if placement.is_main and peak else None)
    torch.manual_seed(args.seed + placement.rank)  # per-rank RNG streams, e.g. for dropout or augmentation

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  fused=device.type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_then_cosine(step, args.warmup_steps, args.max_steps))
    # The scaler only acts for fp16, whose narrow range would underflow small gradients.
    scaler = torch.amp.GradScaler(device.type, enabled=precision == torch.float16)

    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    step, epoch, batches_done = resume_from_newest_checkpoint(
        args, model, optimizer, scaler, scheduler, placement, device, control_group)

    # Compile the bare model and wrap it in DDP, so DDP's gradient hooks and no_sync keep working.
    compiled = torch.compile(model) if args.compile else model
    ddp_model = DistributedDataParallel(compiled, device_ids=[device.index] if device.type == "cuda" else None)

    sampler = ResumableDistributedSampler(dataset, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        num_workers=args.num_workers, worker_init_fn=detach_from_terminal_signals,
                        pin_memory=device.type == "cuda" if args.pin_memory is None else args.pin_memory,
                        persistent_workers=args.persistent_workers and args.num_workers > 0)
    stream = MicroBatchStream(loader, sampler, epoch, batches_done)

    global_batch = args.batch_size * args.grad_accum * placement.world_size
    reporter = (MetricsReporter(args.max_steps, global_batch, args.metrics_file, args.tensorboard_dir, device,
                                flops_per_sample, peak) if placement.is_main else None)
    prometheus.describe_run(step, global_batch, flops_per_sample, peak)
    if reporter:
        print(f"training on {placement.world_size} rank(s), {device.type}, {dist.get_backend()}, "
              f"{str(precision).removeprefix('torch.')}, {sum(p.numel() for p in model.parameters()):,} parameters, "
              f"global batch {global_batch}, {len(sampler) // args.batch_size} micro-batches per epoch per rank",
              flush=True)
        reporter.restart_clock(step)

    last_saved_step, loss_sum = step, torch.zeros((), device=device)
    while step < args.max_steps:
        if stop.agreed_by_any_rank(control_group):  # every rank sees the same answer at the same step
            break
        lr = scheduler.get_last_lr()[0]
        loss_sum += train_one_step(ddp_model, stream, optimizer, scaler, args, device, precision)
        scheduler.step()
        step += 1
        prometheus.step_finished(step)
        if step % args.log_every == 0 or step == args.max_steps:
            steps_in_window = step - reporter.window_start_step if reporter else 0
            mean_loss = average_over_ranks(loss_sum, placement.world_size)  # a collective: every rank calls it
            if reporter:
                reporter.report(step, stream.epoch, mean_loss / steps_in_window, lr)
            prometheus.loss_reported(mean_loss, lr)
            loss_sum.zero_()
        if args.save_every and step % args.save_every == 0:
            save_training_state(args, model, optimizer, scaler, scheduler, stream, step, placement, device,
                                control_group)
            last_saved_step = step

    if step > last_saved_step:
        save_training_state(args, model, optimizer, scaler, scheduler, stream, step, placement, device,
                            control_group)
    dist.barrier(group=control_group)  # nobody leaves while rank 0 may still be writing
    if reporter:
        reporter.close()
        if step < args.max_steps:
            why = stop.received or "a stop signal on another rank"
            print(f"stopped by {why} at step {step}/{args.max_steps}; run the same command again to resume",
                  flush=True)
        else:
            print(f"done: {step} steps, checkpoints in {args.ckpt_dir}", flush=True)


def choose_precision(requested: str, device: torch.device) -> torch.dtype:
    """The autocast dtype: bf16 where the GPU has it, fp16 on older GPUs, fp32 on CPU unless asked."""
    if requested != "auto":
        return PRECISIONS[requested]
    if device.type != "cuda":
        return torch.float32  # CPU autocast is slower than fp32 on most CPUs without AMX
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def build_dataset(args: argparse.Namespace) -> tuple[Dataset, int]:
    """The training set and its number of classes: an image folder, or synthetic images."""
    if args.data_dir is not None:
        dataset = load_image_folder(str(args.data_dir), args.image_size)
        return dataset, len(dataset.classes)
    return SyntheticImages(args.synthetic_samples, args.image_size, args.num_classes, args.seed), args.num_classes


def warmup_then_cosine(step: int, warmup_steps: int, max_steps: int) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to 0.1 at max_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(1, max_steps - warmup_steps), 1.0)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def train_one_step(ddp_model: DistributedDataParallel, stream: MicroBatchStream, optimizer: torch.optim.Optimizer,
                   scaler: torch.amp.GradScaler, args: argparse.Namespace, device: torch.device,
                   precision: torch.dtype) -> torch.Tensor:
    """One optimizer step over --grad-accum micro-batches; returns the step's loss, left on the device."""
    step_loss = torch.zeros((), device=device)
    for micro_step in range(args.grad_accum):
        images, labels = stream.next_batch()
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        is_last = micro_step == args.grad_accum - 1
        # Gradients are all-reduced once per step, on the last micro-batch; before it they just add up.
        with contextlib.nullcontext() if is_last else ddp_model.no_sync():
            with torch.autocast(device.type, dtype=precision, enabled=precision != torch.float32):
                loss = F.cross_entropy(ddp_model(images), labels) / args.grad_accum
            scaler.scale(loss).backward()
        step_loss += loss.detach()
    if args.grad_clip > 0:
        scaler.unscale_(optimizer)  # clip the real gradients, not the loss-scaled ones
        nn.utils.clip_grad_norm_(ddp_model.parameters(), args.grad_clip)
    scaler.step(optimizer)  # skips the update if fp16 gradients overflowed
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return step_loss


def average_over_ranks(value: torch.Tensor, world_size: int) -> float:
    """VALUE averaged over all ranks (gloo has no AVG, so SUM and divide)."""
    total = value.detach().clone()
    dist.all_reduce(total)
    return total.item() / world_size


def save_training_state(args: argparse.Namespace, model: nn.Module, optimizer: torch.optim.Optimizer,
                        scaler: torch.amp.GradScaler, scheduler: Any, stream: MicroBatchStream, step: int,
                        placement: Placement, device: torch.device, control_group: dist.ProcessGroup) -> None:
    """Everything a restart needs to continue exactly here; all ranks call it, rank 0 writes it."""
    rng_states: list[Any] = [None] * placement.world_size
    dist.all_gather_object(rng_states, capture_rng_state(device), group=control_group)
    if not placement.is_main:
        return
    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(), "step": step, "epoch": stream.epoch,
        # Samples of this epoch all ranks consumed: a restart with another world size maps it back.
        "samples_in_epoch": stream.batches_done * args.batch_size * placement.world_size,
        "rng": rng_states, "config": {name: str(value) for name, value in vars(args).items()},
    }
    path = checkpoint_path(args.ckpt_dir, step)
    started = time.perf_counter()
    save_checkpoint_atomically(state, path)
    remove_old_checkpoints(args.ckpt_dir, args.keep)
    print(f"saved checkpoint {path} in {time.perf_counter() - started:.3f} s", flush=True)
    prometheus.checkpoint_saved(time.perf_counter() - started)


def resume_from_newest_checkpoint(args: argparse.Namespace, model: nn.Module, optimizer: torch.optim.Optimizer,
                                  scaler: torch.amp.GradScaler, scheduler: Any, placement: Placement,
                                  device: torch.device, control_group: dist.ProcessGroup) -> tuple[int, int, int]:
    """Loads the newest readable checkpoint into the training objects; returns (step, epoch, batches done).

    A fresh --ckpt-dir starts at (0, 0, 0). Every rank loads the file itself; the ranks then check they
    found the same step, which fails when --ckpt-dir is not shared between nodes.
    """
    state = load_newest_checkpoint(pathlib.Path(args.ckpt_dir), warn=placement.is_main)
    found_steps: list[Any] = [None] * placement.world_size
    dist.all_gather_object(found_steps, state["step"] if state else 0, group=control_group)
    if len(set(found_steps)) > 1:
        sys.exit(f"ranks found different checkpoints (steps {found_steps}): --ckpt-dir must be shared by all nodes")
    if state is None:
        return 0, 0, 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    scheduler.load_state_dict(state["scheduler"])
    if len(state["rng"]) == placement.world_size:  # per-rank streams only map onto the same world size
        restore_rng_state(state["rng"][placement.rank], device)
    batches_done = state["samples_in_epoch"] // (args.batch_size * placement.world_size)
    if placement.is_main:
        print(f"resumed from {state['path']}: step {state['step']}, epoch {state['epoch']}, "
              f"{state['samples_in_epoch']} samples into the epoch", flush=True)
    return state["step"], state["epoch"], batches_done


if __name__ == "__main__":
    sys.exit(main())
