"""Command-line flags of the trainer and the checks that reject bad values before any rank starts.

Every rejection is a single line that names the flag, says what is wrong and what to do instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import math
import os
import pathlib
import pwd
import shutil
import tempfile
from collections.abc import Callable, Sequence

import torch

from trainer import huggingface
from trainer.cli import OneLineErrorParser
from trainer.gpt import DEFAULT_VOCAB_SIZE, GPT_SIZES
from trainer.huggingface import shape_of
from trainer.model import MODEL_NAMES, is_language_model


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


def ip_address(text: str) -> str:
    """An argparse type: an IPv4 or IPv6 address to listen on (a host name would need a lookup)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address such as 0.0.0.0 or 127.0.0.1, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="train_ddp.py", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Sample distributed trainer (DDP or FSDP) for a residual CNN or a GPT-2 style Transformer. "
                    "Run it with `torchrun --nproc-per-node=N train_ddp.py` (or plain `python train_ddp.py` for "
                    "one process). It resumes from the newest checkpoint in --ckpt-dir and stops cleanly, with "
                    "a checkpoint, on SIGTERM/SIGINT/SIGHUP. DDP or FSDP? See docs/training.md.")
    run = parser.add_argument_group("training")
    run.add_argument("--max-steps", type=non_negative_int, default=1000,
                     help="optimizer steps to train in total; 0 saves the starting weights as a checkpoint "
                          "(with --init-from: converts the folder, e.g. to export it again)")
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
    run.add_argument("--compile", action="store_true",
                     help="compile with torch.compile: each Transformer block on its own (the whole CNN)")
    run.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp",
                     help="ddp: a full copy of the model per rank, checkpoints in one file; fsdp (GPT models): "
                          "FSDP2 shards parameters, gradients and optimizer state over the ranks per block, "
                          "bf16 parameters with fp32 gradient reduction under --precision bf16, sharded "
                          "checkpoints that resume at any world size")
    run.add_argument("--activation-checkpointing", action="store_true",
                     help="GPT models: keep only each block's input and recompute its activations in backward "
                          "(less memory for about a third more compute)")
    run.add_argument("--seed", type=non_negative_int, default=1337,
                     help="seed of the data, the initial weights and (plus the rank) each rank's RNG")

    model = parser.add_argument_group("model and data")
    model.add_argument("--model", choices=MODEL_NAMES, default=None,
                       help="tiny/small/base: the residual CNN on images; gpt-tiny (0.5M parameters, for CPU "
                            "tests), gpt2-small (124M), gpt2-medium (350M), gpt2-large (774M): GPT-2 style "
                            "Transformers on tokens. Default: small, or with --init-from the folder's own model")
    model.add_argument("--init-from", type=pathlib.Path, default=None, metavar="DIR",
                       help="fine-tune a Hugging Face GPT-2 folder (config.json with model_type gpt2, and "
                            "model.safetensors or pytorch_model.bin): its config.json gives the model's size and "
                            "vocabulary, its weights the start. A checkpoint in --ckpt-dir is resumed instead, "
                            "so a restarted job never goes back to the pretrained weights")
    model.add_argument("--seq-len", type=positive_int, default=None,
                       help="GPT models: tokens per sample (context length); default: the model's maximum, "
                            f"{GPT_SIZES['gpt-tiny'].max_seq_len} for gpt-tiny, 1024 for GPT-2")
    model.add_argument("--vocab-size", type=bounded(int, lambda value: 2 <= value <= 65536, "an integer 2..65536"),
                       default=None, help="GPT models: vocabulary size; default 256 (bytes) for gpt-tiny, 50304 "
                                          "(GPT-2's 50257 padded to a multiple of 64) for GPT-2")
    model.add_argument("--data-file", type=pathlib.Path, default=None,
                       help="GPT models: train on a flat file of uint16 token ids (nanoGPT's train.bin; "
                            "prepare_text.py makes one from text) instead of synthetic tokens")
    model.add_argument("--image-size", type=bounded(int, lambda value: value >= 8, "an integer >= 8"), default=32,
                       help="side of the square input images, in pixels")
    model.add_argument("--data-dir", type=pathlib.Path, default=None,
                       help="train on an image folder (one sub-folder per class, needs torchvision) "
                            "instead of the synthetic dataset")
    model.add_argument("--synthetic-samples", type=positive_int, default=16384,
                       help="size of the synthetic dataset, images or token sequences (made from --seed, "
                            "nothing is downloaded)")
    model.add_argument("--num-classes", type=bounded(int, lambda value: value >= 2, "an integer >= 2"), default=10,
                       help="CNN: classes of the synthetic dataset")
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
    system.add_argument("--async-checkpoint", action=argparse.BooleanOptionalAction, default=True,
                        help="write sharded (--parallel fsdp) checkpoints in the background: training waits only "
                             "while the state is copied to CPU memory. One save at a time; a checkpoint appears "
                             "only once every rank wrote it. The DDP file is always written synchronously")
    system.add_argument("--log-every", type=positive_int, default=10, help="report metrics every N steps")
    system.add_argument("--metrics-file", type=pathlib.Path, default=None,
                        help="append one JSON object per report to this file")
    system.add_argument("--tensorboard-dir", type=pathlib.Path, default=None,
                        help="also write TensorBoard scalars here (needs the tensorboard package)")
    system.add_argument("--peak-tflops", type=positive_float, default=None,
                        help="peak TFLOP/s of one device, for MFU (default: known GPUs only)")
    system.add_argument("--prometheus-port", type=tcp_port, default=None,
                        help="serve Prometheus metrics on this port from local rank 0 of every node "
                             "(docs/monitoring.md); unauthenticated, so see --prometheus-address")
    system.add_argument("--prometheus-address", type=ip_address, default="0.0.0.0",
                        help="the address /metrics listens on: 0.0.0.0 (every interface, for a Prometheus "
                             "in another container or host), 127.0.0.1 (this host only), or one interface's IP")
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
    if args.compile:
        problem = check_compile_cache_runs_code()
        if problem:
            return problem
    problem = check_model_flags(args, world_size) if is_language_model(args.model) else check_cnn_flags(args)
    if problem:
        return problem
    if args.init_from is not None:
        problem = check_pretrained(args.init_from, args.model, args.vocab_size)
        if problem:
            return problem
    if args.parallel == "fsdp" and args.precision == "fp16":
        return ("--parallel fsdp with --precision fp16: fp16 needs a sharded gradient scaler, which this "
                "trainer does not have; use --precision bf16")
    if args.data_dir is not None:
        if importlib.util.find_spec("torchvision") is None:
            return "--data-dir needs torchvision, which is not installed; pip install torchvision or drop --data-dir"
        if not args.data_dir.is_dir():
            return f"--data-dir {args.data_dir} is not a directory"
    elif args.data_file is None and args.synthetic_samples < args.batch_size * world_size:
        return (f"--synthetic-samples {args.synthetic_samples} is smaller than one batch on every rank "
                f"({args.batch_size} x {world_size} ranks); raise it or lower --batch-size")
    if args.tensorboard_dir is not None:
        problem = check_folder_to_write("--tensorboard-dir", args.tensorboard_dir)
        if problem:
            return problem
        if importlib.util.find_spec("tensorboard") is None:
            return "--tensorboard-dir needs tensorboard, which is not installed; pip install tensorboard or drop it"
    if args.prometheus_port is not None and importlib.util.find_spec("prometheus_client") is None:
        return ("--prometheus-port needs prometheus_client, which is not installed; "
                "pip install prometheus-client or drop it")
    if args.metrics_file is not None:
        problem = check_metrics_file(args.metrics_file)
        if problem:
            return problem
    return check_ckpt_dir(args.ckpt_dir)


def nearest_existing(folder: pathlib.Path) -> pathlib.Path:
    """FOLDER, or the nearest of its parents that exists: what a folder not yet made will live on."""
    return next(path for path in [folder, *folder.parents] if path.exists())


def forbids_running_code(folder: str) -> bool:
    """Whether FOLDER, or the nearest part of it that exists, is on a mount that runs no code (noexec):
    Docker's --tmpfs is one unless told `exec`."""
    try:
        return bool(os.statvfs(nearest_existing(pathlib.Path(folder))).f_flag & os.ST_NOEXEC)
    except OSError:
        return False


def check_compile_cache_runs_code() -> str | None:
    """torch.compile loads the kernels it compiles from its cache folder as shared libraries, which a noexec
    mount refuses (a read-only root's --tmpfs /tmp, where the home lies then too): the first step would end
    in a traceback from deep in the compiler."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    folders = [cache_dir(), *filter(None, [os.environ.get("TRITON_CACHE_DIR")])]
    refused = next((folder for folder in folders if forbids_running_code(folder)), None)
    if refused is None:
        return None
    return (f"--compile: torch.compile's cache {refused} is on a mount that runs no code (noexec), so the kernels "
            f"it compiles cannot load; mount it with exec (docker run --tmpfs /tmp:exec), point "
            f"TORCHINDUCTOR_CACHE_DIR at a folder that allows it, or drop --compile")


def check_metrics_file(path: pathlib.Path) -> str | None:
    """A problem that would stop rank 0 appending to PATH, found by trying what the reporter will do.

    Only trying tells the truth for root, network file systems and read-only mounts. Every rank runs
    this at the same moment, so it creates nothing another rank could see: an existing file is opened
    for appending without O_CREAT, and a new one is stood in for by a file of this process's own,
    which tempfile names uniquely and removes.
    """
    if not path.parent.is_dir():
        return f"--metrics-file {path}: directory {path.parent} does not exist"
    if path.is_dir():
        return f"--metrics-file {path} is a directory; name a file in it, e.g. {path / 'metrics.jsonl'}"
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
    except FileNotFoundError:
        try:
            tempfile.TemporaryFile(dir=path.parent).close()
        except OSError as error:
            return (f"--metrics-file {path} cannot be written: no new file can be made in {path.parent} "
                    f"({error.strerror}); choose a writable directory")
    except OSError as error:
        return f"--metrics-file {path} cannot be written ({error.strerror}); choose a writable path"
    return None


def check_cnn_flags(args: argparse.Namespace) -> str | None:
    """Flags that only the GPT models take, given with the CNN."""
    for flag, value in [("--seq-len", args.seq_len), ("--vocab-size", args.vocab_size),
                        ("--data-file", args.data_file), ("--activation-checkpointing", args.activation_checkpointing),
                        ("--parallel fsdp", args.parallel == "fsdp")]:
        if value:
            return f"{flag} is for the GPT models (--model {'/'.join(GPT_SIZES)}), not the CNN --model {args.model}"
    return None


def check_pretrained(folder: pathlib.Path, model: str, vocab_size: int) -> str | None:
    """A problem with --init-from FOLDER: a missing library, or any tensor whose shape config.json contradicts."""
    if folder.joinpath(huggingface.SAFETENSORS_FILE).is_file() and importlib.util.find_spec("safetensors") is None:
        return (f"--init-from {folder} holds {huggingface.SAFETENSORS_FILE}, which needs safetensors: "
                "pip install safetensors")
    try:
        huggingface.check_weights(folder, shape_of(model), vocab_size)
    except huggingface.PretrainedError as error:
        return str(error)
    return None


def check_model_flags(args: argparse.Namespace, world_size: int) -> str | None:
    """GPT flags (--seq-len and --vocab-size already filled in by with_model_defaults), and --data-file."""
    max_seq_len = shape_of(args.model).max_seq_len
    if args.seq_len > max_seq_len:
        return f"--seq-len {args.seq_len} is longer than {args.model}'s context of {max_seq_len} tokens; lower it"
    if args.data_dir is not None:
        return f"--data-dir is an image folder for the CNN; --model {args.model} reads tokens: use --data-file"
    if args.data_file is None:
        return None
    if importlib.util.find_spec("numpy") is None:
        return "--data-file needs numpy, which is not installed; pip install numpy or drop --data-file"
    return check_token_file(args.data_file, seq_len=args.seq_len, vocab_size=args.vocab_size,
                            samples_per_step=args.batch_size * world_size)


def check_token_file(path: pathlib.Path, *, seq_len: int, vocab_size: int, samples_per_step: int) -> str | None:
    """A problem with PATH as uint16 token data for windows of SEQ_LEN tokens, or None.

    It reads the whole file once (memory-mapped) for the largest token id, since a token outside the
    vocabulary would otherwise fail deep inside the embedding, on the GPU as an unreadable device assert.
    """
    if not path.is_file():
        return f"--data-file {path} is not a file"
    size = path.stat().st_size
    if size == 0:
        return f"--data-file {path} is empty; make it with prepare_text.py"
    if size % 2:
        return (f"--data-file {path} is not whole uint16 tokens ({size} bytes, an odd number); "
                f"make it with prepare_text.py")
    windows = (size // 2 - 1) // seq_len
    if windows < samples_per_step:
        return (f"--data-file {path} holds {windows} windows of --seq-len {seq_len} tokens, fewer than one batch "
                f"on every rank ({samples_per_step}); use more text, a shorter --seq-len or a smaller --batch-size")
    import numpy as np  # only token files need numpy, for its memory map

    largest = int(np.memmap(path, dtype=np.uint16, mode="r").max())
    if largest >= vocab_size:
        return (f"--data-file {path} holds token id {largest}, outside --vocab-size {vocab_size}; "
                f"raise --vocab-size above it")
    return None


def check_ckpt_dir(ckpt_dir: pathlib.Path) -> str | None:
    """A problem that would stop us creating or writing CKPT_DIR, found before training starts."""
    return check_folder_to_write("--ckpt-dir", ckpt_dir)


def check_folder_to_write(flag: str, folder: pathlib.Path) -> str | None:
    """A problem that would stop FLAG's FOLDER being created (with its parents) or written, found before
    the process group starts: a file in its path, or a nearest existing folder we may not write."""
    nearest = nearest_existing(folder)
    if not nearest.is_dir():
        return f"{flag} {folder}: {nearest} is not a directory"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"{flag} {folder}: {nearest} is not writable{owned_by_another(nearest)}"
    return None


def owned_by_another(path: pathlib.Path) -> str:
    """Who made PATH, where it is not this user: a run started as root (`docker exec` without --user) leaves
    a folder only root can write, and the next run, as the container's user, cannot save there."""
    owner, me = path.stat().st_uid, os.getuid()
    if owner == me:
        return ""
    return (f": it belongs to {user_name(owner)}, and this run is {user_name(me)}; a run as {user_name(owner)} "
            f"made it (docker exec runs as root unless given --user). Give it to yourself as that user "
            f"(docker exec --user {owner} CONTAINER chown -R {me} {path}), or use another folder")


def user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


# Settings that decide the model's parameter shapes: a checkpoint made with other values cannot be resumed.
# padded_vocab_size is no flag: with_model_defaults derives it (--init-from pads the vocabulary).
CNN_SHAPE_FLAGS = ("model", "num_classes", "data_dir")
GPT_SHAPE_FLAGS = ("model", "vocab_size", "padded_vocab_size")


def describe_model_change(saved_config: dict[str, str], args: argparse.Namespace) -> str:
    """The shape-deciding settings that differ between a checkpoint's config and ARGS, to read; or ''.

    A setting an older checkpoint did not record is not compared (a changed embedding then shows as a
    tensor size mismatch on loading, which is refused just the same)."""
    shape_flags = GPT_SHAPE_FLAGS if is_language_model(args.model) else CNN_SHAPE_FLAGS
    changed = [name for name in shape_flags
               if name in saved_config and saved_config[name] != str(getattr(args, name))]
    if not changed:
        return ""
    flags = ["embedding rows" if name == "padded_vocab_size" else "--" + name.replace("_", "-")
             for name in changed]
    return (", ".join(f"{flag} {saved_config.get(name)}" for flag, name in zip(flags, changed)) + "; now "
            + ", ".join(f"{flag} {getattr(args, name)}" for flag, name in zip(flags, changed)))


def with_model_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """A copy of ARGS with the model filled in (--init-from's, or the CNN), --init-from made absolute, a
    GPT's own --seq-len and --vocab-size where they were not given, and padded_vocab_size, the embedding's
    rows (None for the CNN). Raises PretrainedError when --init-from cannot say its model."""
    if args.init_from is not None:
        if args.model is not None or args.vocab_size is not None:
            flag = "--model" if args.model is not None else "--vocab-size"
            raise huggingface.PretrainedError(f"{flag} with --init-from: the model and its vocabulary come from "
                                              f"{args.init_from}/config.json; drop {flag}")
        if not args.init_from.is_dir():
            raise huggingface.PretrainedError(f"--init-from {args.init_from} is not a directory")
        shape, vocab_size = huggingface.read_shape(args.init_from)
        # Absolute, as the checkpoint's config keeps it: export reads the tokenizer from there, from anywhere.
        args = argparse.Namespace(**{**vars(args), "model": huggingface.model_name(shape), "vocab_size": vocab_size,
                                     "init_from": args.init_from.resolve()})
    args = argparse.Namespace(**{**vars(args), "model": args.model or "small"})
    if not is_language_model(args.model):
        return argparse.Namespace(**{**vars(args), "padded_vocab_size": None})
    vocab_size = args.vocab_size or DEFAULT_VOCAB_SIZE[args.model]
    padded_vocab_size = huggingface.padded_vocab_size(vocab_size, pretrained=args.init_from is not None)
    return argparse.Namespace(**{**vars(args), "seq_len": args.seq_len or shape_of(args.model).max_seq_len,
                                 "vocab_size": vocab_size, "padded_vocab_size": padded_vocab_size})


def parse_config(argv: Sequence[str] | None, world_size: int) -> argparse.Namespace:
    """Parsed, checked flags; exits with one line on stderr (status 2) at the first bad value.

    For the GPT models, --seq-len and --vocab-size come back filled in with the model's defaults.
    """
    parser = build_parser()
    try:
        args = with_model_defaults(parser.parse_args(argv))
    except huggingface.PretrainedError as error:
        parser.error(str(error))
    problem = check_compatible(args, world_size)
    if problem:
        parser.error(problem)
    return args
