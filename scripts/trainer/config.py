"""Command-line flags of the trainer and the checks that reject bad values before any rank starts.

Every rejection is a single line that names the flag, says what is wrong and what to do instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import pathlib
import shutil
from collections.abc import Callable, Sequence

import torch

from trainer.cli import OneLineErrorParser
from trainer.model import MODEL_SIZES


def bounded(kind: type, is_valid: Callable[[float], bool], description: str) -> Callable[[str], int | float]:
    """An argparse type: a KIND (int or float) for which IS_VALID holds, described in errors."""
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {description}, got {text!r}") from None
        if not is_valid(value):
            raise argparse.ArgumentTypeError(f"must be {description}, got {text!r}")
        return value
    parse.__name__ = description  # what argparse calls the type in its own messages
    return parse


positive_int = bounded(int, lambda value: value >= 1, "a positive integer")
non_negative_int = bounded(int, lambda value: value >= 0, "an integer >= 0")
# isfinite also rejects nan and inf, which float() accepts.
non_negative_float = bounded(float, lambda value: math.isfinite(value) and value >= 0, "a number >= 0")
positive_float = bounded(float, lambda value: math.isfinite(value) and value > 0, "a number > 0")
tcp_port = bounded(int, lambda value: 1 <= value <= 65535, "a TCP port (1-65535)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="train_ddp.py", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Sample DistributedDataParallel trainer. Run it with `torchrun --nproc-per-node=N "
                    "train_ddp.py` (or plain `python train_ddp.py` for one process). It resumes from the "
                    "newest checkpoint in --ckpt-dir and stops cleanly, with a checkpoint, on SIGTERM/SIGINT.")
    run = parser.add_argument_group("training")
    run.add_argument("--max-steps", type=positive_int, default=1000, help="optimizer steps to train in total")
    run.add_argument("--batch-size", type=positive_int, default=32,
                     help="samples per rank per micro-step; global batch = batch-size x grad-accum x world size")
    run.add_argument("--grad-accum", type=positive_int, default=1,
                     help="micro-steps per optimizer step (gradients are all-reduced only on the last)")
    run.add_argument("--lr", type=positive_float, default=1e-3, help="peak AdamW learning rate")
    run.add_argument("--warmup-steps", type=non_negative_int, default=50,
                     help="linear warm-up steps before the cosine decay to lr/10")
    run.add_argument("--weight-decay", type=non_negative_float, default=0.05, help="AdamW weight decay")
    run.add_argument("--grad-clip", type=non_negative_float, default=1.0,
                     help="clip the global gradient norm to this value; 0 turns clipping off")
    run.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                     help="bf16 autocast, fp16 autocast with a gradient scaler, or fp32; "
                          "auto = bf16 on GPUs that support it, fp16 on older GPUs, fp32 on CPU")
    run.add_argument("--compile", action="store_true", help="compile the model with torch.compile")
    run.add_argument("--seed", type=non_negative_int, default=1337,
                     help="seed of the data, the initial weights and (plus the rank) each rank's RNG")

    model = parser.add_argument_group("model and data")
    model.add_argument("--model", choices=sorted(MODEL_SIZES), default="small", help="size of the residual CNN")
    model.add_argument("--image-size", type=bounded(int, lambda value: value >= 8, "an integer >= 8"), default=32,
                       help="side of the square input images, in pixels")
    model.add_argument("--data-dir", type=pathlib.Path, default=None,
                       help="train on an image folder (one sub-folder per class, needs torchvision) "
                            "instead of the synthetic dataset")
    model.add_argument("--synthetic-samples", type=positive_int, default=16384,
                       help="size of the synthetic dataset (made from --seed, nothing is downloaded)")
    model.add_argument("--num-classes", type=bounded(int, lambda value: value >= 2, "an integer >= 2"), default=10,
                       help="classes of the synthetic dataset")
    model.add_argument("--num-workers", type=non_negative_int, default=2,
                       help="DataLoader worker processes per rank; 0 loads in the training process")
    model.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None,
                       help="pin host memory for faster copies to the GPU (default: on with CUDA)")
    model.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=True,
                       help="keep DataLoader workers alive between epochs (with --num-workers > 0)")

    system = parser.add_argument_group("checkpoints, logging and distribution")
    system.add_argument("--ckpt-dir", type=pathlib.Path, default=pathlib.Path("checkpoints"),
                        help="where checkpoints are written and resumed from")
    system.add_argument("--save-every", type=non_negative_int, default=500,
                        help="save a checkpoint every N steps (and always at the end); 0 = only at the end")
    system.add_argument("--keep", type=positive_int, default=3, help="how many newest checkpoints to keep")
    system.add_argument("--log-every", type=positive_int, default=10, help="report metrics every N steps")
    system.add_argument("--metrics-file", type=pathlib.Path, default=None,
                        help="append one JSON object per report to this file")
    system.add_argument("--tensorboard-dir", type=pathlib.Path, default=None,
                        help="also write TensorBoard scalars here (needs the tensorboard package)")
    system.add_argument("--peak-tflops", type=positive_float, default=None,
                        help="peak TFLOP/s of one device, for MFU (default: known GPUs only)")
    system.add_argument("--prometheus-port", type=tcp_port, default=None,
                        help="serve Prometheus metrics on this port from local rank 0 of every node "
                             "(docs/monitoring.md)")
    system.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="auto = this rank's GPU (LOCAL_RANK) when CUDA is available, else the CPU")
    system.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                        help="process-group backend; auto = nccl on GPU, gloo on CPU")
    system.add_argument("--pg-timeout", type=positive_int, default=600,
                        help="seconds a collective may wait for the other ranks before the job fails")
    return parser


def check_compatible(args: argparse.Namespace, world_size: int) -> str | None:
    """The first problem among flags that are valid alone but not together or not here, or None."""
    cuda = torch.cuda.is_available()
    on_gpu = args.device == "cuda" or (args.device == "auto" and cuda)
    if args.device == "cuda" and not cuda:
        return "--device cuda: no CUDA device is visible; use --device cpu"
    if args.backend == "nccl" and not on_gpu:
        return "--backend nccl needs a GPU and none is used; use --backend gloo"
    if args.precision == "bf16" and on_gpu and not torch.cuda.is_bf16_supported():
        return "--precision bf16: this GPU has no bf16 support; use --precision fp16"
    if args.compile and not on_gpu and not shutil.which(os.environ.get("CXX", "g++")):
        return "--compile on CPU needs a C++ compiler (g++), which is not installed; drop --compile"
    if args.data_dir is not None:
        if importlib.util.find_spec("torchvision") is None:
            return "--data-dir needs torchvision, which is not installed; pip install torchvision or drop --data-dir"
        if not args.data_dir.is_dir():
            return f"--data-dir {args.data_dir} is not a directory"
    elif args.synthetic_samples < args.batch_size * world_size:
        return (f"--synthetic-samples {args.synthetic_samples} is smaller than one batch on every rank "
                f"({args.batch_size} x {world_size} ranks); raise it or lower --batch-size")
    if args.tensorboard_dir is not None and importlib.util.find_spec("tensorboard") is None:
        return "--tensorboard-dir needs tensorboard, which is not installed; pip install tensorboard or drop it"
    if args.prometheus_port is not None and importlib.util.find_spec("prometheus_client") is None:
        return ("--prometheus-port needs prometheus_client, which is not installed; "
                "pip install prometheus-client or drop it")
    if args.metrics_file is not None and not args.metrics_file.parent.is_dir():
        return f"--metrics-file {args.metrics_file}: directory {args.metrics_file.parent} does not exist"
    return check_ckpt_dir(args.ckpt_dir)


def check_ckpt_dir(ckpt_dir: pathlib.Path) -> str | None:
    """A problem that would stop us creating or writing CKPT_DIR, found before training starts."""
    nearest = next(path for path in [ckpt_dir, *ckpt_dir.parents] if path.exists())
    if not nearest.is_dir():
        return f"--ckpt-dir {ckpt_dir}: {nearest} is not a directory"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"--ckpt-dir {ckpt_dir}: {nearest} is not writable"
    return None


def parse_config(argv: Sequence[str] | None, world_size: int) -> argparse.Namespace:
    """Parsed, checked flags; exits with one line on stderr (status 2) at the first bad value."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_compatible(args, world_size)
    if problem:
        parser.error(problem)
    return args
