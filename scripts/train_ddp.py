#!/usr/bin/env python3
"""Sample distributed trainer, DDP or FSDP: read it, run it, copy it (with trainer/ beside it).

    torchrun --nproc-per-node=2 /opt/scripts/train_ddp.py --max-steps 200     # one node, 2 ranks, the CNN
    torchrun --nproc-per-node=8 /opt/scripts/train_ddp.py --model gpt2-large --parallel fsdp \
        --precision bf16 --compile                                            # a GPT sharded over 8 GPUs
    python /opt/scripts/multinode/torchrun_node.py --nnodes=2 --nproc-per-node=8 \
        --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 /opt/scripts/train_ddp.py   # several nodes
    python /opt/scripts/train_ddp.py                                          # one process
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 \
        torchrun --max-restarts=3 ... /opt/scripts/train_ddp.py              # survive a crashed worker
(the variable works around pytorch/pytorch#135712: without it a restarted worker can read the
previous attempt's addresses and fail to connect.) docs/training.md says when to use DDP or FSDP.

What it does, in the order this file does it:
  * parses and checks every flag before any process group exists (`--help` lists them);
  * joins the process group (NCCL on GPU, gloo on CPU) with each rank on its own device;
  * builds a small CNN on synthetic images (or an image folder), or a GPT-2 style Transformer on
    synthetic tokens (or a uint16 token file), optionally starting from a Hugging Face GPT-2 folder
    (--init-from, trainer/huggingface.py), and spreads it over the ranks with DDP or FSDP2
    (trainer/parallel.py holds every line where the two differ);
  * trains with a DistributedSampler, bf16/fp16/fp32, gradient accumulation, clipping and optional
    per-block torch.compile and activation checkpointing;
  * leaves checkpoints to one owner, trainer/checkpointer.py, which the loop calls to resume, after each
    step, when SIGUSR1 asks for a checkpoint, after the first step (--compile: the compiled code) and at
    the end: it locks --ckpt-dir for this job, resumes from the newest readable checkpoint at the exact
    batch it stopped at (at any world size for sharded checkpoints), writes checkpoints atomically (one
    file from rank 0 under DDP, one shard per rank under FSDP, in the background while training goes
    on) and keeps the newest --keep;
  * on SIGTERM/SIGINT/SIGHUP (a terminal that closed; not one the process ignores, as under `nohup`)
    stops every rank at the same step, finishes a background save in flight, saves, and exits 0
    (docs/training.md says how long that takes against docker stop's grace period); main() then gives
    the process its own handlers back, so a notebook kernel that called it stops as it did before;
  * on SIGUSR1 (Slurm's --signal=USR1@SECONDS before a time limit) saves a checkpoint at the next step
    on every rank, and trains on;
  * outlives its output: a progress line that cannot be written (`| head`, a full disk) is dropped
    with one note, and training goes on (trainer/output.py).
The training state (model, optimizer, scaler, schedule, data position) is one object,
trainer/state.py; helpers live in trainer/ beside this file, each doing one job.
"""
from __future__ import annotations

import argparse
import math
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from trainer import huggingface, output, prometheus
from trainer.checkpointer import CheckpointFailure, Checkpointer
from trainer.config import parse_config
from trainer.data import (MicroBatchStream, ResumableDistributedSampler, SyntheticImages, SyntheticTokens,
                          TokenFile, UnusableData, load_image_folder, make_loader, stop_worker_server)
from trainer.distributed import (SAVE_SIGNAL, Placement, StoppedWithNothingToSave, StopSignal, choose_device,
                                 finish_process_group, freeze_what_lives_as_long_as_the_process, read_placement,
                                 start_process_group)
from trainer.first_step import FirstStep, FirstStepClock
from trainer.gpt import flops_per_token
from trainer.lost_work import report_lost_work
from trainer.metrics import (MetricsReporter, RankTotals, count_training_flops_per_sample, peak_flops,
                             state_bytes)
from trainer.model import build_model, is_language_model
from trainer.parallel import autocast_dtype, clip_gradients, gradient_sync, parallelize
from trainer.state import TrainingState

PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main(argv: list[str] | None = None) -> int:
    output.keep_going_without_output("train_ddp.py")  # `| head`, a full log disk: lines go, training stays
    placement = read_placement()
    args = parse_config(argv, placement.world_size)  # bad flags end here, before any rendezvous
    prometheus.serve(args.prometheus_address, args.prometheus_port, placement)  # a taken port ends here too
    device = choose_device(args.device, placement)
    group = start_process_group(placement, device=device, backend=args.backend, timeout_s=args.pg_timeout)
    freeze_what_lives_as_long_as_the_process()  # the stop's last collection then skips the imports' objects
    # Inside this block SIGTERM/SIGINT/SIGHUP means "stop at the next step boundary" (unless ignored, as
    # `nohup` leaves SIGHUP). Not earlier: a signal during the rendezvous must still end the process, which
    # has nothing to save yet. Not later: a notebook kernel that called main() gets its own handlers back.
    status = 0
    with StopSignal() as stop:
        try:
            # In a function of its own, so the model is garbage before finish_process_group destroys the group.
            resume_and_train(args, placement=placement, device=device, group=group, stop=stop)
        except CheckpointFailure as error:  # the same on every rank; each node's first rank says it
            if placement.local_rank == 0:
                print(f"train_ddp.py: error: {error}", file=sys.stderr, flush=True)
                if stop.received:  # the save a stop asked for: the container's stop must not call it clean
                    report_lost_work(f"train_ddp.py stopped by {stop.received} without its last checkpoint: {error}")
            status = error.status
        except UnusableData as error:  # found before training, the same on every rank
            if placement.local_rank == 0:
                print(f"train_ddp.py: error: {error}", file=sys.stderr, flush=True)
            status = 2
        except StoppedWithNothingToSave as stopped:  # before or in the first step (compiling, maybe): at once
            if placement.is_main:
                print(f"stopped by {stopped.signal_name} in the first step, before anything was trained since the "
                      f"start or the checkpoint: nothing to save; run the same command again to resume", flush=True)
        finally:
            finish_process_group()
    stop_worker_server()  # the loader's workers ended with it: the fork server goes before this process does
    return status


def resume_and_train(args: argparse.Namespace, *, placement: Placement, device: torch.device,
                     group: dist.ProcessGroup, stop: StopSignal) -> None:
    state, reporter = build_training(args, placement=placement, device=device, group=group)
    clock = FirstStepClock(compiling=args.compile)  # where the first minute goes (trainer/first_step.py)
    with Checkpointer(state) as checkpointer:  # closed after a crash too: no write left running, no lock held
        checkpointer.resume()  # with --compile, the compiled code saved beside the checkpoints too
        clock.resumed()
        if placement.is_main:
            print(start_line(state), flush=True)
        train(state, reporter, checkpointer, stop, clock)


def build_training(args: argparse.Namespace, *, placement: Placement, device: torch.device,
                   group: dist.ProcessGroup) -> tuple[TrainingState, MetricsReporter]:
    """The model spread over the ranks with its optimizer, schedule and data stream, at step 0; and the
    reporter of its metrics."""
    precision = choose_precision(args.precision, device)
    dataset, num_classes = build_dataset(args)
    torch.manual_seed(args.seed)  # identical initial weights on every rank and in every run
    model = build_model(args.model, num_classes=num_classes, vocab_size=args.vocab_size,
                        padded_vocab_size=args.padded_vocab_size)
    if args.init_from:  # on the bare model, so DDP and FSDP at any world size start from the same full weights
        huggingface.load_pretrained(model, args.init_from)
    model = model.to(device)
    peak = peak_flops(device, args.peak_tflops)
    flops_per_sample = training_flops_per_sample(model, dataset, args) if peak else None  # before DDP wraps it
    reporter = MetricsReporter(args, placement=placement, device=device, peak=peak, flops_per_sample=flops_per_sample)
    torch.manual_seed(args.seed + placement.rank)  # per-rank RNG streams, e.g. for dropout or augmentation

    # DDP or FSDP, activation checkpointing, per-block compile: trainer.parallel holds every difference.
    model = parallelize(model, parallel=args.parallel, precision=precision, device=device,
                        activation_checkpointing=args.activation_checkpointing, compile_blocks=args.compile)
    # All parameters at once: fused kernels on a GPU, foreach on CPU (left to itself on CPU, AdamW loops
    # over the parameters one by one, through DTensor's dispatch for each under FSDP).
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  fused=device.type == "cuda", foreach=device.type != "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_then_cosine(step, args.warmup_steps, args.max_steps))
    # The scaler only acts for fp16, whose narrow range would underflow small gradients.
    scaler = torch.amp.GradScaler(device.type, enabled=precision == torch.float16)
    sampler = ResumableDistributedSampler(dataset, seed=args.seed)
    loader = make_loader(dataset, sampler, batch_size=args.batch_size, num_workers=args.num_workers,
                         pin_memory=device.type == "cuda" if args.pin_memory is None else args.pin_memory,
                         persistent_workers=args.persistent_workers)
    state = TrainingState(model, optimizer=optimizer, scaler=scaler, scheduler=scheduler,
                          stream=MicroBatchStream(loader, sampler=sampler), args=args,
                          placement=placement, device=device, precision=precision, group=group)
    return state, reporter


def train(state: TrainingState, reporter: MetricsReporter, checkpointer: Checkpointer, stop: StopSignal,
          clock: FirstStepClock) -> None:
    """Trains from STATE's step to --max-steps, or to a stop signal; CHECKPOINTER saves on the way and at the end."""
    args = state.args
    prometheus.training_started(state.step)
    reporter.restart_clock(state.step)
    state.stream.take_wait_seconds()  # what resuming waited is no step's
    loss_sum = torch.zeros((), device=state.device)
    start_step = state.step
    while state.step < args.max_steps:
        first_step = state.step == start_step  # nothing trained since the start or the checkpoint
        asked = stop.agree(state.group)  # every rank sees the same answers at the same step
        if asked.stop and first_step:  # nothing to save, as for a stop inside the step
            raise StoppedWithNothingToSave(stop.received or "a stop signal on another rank")
        if asked.stop:
            break
        if asked.save:
            checkpointer.save_now(f"{SAVE_SIGNAL.name} asked for a checkpoint")
        lr = state.scheduler.get_last_lr()[0]
        with stop.nothing_to_lose(first_step):
            loss_sum += train_one_step(state)
        state.scheduler.step()
        state.step += 1
        prometheus.step_finished(state.step)
        if first_step:
            after_the_first_step(state, reporter, checkpointer, stop, clock)
        if state.step % args.log_every == 0 or state.step == args.max_steps:
            totals = gather_for_the_report(loss_sum, peak_memory_bytes(state), state.stream.take_wait_seconds())
            reporter.report(state, lr, totals)
            loss_sum.zero_()
        checkpointer.step_done()
    checkpointer.finish()  # a stop signal too: the save in flight, then the last step
    reporter.close()
    if state.placement.is_main:
        print(end_line(state, stop), flush=True)


def after_the_first_step(state: TrainingState, reporter: MetricsReporter, checkpointer: Checkpointer,
                         stop: StopSignal, clock: FirstStepClock) -> None:
    """Everything is compiled now: what the first step cost, told and recorded, and with --compile the
    compiled code kept beside the checkpoints for a warm resume (not in the grace period of a stop)."""
    first = clock.first_step_done(state.group)
    report_first_step(first, state, reporter)
    if state.args.compile and not stop.received:
        checkpointer.save_compiled_code(compiled_anything=first.compile.misses > 0)


def report_first_step(first: FirstStep, state: TrainingState, reporter: MetricsReporter) -> None:
    """The first step's line, and its figures in the next metrics record and on the Prometheus endpoint."""
    if state.placement.is_main:
        print(first.line(), flush=True)
    figures = first.record()
    reporter.add_to_next_record(figures)
    prometheus.first_step_done(figures)


def start_line(state: TrainingState) -> str:
    args, world_size = state.args, state.placement.world_size
    parameter_count = sum(p.numel() for p in state.model.parameters())  # a DTensor's numel is the whole tensor's
    return (f"training {args.model} ({parameter_count:,} parameters) on {world_size} rank(s) with {args.parallel}, "
            f"{state.device.type}, {dist.get_backend()}, {str(state.precision).removeprefix('torch.')}, "
            f"global batch {args.batch_size * args.grad_accum * world_size}, "
            f"{len(state.stream.sampler) // args.batch_size} micro-batches per epoch per rank")


def end_line(state: TrainingState, stop: StopSignal) -> str:
    if state.step < state.args.max_steps:
        why = stop.received or "a stop signal on another rank"
        return f"stopped by {why} at step {state.step}/{state.args.max_steps}; run the same command again to resume"
    return f"done: {state.step} steps, checkpoints in {state.args.ckpt_dir}"


def choose_precision(requested: str, device: torch.device) -> torch.dtype:
    """The autocast dtype: bf16 where the GPU has it, fp16 on older GPUs, fp32 on CPU unless asked."""
    if requested != "auto":
        return PRECISIONS[requested]
    if device.type != "cuda":
        return torch.float32  # CPU autocast is slower than fp32 on most CPUs without AMX
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def build_dataset(args: argparse.Namespace) -> tuple[Dataset, int]:
    """The training set and its number of classes (0 for token data): tokens, an image folder, or images."""
    if is_language_model(args.model):
        if args.data_file is not None:
            return TokenFile(args.data_file, args.seq_len), 0
        return SyntheticTokens(args.synthetic_samples, seq_len=args.seq_len, vocab_size=args.vocab_size,
                               seed=args.seed), 0
    if args.data_dir is not None:
        dataset = load_image_folder(str(args.data_dir), args.image_size)
        return dataset, len(dataset.classes)
    images = SyntheticImages(args.synthetic_samples, image_size=args.image_size, num_classes=args.num_classes,
                             seed=args.seed)
    return images, args.num_classes


def training_flops_per_sample(model: nn.Module, dataset: Dataset, args: argparse.Namespace) -> int:
    """FLOPs of one training sample, for MFU: the PaLM formula for a GPT, counted by running the CNN once
    (on the bare model: under DDP its backward would start an all-reduce)."""
    if is_language_model(args.model):
        return flops_per_token(model, args.seq_len) * args.seq_len
    return count_training_flops_per_sample(model, dataset[0][0].to(next(model.parameters()).device))


def warmup_then_cosine(step: int, warmup_steps: int, max_steps: int) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to 0.1 at max_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(1, max_steps - warmup_steps), 1.0)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def train_one_step(state: TrainingState) -> torch.Tensor:
    """One optimizer step over --grad-accum micro-batches; returns the step's loss, left on the device."""
    model, optimizer, scaler, device = state.model, state.optimizer, state.scaler, state.device
    grad_accum, language_model = state.args.grad_accum, is_language_model(state.args.model)
    autocast = autocast_dtype(state.args.parallel, state.precision)
    step_loss = torch.zeros((), device=device)
    for micro_step in range(grad_accum):
        inputs, targets = state.stream.next_batch()
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        # Gradients are reduced once per step, on the last micro-batch; before it they just add up. With one
        # micro-batch there is nothing to switch (FSDP's switch walks every module).
        with gradient_sync(model, enabled=micro_step == grad_accum - 1) if grad_accum > 1 else nullcontext():
            with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                loss = batch_loss(model, inputs, targets, language_model=language_model) / grad_accum
            scaler.scale(loss).backward()
        step_loss += loss.detach()
    if state.args.grad_clip > 0:
        scaler.unscale_(optimizer)  # clip the real gradients, not the loss-scaled ones
        clip_gradients(model, state.args.grad_clip)
    scaler.step(optimizer)  # skips the update if fp16 gradients overflowed
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return step_loss


def batch_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *,
               language_model: bool) -> torch.Tensor:
    """The micro-batch's mean cross-entropy: a GPT computes its own (Transformer.loss, compiled with the
    output head under --compile), the CNN gives one row of logits per image."""
    if language_model:
        return model(inputs, targets)
    return F.cross_entropy(model(inputs).float(), targets)


def gather_for_the_report(loss_sum: torch.Tensor, memory_bytes: int, data_wait_seconds: float) -> RankTotals:
    """The loss summed over ranks divided by the world size, every rank's peak memory and every rank's
    time spent waiting for batches, in one collective."""
    mine = torch.tensor([loss_sum.item(), float(memory_bytes), data_wait_seconds], dtype=torch.float64,
                        device=loss_sum.device)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    ranks = torch.stack(everyone).tolist()  # one copy to the host, not one per number
    return RankTotals(loss_sum=sum(rank[0] for rank in ranks) / len(ranks),
                      memory_per_rank=[int(rank[1]) for rank in ranks],
                      data_wait_seconds=tuple(rank[2] for rank in ranks))


def peak_memory_bytes(state: TrainingState) -> int:
    """This rank's peak memory: the GPU's max allocated, or on CPU the training state the rank holds."""
    if state.device.type == "cuda":
        return torch.cuda.max_memory_allocated(state.device)
    return state_bytes(state.model, state.optimizer)


if __name__ == "__main__":
    sys.exit(main())
