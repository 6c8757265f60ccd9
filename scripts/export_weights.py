#!/usr/bin/env python3
"""Writes the model weights of a training checkpoint as one plain state_dict file, for inference or sharing.

    python /opt/scripts/export_weights.py --ckpt-dir checkpoints --output model.pt

It reads either layout the trainer writes (one `step_N.pt` file, or a sharded `step_N/` folder from any
number of FSDP ranks), in one process and without a GPU, and writes only the model's tensors, full
and on the CPU. The result loads anywhere with nothing but torch:

    model = build_model("gpt2-small", num_classes=0, vocab_size=None)   # trainer/model.py
    model.load_state_dict(torch.load("model.pt", weights_only=True))
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

from trainer.checkpoint import (TRAINING_STATE_FILE, checkpoint_step, list_checkpoints_newest_first, missing_shard,
                                save_checkpoint_atomically)
from trainer.cli import OneLineErrorParser
from trainer.model import build_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="export_weights.py", description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", type=pathlib.Path, required=True, help="the trainer's --ckpt-dir")
    parser.add_argument("--output", type=pathlib.Path, required=True, help="the state_dict file to write")
    parser.add_argument("--step", type=int, default=None, help="export this step (default: the newest readable)")
    args = parser.parse_args(argv)
    if not args.ckpt_dir.is_dir():
        parser.error(f"--ckpt-dir {args.ckpt_dir} is not a directory")
    if not args.output.parent.is_dir():
        parser.error(f"--output {args.output}: directory {args.output.parent} does not exist")
    return args


def read_model_weights(path: pathlib.Path) -> dict[str, torch.Tensor]:
    """The full model tensors of checkpoint PATH (file or sharded folder), on the CPU."""
    if not path.is_dir():
        return torch.load(path, map_location="cpu", weights_only=True)["model"]
    missing = missing_shard(path)
    if missing:
        raise FileNotFoundError(missing)
    config = torch.load(path / TRAINING_STATE_FILE, map_location="cpu", weights_only=True)["config"]
    vocab_size = None if config["vocab_size"] == "None" else int(config["vocab_size"])
    # The model built from the saved flags gives the names and full shapes; DCP fills them from the shards.
    weights = {"model": build_model(config["model"], int(config["num_classes"]), vocab_size).state_dict()}
    with warnings.catch_warnings():  # DCP warns that it loads without a process group: that is the intent here
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(weights, checkpoint_id=path)
    return weights["model"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    candidates = [path for path in list_checkpoints_newest_first(args.ckpt_dir)
                  if args.step is None or checkpoint_step(path) == args.step]
    for path in candidates:
        try:
            weights = read_model_weights(path)
        except Exception as error:  # truncated, missing shard, corrupt: try the previous one, as the trainer does
            print(f"warning: checkpoint {path} is unreadable ({str(error).splitlines()[0]}); trying the previous one",
                  file=sys.stderr)
            continue
        save_checkpoint_atomically(weights, args.output)
        print(f"wrote {len(weights)} tensors of {path} to {args.output}")
        return 0
    which = f"step {args.step}" if args.step is not None else "checkpoint"
    sys.exit(f"export_weights.py: error: no readable {which} in {args.ckpt_dir}")


if __name__ == "__main__":
    sys.exit(main())
