"""Hugging Face GPT-2 folders in and out: `config.json` plus `model.safetensors` (or `pytorch_model.bin`).

trainer/gpt.py is GPT-2's architecture (pre-norm, tanh GELU, tied embeddings, biases, learned positions),
so the bridge is a matter of names and two details:
  * GPT-2's attention and MLP layers are `Conv1D`s, whose weights are stored (in, out); nn.Linear
    stores (out, in), so those four weights are transposed each way;
  * GPT-2's 50257-token vocabulary is padded with zero rows to a multiple of 64 (fast GPU tiles, as
    nanoGPT does); the model leaves the padding out of its logits, so the loss never sees it, and
    export drops it again.
Every tensor's shape is checked against the model before anything is loaded, from the file's header.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import shutil

import torch

from trainer.gpt import GPT_SIZES, GPTShape, Transformer

VOCAB_MULTIPLE = 64
SAFETENSORS_FILE, PICKLE_FILE = "model.safetensors", "pytorch_model.bin"
# What a GPT-2 tokenizer is made of: the fast tokenizer's one file, or GPT-2's original pair, plus settings.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
# GPT-2 settings trainer/gpt.py has built in: a folder that changes any of them is another model.
FIXED_SETTINGS = {"activation_function": ("gelu_new", "gelu_pytorch_tanh"), "layer_norm_epsilon": (1e-5,),
                  "scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,), "n_inner": (None,),
                  "tie_word_embeddings": (True,)}
# Tensors a GPT-2 file may hold beyond hf_names: the tied output layer (wte itself, checked) and older
# transformers' causal-mask buffers, which trainer/gpt.py's SDPA has no use for.
TIED_HEAD = "lm_head.weight"
MASK_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
CUSTOM_NAME = re.compile(r"^gpt2-(\d+)l-(\d+)h-(\d+)w-(\d+)p$")  # a pretrained shape that is none of GPT_SIZES
LAYER_TENSOR = re.compile(r"^h\.(\d+)\.")
# The numbers of config.json that size the model, and the range each may take: checked before anything
# is built, since a shape is built (on the meta device) to check the weights, and n_layer 1e7 would
# take minutes and gigabytes to get there. The ranges hold every GPT-2 and far larger models; the
# vocabulary is bounded by the uint16 token files the trainer reads.
SHAPE_SETTINGS = {"n_layer": (1, 1024), "n_head": (1, 1024), "n_embd": (1, 65536), "n_positions": (1, 1 << 20),
                  "vocab_size": (2, 65536)}


class PretrainedError(Exception):
    """A folder --init-from cannot use; the message is the one line the user reads."""


def read_shape(folder: pathlib.Path) -> tuple[GPTShape, int]:
    """The model shape and the vocabulary size that FOLDER/config.json describes."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise PretrainedError(f"--init-from {folder}: cannot read config.json ({error})") from None
    except RecursionError:  # json's parser recurses once per level of nesting
        raise PretrainedError(f"--init-from {folder}: config.json is nested too deeply to be a model's "
                              "config") from None
    if not isinstance(config, dict):
        raise PretrainedError(f"--init-from {folder}: config.json holds a JSON {type(config).__name__}, not "
                              "an object of settings")
    if config.get("model_type") != "gpt2":
        raise PretrainedError(f"--init-from {folder}: config.json has model_type {config.get('model_type')!r}; "
                              "only GPT-2 (model_type gpt2) folders can be loaded")
    for setting, supported in FIXED_SETTINGS.items():
        if config.get(setting, supported[0]) not in supported:
            raise PretrainedError(f"--init-from {folder}: config.json sets {setting} to {config[setting]!r}, "
                                  f"which this trainer's GPT-2 does not have (it has {supported[0]!r})")
    for setting, (low, high) in SHAPE_SETTINGS.items():
        value = config.get(setting)
        if type(value) is not int or not low <= value <= high:  # type(): true and 2.0 are no layer counts
            found = "no value" if setting not in config else repr(value)
            raise PretrainedError(f"--init-from {folder}: config.json's {setting} must be a whole number from "
                                  f"{low} to {high}, and it is {found}")
    if config["n_embd"] % config["n_head"]:
        raise PretrainedError(f"--init-from {folder}: n_embd {config['n_embd']} is not a multiple of n_head")
    shape = GPTShape(layers=config["n_layer"], heads=config["n_head"], width=config["n_embd"],
                     max_seq_len=config["n_positions"])
    return shape, config["vocab_size"]


def model_name(shape: GPTShape) -> str:
    """GPT_SIZES' name for SHAPE, or a name that spells it out, so a checkpoint's config says its shape."""
    known = next((name for name, size in GPT_SIZES.items() if size == shape), None)
    return known or f"gpt2-{shape.layers}l-{shape.heads}h-{shape.width}w-{shape.max_seq_len}p"


def shape_of(name: str) -> GPTShape | None:
    """The shape a model name stands for (GPT_SIZES, or model_name's spelled-out form); None for the CNN."""
    if name in GPT_SIZES:
        return GPT_SIZES[name]
    match = CUSTOM_NAME.match(name)
    if not match:
        return None
    layers, heads, width, positions = map(int, match.groups())
    return GPTShape(layers=layers, heads=heads, width=width, max_seq_len=positions)


def padded_vocab_size(vocab_size: int, *, pretrained: bool) -> int:
    """The token embedding's rows: a pretrained vocabulary padded to a multiple of VOCAB_MULTIPLE, or a
    vocabulary chosen with --vocab-size as it is. Part of the model's shape, so checkpoints record it."""
    return math.ceil(vocab_size / VOCAB_MULTIPLE) * VOCAB_MULTIPLE if pretrained else vocab_size


def hf_names(layers: int) -> dict[str, str]:
    """Our parameter name -> GPT-2's, for every weight and bias of a model with LAYERS blocks."""
    names = {"token_embedding.weight": "wte.weight", "position_embedding.weight": "wpe.weight",
             "final_norm.weight": "ln_f.weight", "final_norm.bias": "ln_f.bias"}
    for i in range(layers):
        for ours, theirs in [("attention_norm", "ln_1"), ("attention.qkv", "attn.c_attn"),
                             ("attention.proj", "attn.c_proj"), ("mlp_norm", "ln_2"), ("mlp.0", "mlp.c_fc"),
                             ("mlp.2", "mlp.c_proj")]:
            for kind in ("weight", "bias"):
                names[f"blocks.{i}.{ours}.{kind}"] = f"h.{i}.{theirs}.{kind}"
    return names


def is_conv1d_weight(hf_name: str) -> bool:
    return hf_name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))


def hf_shapes(shape: GPTShape, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """GPT-2's name -> the shape its tensor must have for SHAPE and VOCAB_SIZE (before padding)."""
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = Transformer(shape, vocab_size)
    ours = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    return {theirs: (ours[name][::-1] if is_conv1d_weight(theirs) else ours[name])
            for name, theirs in hf_names(shape.layers).items()}


def weights_file(folder: pathlib.Path) -> pathlib.Path:
    for name in (SAFETENSORS_FILE, PICKLE_FILE):
        if (folder / name).is_file():
            return folder / name
    raise PretrainedError(f"--init-from {folder}: neither {SAFETENSORS_FILE} nor {PICKLE_FILE} is there")


def read_tensors(folder: pathlib.Path) -> dict[str, torch.Tensor]:
    """FOLDER's tensors under GPT-2's bare names (a `transformer.` prefix removed), in CPU memory (a
    pickle's are memory-mapped instead)."""
    path = weights_file(folder)
    if path.name == SAFETENSORS_FILE:
        from safetensors.torch import load_file  # checked up front by config.py

        tensors = load_file(path)
    else:
        tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {name.removeprefix("transformer."): tensor for name, tensor in tensors.items()}


def read_shapes(folder: pathlib.Path) -> dict[str, tuple[int, ...]]:
    """FOLDER's tensor shapes under GPT-2's bare names, from the safetensors header (no tensor is read)."""
    path = weights_file(folder)
    if path.name == PICKLE_FILE:
        return {name: tuple(tensor.shape) for name, tensor in read_tensors(folder).items()}
    from safetensors import safe_open

    with safe_open(path, framework="pt") as file:
        return {name.removeprefix("transformer."): tuple(file.get_slice(name).get_shape()) for name in file.keys()}


def check_weights(folder: pathlib.Path, shape: GPTShape, vocab_size: int) -> None:
    """Raises PretrainedError naming the first tensor that is missing, has the wrong shape, or would be
    dropped on loading (an untied lm_head among them)."""
    file_name = weights_file(folder).name
    try:
        found = read_shapes(folder)
    except Exception as error:  # a truncated or foreign file: safetensors and torch.load raise their own kinds
        raise PretrainedError(f"--init-from {folder}: cannot read {file_name} ({error})") from None
    layers = {int(match[1]) for name in found if (match := LAYER_TENSOR.match(name))}
    if layers != set(range(shape.layers)):  # before hf_shapes builds anything of SHAPE's size
        raise PretrainedError(f"--init-from {folder}: config.json says n_layer {shape.layers}, but {file_name} "
                              f"holds tensors of {len(layers)} layer(s)" + (f" numbered up to {max(layers)}"
                                                                           if layers else ""))
    expected_shapes = hf_shapes(shape, vocab_size)
    for name, expected in expected_shapes.items():
        if name not in found:
            raise PretrainedError(f"--init-from {folder}: {file_name} has no tensor {name}")
        if found[name] != expected:
            raise PretrainedError(f"--init-from {folder}: tensor {name} has shape {list(found[name])}, "
                                  f"but config.json describes {list(expected)}")
    unexpected = sorted(name for name in found
                        if name not in expected_shapes and name != TIED_HEAD and not MASK_BUFFER.match(name))
    if unexpected:
        raise PretrainedError(f"--init-from {folder}: {file_name} has tensor {unexpected[0]}, which this trainer's "
                              f"GPT-2 does not have")
    if TIED_HEAD in found and not torch.equal(read_tensor(folder, TIED_HEAD), read_tensor(folder, "wte.weight")):
        raise PretrainedError(f"--init-from {folder}: {TIED_HEAD} is not wte.weight; this trainer's GPT-2 ties "
                              f"its output layer to the token embedding, so it would lose the folder's")


def read_tensor(folder: pathlib.Path, name: str) -> torch.Tensor:
    """One of FOLDER's tensors, by its bare GPT-2 name; only that one is read from a safetensors file."""
    path = weights_file(folder)
    if path.name == PICKLE_FILE:
        return read_tensors(folder)[name]
    from safetensors import safe_open

    with safe_open(path, framework="pt") as file:
        return file.get_tensor(next(key for key in file.keys() if key.removeprefix("transformer.") == name))


def load_pretrained(model: torch.nn.Module, folder: pathlib.Path) -> None:
    """Copies FOLDER's GPT-2 weights into MODEL (a bare trainer/gpt.py Transformer, before DDP or FSDP).

    The padding rows of the vocabulary are zeroed: their logits are left out, so they never learn, and
    a zero row cannot surprise anyone who uses the padded embedding.
    """
    tensors = read_tensors(folder)
    ours = model.state_dict()
    with torch.no_grad():
        for name, theirs in hf_names(model.shape.layers).items():
            tensor = tensors[theirs].t() if is_conv1d_weight(theirs) else tensors[theirs]
            target = ours[name]
            target.zero_()
            target[:tensor.shape[0]].copy_(tensor)


def to_huggingface(weights: dict[str, torch.Tensor], shape: GPTShape, vocab_size: int) -> dict[str, torch.Tensor]:
    """Our full state dict as GPT2LMHeadModel's, padding rows dropped; lm_head is tied to wte, so not written."""
    exported = {}
    for name, theirs in hf_names(shape.layers).items():
        tensor = weights[name]
        if name == "token_embedding.weight":
            tensor = tensor[:vocab_size]
        exported[f"transformer.{theirs}"] = (tensor.t() if is_conv1d_weight(theirs) else tensor).contiguous()
    return exported


def config_for(shape: GPTShape, vocab_size: int) -> dict[str, object]:
    """A GPT2Config of SHAPE, for a model trained from scratch (a fine-tuned one keeps its own)."""
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": shape.layers,
            "n_head": shape.heads, "n_embd": shape.width, "n_positions": shape.max_seq_len,
            "vocab_size": vocab_size, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True}


def write_folder(output: pathlib.Path, *, tensors: dict[str, torch.Tensor], config: dict[str, object],
                 tokenizer_from: pathlib.Path | None) -> list[str]:
    """Writes a from_pretrained folder at OUTPUT; returns the tokenizer files copied from TOKENIZER_FROM."""
    from safetensors.torch import save_file

    output.mkdir(parents=True, exist_ok=True)
    save_file(tensors, output / SAFETENSORS_FILE, metadata={"format": "pt"})
    (output / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copied = [name for name in TOKENIZER_FILES if tokenizer_from and (tokenizer_from / name).is_file()]
    for name in copied:
        shutil.copyfile(tokenizer_from / name, output / name)
    return copied
