#!/usr/bin/env python3
"""Turns a UTF-8 text file into a flat file of uint16 token ids that `train_ddp.py --data-file` reads.

    python /opt/scripts/prepare_text.py book.txt book.bin                     # bytes: vocabulary 256
    python /opt/scripts/prepare_text.py book.txt book.bin --tokenizer gpt2    # GPT-2 BPE (needs tiktoken)
    python /opt/scripts/prepare_text.py book.txt book.bin --tokenizer my-gpt2 # a checkpoint folder's own
    torchrun --nproc-per-node=2 /opt/scripts/train_ddp.py --model gpt-tiny --data-file book.bin

The layout is nanoGPT's train.bin: token ids as little-endian uint16, one after another, nothing else,
so files made by nanoGPT's prepare scripts work too. The byte tokenizer needs no download: each UTF-8
byte is one token, which is what `gpt-tiny`'s vocabulary of 256 is for. For the GPT-2 sizes (vocabulary
50304), `--tokenizer gpt2` uses tiktoken's GPT-2 encoding where it is installed. To fine-tune a
Hugging Face folder (`train_ddp.py --init-from DIR`), `--tokenizer DIR` uses that folder's own
tokenizer.json (or vocab.json and merges.txt) through the `tokenizers` library; nothing is downloaded.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

from trainer.cli import OneLineErrorParser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="prepare_text.py", description=__doc__.splitlines()[0])
    parser.add_argument("text", type=pathlib.Path, help="UTF-8 text file to tokenize")
    parser.add_argument("output", type=pathlib.Path, help="where to write the uint16 token file")
    parser.add_argument("--tokenizer", default="bytes", metavar="bytes|gpt2|DIR",
                        help="bytes: one token per UTF-8 byte (vocabulary 256); gpt2: GPT-2 BPE via tiktoken; "
                             "DIR: the tokenizer files of a Hugging Face folder (tokenizer.json, or vocab.json "
                             "and merges.txt), as the one train_ddp.py --init-from DIR fine-tunes")
    args = parser.parse_args(argv)
    if args.tokenizer not in ("bytes", "gpt2"):
        folder = pathlib.Path(args.tokenizer)
        if not folder.is_dir():
            parser.error(f"--tokenizer {args.tokenizer} is neither bytes, gpt2 nor a directory")
        has_pair = (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()
        if not (folder / "tokenizer.json").is_file() and not has_pair:  # a BPE needs its merges as well
            parser.error(f"--tokenizer {folder} holds neither tokenizer.json nor both vocab.json and merges.txt")
    if not args.text.is_file():
        parser.error(f"{args.text} is not a file")
    if not args.output.parent.is_dir():
        parser.error(f"directory {args.output.parent} of {args.output} does not exist")
    if args.output.is_dir():
        parser.error(f"{args.output} is a directory; name the token file to write, e.g. {args.output / 'train.bin'}")
    if names_the_same_file(args.output, args.text):  # writing it would destroy the text before it is read
        parser.error(f"the output {args.output} is the text {args.text} itself; name another file, e.g. "
                     f"{args.text.with_name(args.text.stem + '.tokens.bin')}")
    return args


def names_the_same_file(output: pathlib.Path, text: pathlib.Path) -> bool:
    """Whether OUTPUT is TEXT: the same name, a symbolic or hard link to it, or a dangling link that
    resolves to its path."""
    if output.exists():
        return os.path.samefile(output, text)
    return output.resolve() == text.resolve()


def tokenize(text: bytes, tokenizer: str) -> tuple[np.ndarray, int]:
    """TEXT's token ids and the size of the vocabulary they come from."""
    if tokenizer == "bytes":
        return np.frombuffer(text, dtype=np.uint8).astype(np.uint16), 256
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as error:
        sys.exit(f"prepare_text.py: error: the text is not UTF-8 ({error}); convert it or use --tokenizer bytes")
    if tokenizer != "gpt2":
        return tokenize_with_folder(decoded, pathlib.Path(tokenizer))
    try:
        import tiktoken
    except ImportError:
        sys.exit("prepare_text.py: error: --tokenizer gpt2 needs tiktoken (pip install tiktoken), "
                 "or use --tokenizer bytes")
    return np.array(tiktoken.get_encoding("gpt2").encode_ordinary(decoded), dtype=np.uint16), 50257


def tokenize_with_folder(text: str, folder: pathlib.Path) -> tuple[np.ndarray, int]:
    """TEXT encoded by FOLDER's own tokenizer, without special tokens (the text is plain text)."""
    try:
        import tokenizers
    except ImportError:
        sys.exit("prepare_text.py: error: --tokenizer DIR needs the tokenizers package (pip install tokenizers)")
    files = "tokenizer.json" if (folder / "tokenizer.json").is_file() else "vocab.json and merges.txt"
    try:
        if files == "tokenizer.json":
            tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        else:  # GPT-2's original files: a byte-level BPE
            tokenizer = tokenizers.ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    except Exception as error:  # the library raises its own kinds (and plain Exception) for an unreadable file
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        sys.exit(f"prepare_text.py: error: cannot read the tokenizer's {files} in {folder} ({reason}); "
                 f"fix or replace them (save_pretrained writes them whole)")
    vocab_size = tokenizer.get_vocab_size()
    if vocab_size > 2**16:
        sys.exit(f"prepare_text.py: error: {folder}'s vocabulary has {vocab_size} tokens, more than the "
                 f"65536 a uint16 token file can hold")
    return np.array(tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.uint16), vocab_size


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tokens, vocab_size = tokenize(args.text.read_bytes(), args.tokenizer)
    if len(tokens) < 2:
        sys.exit(f"prepare_text.py: error: {args.text} gives {len(tokens)} token(s); training needs at least 2")
    tokens.astype("<u2").tofile(args.output)
    print(f"wrote {len(tokens):,} tokens ({args.tokenizer}, vocabulary {vocab_size}, max id {int(tokens.max())}) "
          f"to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
