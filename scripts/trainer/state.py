"""Everything a restart needs, in one object with state_dict() and load_state_dict().

It is also the training loop's one handle: besides what it saves it holds the run's flags, its place
in the job, its device, its precision and its control group, so the loop's functions take the state
and nothing else.

Saving and resuming are then one call each (trainer.checkpoint_write, trainer.checkpoint_read), whatever the model and the
parallelism: torch.distributed.checkpoint's get_state_dict/set_state_dict give the same parameter
names for a bare model, a DDP model and an FSDP model, with full tensors for DDP and this rank's
shards (DTensors) for FSDP, which is what lets a checkpoint move between DDP and FSDP and between
world sizes.
"""
from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

from trainer.data import MicroBatchStream
from trainer.distributed import Placement


class TrainingState:
    """Model, optimizer, gradient scaler, LR schedule, data position, step, RNG streams and config;
    and, not saved, the flags, placement, device, precision and control group they were made with.

    state_dict() is collective (it gathers every rank's RNG state), so all ranks call it together.
    """

    def __init__(self, model: nn.Module, *, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, stream: MicroBatchStream,
                 args: argparse.Namespace, placement: Placement, device: torch.device, precision: torch.dtype,
                 group: dist.ProcessGroup) -> None:
        self.model, self.optimizer, self.scaler, self.scheduler = model, optimizer, scaler, scheduler
        self.stream, self.args, self.placement, self.device, self.group = stream, args, placement, device, group
        self.precision = precision  # the compute dtype: what autocast or FSDP's parameter copies use
        self.world_size = placement.world_size
        self.step = 0
        # DDP: every rank's full tensors, where they are (no copy; torch.save copies to the file);
        # FSDP: each rank's shards, as DTensors.
        self.options = StateDictOptions(full_state_dict=args.parallel == "ddp")

    def state_dict(self) -> dict[str, Any]:
        model, optimizer = get_state_dict(self.model, self.optimizer, options=self.options)
        rng: list[Any] = [None] * self.world_size
        dist.all_gather_object(rng, capture_rng_state(), group=self.group)
        return {
            "model": model, "optimizer": optimizer, "scaler": self.scaler.state_dict(),
            "scheduler": self.scheduler.state_dict(), "step": self.step, "epoch": self.stream.epoch,
            # Samples of this epoch all ranks consumed: a restart with another world size maps it back.
            "samples_in_epoch": self.stream.batches_done * self.args.batch_size * self.world_size,
            "rng": rng, "config": {name: str(value) for name, value in vars(self.args).items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores STATE, whose model and optimizer tensors are either full (a one-file checkpoint, or
        any checkpoint under DDP) or this rank's shards (a sharded checkpoint loaded under FSDP)."""
        full = not any(isinstance(tensor, DTensor) for tensor in state["model"].values())
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=StateDictOptions(full_state_dict=full))
        self.scaler.load_state_dict(state["scaler"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.stream.seek(state["epoch"], state["samples_in_epoch"] // (self.args.batch_size * self.world_size))
        if len(state["rng"]) == self.world_size:  # per-rank streams only map onto the same world size
            restore_rng_state(state["rng"][dist.get_rank()])


def capture_rng_state() -> dict[str, torch.Tensor]:
    """This process's torch RNG states as tensors (the only RNGs the trainer draws from)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
