#!/usr/bin/env python3
"""Writes the model weights of a training checkpoint as one plain state_dict file, or a Hugging Face folder.

    python /opt/scripts/export_weights.py --ckpt-dir checkpoints --output model.pt
    python /opt/scripts/export_weights.py --ckpt-dir checkpoints --format hf --output my-gpt2   # GPT models

It reads either layout the trainer writes (one `step_N.pt` file, or a sharded `step_N/` folder from any
number of FSDP ranks), in one process and without a GPU, and writes only the model's tensors, full
and on the CPU. The result loads anywhere with nothing but torch:

    model = build_model("gpt2-small", num_classes=0, vocab_size=None)   # trainer/model.py
    model.load_state_dict(torch.load("model.pt", weights_only=True))

`--format hf` writes config.json and model.safetensors that `transformers.GPT2LMHeadModel.from_pretrained`
loads, without the vocabulary's padding rows; a model fine-tuned with `--init-from DIR` keeps DIR's
config.json and gets DIR's tokenizer files copied along (trainer/huggingface.py).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

from trainer.checkpoint_folder import TRAINING_STATE_FILE, checkpoint_step, list_checkpoints_newest_first
from trainer.checkpoint_read import DamagedCheckpoint, missing_shard, read_failure
from trainer.checkpoint_write import save_checkpoint_atomically
from trainer import huggingface
from trainer.cli import OneLineErrorParser
from trainer.model import build_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="export_weights.py", description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", type=pathlib.Path, required=True, help="the trainer's --ckpt-dir")
    parser.add_argument("--output", type=pathlib.Path, required=True,
                        help="the state_dict file to write, or with --format hf the folder to create")
    parser.add_argument("--format", choices=["pt", "hf"], default="pt",
                        help="pt: one torch state_dict file; hf: a Hugging Face GPT-2 folder (GPT models only)")
    parser.add_argument("--step", type=int, default=None, help="export this step (default: the newest readable)")
    args = parser.parse_args(argv)
    if not args.ckpt_dir.is_dir():
        parser.error(f"--ckpt-dir {args.ckpt_dir} is not a directory")
    if not args.output.parent.is_dir():
        parser.error(f"--output {args.output}: directory {args.output.parent} does not exist")
    if args.format == "hf" and (args.output.is_file() or args.output.is_dir() and any(args.output.iterdir())):
        parser.error(f"--output {args.output} exists and is not an empty folder; name a new folder for --format hf")
    if args.format == "pt" and args.output.is_dir():
        parser.error(f"--output {args.output} is a directory; name the file to write, e.g. {args.output / 'model.pt'}")
    return args


def read_config(path: pathlib.Path) -> dict[str, str]:
    """The trainer's flags that checkpoint PATH (file or sharded folder) was saved with, as strings."""
    state_file = path / TRAINING_STATE_FILE if path.is_dir() else path
    return torch.load(state_file, map_location="cpu", weights_only=True, mmap=True)["config"]


def read_model_weights(path: pathlib.Path) -> dict[str, torch.Tensor]:
    """The full model tensors of checkpoint PATH (file or sharded folder), on the CPU."""
    if not path.is_dir():
        return torch.load(path, map_location="cpu", weights_only=True)["model"]
    missing = missing_shard(path)
    if missing:
        raise DamagedCheckpoint(missing)
    config = read_config(path)
    vocab_size = None if config["vocab_size"] == "None" else int(config["vocab_size"])
    # The model built from the saved flags gives the names and full shapes; DCP fills them from the shards.
    model = build_model(config["model"], num_classes=int(config["num_classes"]), vocab_size=vocab_size,
                        padded_vocab_size=saved_padded_vocab_size(config, vocab_size))
    weights = {"model": model.state_dict()}
    with warnings.catch_warnings():  # DCP warns that it loads without a process group: that is the intent here
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(weights, checkpoint_id=path)
    return weights["model"]


def saved_padded_vocab_size(config: dict[str, str], vocab_size: int | None) -> int | None:
    """The embedding rows a GPT checkpoint was saved with; checkpoints that predate recording them are
    derived the way the trainer derived them, padded when made with --init-from."""
    if config.get("padded_vocab_size", "None") != "None":
        return int(config["padded_vocab_size"])
    if vocab_size is None:  # the CNN
        return None
    return huggingface.padded_vocab_size(vocab_size, pretrained=config.get("init_from", "None") != "None")


def write_huggingface_folder(weights: dict[str, torch.Tensor], config: dict[str, str], output: pathlib.Path) -> str:
    """Writes WEIGHTS as a GPT2LMHeadModel folder at OUTPUT; returns what was written, for the user."""
    shape = huggingface.shape_of(config["model"])
    if shape is None:  # before reading the vocabulary, which the CNN has none of
        sys.exit(f"export_weights.py: error: --format hf is for the GPT models; this checkpoint holds the CNN "
                 f"--model {config['model']}: use --format pt")
    vocab_size = int(config["vocab_size"])
    init_from = None if config.get("init_from", "None") == "None" else pathlib.Path(config["init_from"])
    hf_config = huggingface.config_for(shape, vocab_size)
    if init_from and (init_from / "config.json").is_file():
        hf_config = json.loads((init_from / "config.json").read_text())  # keeps its token ids and settings
    copied = huggingface.write_folder(output, tensors=huggingface.to_huggingface(weights, shape, vocab_size),
                                      config=hf_config, tokenizer_from=init_from)
    if init_from and not copied:
        print(f"warning: no tokenizer files in {init_from} (moved or none): copy them into {output} yourself",
              file=sys.stderr)
    return f"config.json, model.safetensors{''.join(', ' + name for name in copied)}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    candidates = [path for path in list_checkpoints_newest_first(args.ckpt_dir)
                  if args.step is None or checkpoint_step(path) == args.step]
    for path in candidates:
        try:
            weights = read_model_weights(path)
        except Exception as error:  # truncated, missing shard, corrupt: try the previous one, as the trainer does
            cause = read_failure(error)
            if cause is not None:  # a refused read proves nothing: an older checkpoint would be the wrong weights
                sys.exit(f"export_weights.py: error: cannot read checkpoint {path} ({cause.strerror or cause}): make "
                         f"it readable (its permissions, the disk or the mount) and run the same command again")
            print(f"warning: checkpoint {path} is unreadable ({str(error).splitlines()[0]}); trying the previous one",
                  file=sys.stderr)
            continue
        if args.format == "hf":
            written = write_huggingface_folder(weights, read_config(path), args.output)
            print(f"wrote {written} of {path} to {args.output}")
        else:
            save_checkpoint_atomically(weights, args.output)
            print(f"wrote {len(weights)} tensors of {path} to {args.output}")
        return 0
    which = f"step {args.step}" if args.step is not None else "checkpoint"
    sys.exit(f"export_weights.py: error: no readable {which} in {args.ckpt_dir}")


if __name__ == "__main__":
    sys.exit(main())
