"""The bridge between trainer/gpt.py and Hugging Face's GPT-2 (trainer/huggingface.py), in one process:
the same weights give the same logits, and a folder the trainer cannot use is one line before any rank
starts. tests/trainer/test_huggingface.py runs the whole path through the trainer in the image.

    make test-unit PYTEST_ARGS=tests/unit/test_huggingface_bridge.py

The folders are made here with transformers (a test-only dependency); nothing touches a hub.
"""
from __future__ import annotations

import argparse
import json
import pathlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

import export_weights  # noqa: E402 (after the skip: the bridge itself needs no transformers)
import prepare_text  # noqa: E402
from trainer import huggingface  # noqa: E402
from trainer.config import describe_model_change, parse_config, with_model_defaults  # noqa: E402
from trainer.model import build_model  # noqa: E402

# fp32 on both sides; the two attentions add up in another order (SDPA against an explicit softmax),
# which moves logits of magnitude ~1 by about 1e-7 (3e-7 measured): 1e-5 leaves room, and a wrong
# transpose, name or padding row moves them by ~1e-1.
LOGITS_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> pathlib.Path:
    """A small GPT-2 (2 layers, 4 heads, width 64, GPT-2's vocabulary of 50257), saved as from_pretrained reads it."""
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=128, vocab_size=50257)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def test_the_trainers_model_gives_hugging_faces_logits_on_the_same_weights(gpt2_folder):
    shape, vocab_size = huggingface.read_shape(gpt2_folder)
    ours = build_model(huggingface.model_name(shape), num_classes=0, vocab_size=vocab_size,
                       padded_vocab_size=huggingface.padded_vocab_size(vocab_size, pretrained=True))
    huggingface.load_pretrained(ours, gpt2_folder)
    theirs = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder).eval()
    tokens = torch.randint(vocab_size, (2, 128), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        our_logits, their_logits = ours(tokens), theirs(tokens).logits
    assert our_logits.shape == their_logits.shape == (2, 128, 50257)  # the 47 padding rows left out
    assert torch.allclose(our_logits, their_logits, atol=LOGITS_TOLERANCE, rtol=0)
    assert ours.token_embedding.weight.shape == (50304, 64) and not ours.token_embedding.weight[50257:].any()


def test_export_gives_back_exactly_the_tensors_it_read(gpt2_folder):
    shape, vocab_size = huggingface.read_shape(gpt2_folder)
    model = build_model(huggingface.model_name(shape), num_classes=0, vocab_size=vocab_size,
                        padded_vocab_size=huggingface.padded_vocab_size(vocab_size, pretrained=True))
    huggingface.load_pretrained(model, gpt2_folder)
    exported = huggingface.to_huggingface(model.state_dict(), shape, vocab_size)
    original = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder).state_dict()
    assert exported.keys() == {name for name in original if name != "lm_head.weight"}  # tied to wte
    assert all(torch.equal(exported[name], original[name]) for name in exported)


def copy_with_config(folder: pathlib.Path, destination: pathlib.Path, **changes: object) -> pathlib.Path:
    destination.mkdir()
    (destination / "model.safetensors").symlink_to(folder / "model.safetensors")
    config = {**json.loads((folder / "config.json").read_text()), **changes}
    (destination / "config.json").write_text(json.dumps(config))
    return destination


@pytest.mark.parametrize("changes, message", [
    ({"n_positions": 256}, "tensor wpe.weight has shape [128, 64], but config.json describes [256, 64]"),
    ({"n_embd": 32, "n_head": 4}, "tensor wte.weight has shape [50257, 64], but config.json describes [50257, 32]"),
    ({"model_type": "llama"}, "has model_type 'llama'; only GPT-2"),
    ({"activation_function": "relu"}, "sets activation_function to 'relu'"),
    ({"tie_word_embeddings": False}, "sets tie_word_embeddings to False"),
])
def test_a_folder_that_does_not_fit_is_one_line_naming_the_tensor_or_setting(gpt2_folder, tmp_path, capsys,
                                                                            changes, message):
    folder = copy_with_config(gpt2_folder, tmp_path / "changed", **changes)
    with pytest.raises(SystemExit):
        parse_config(["--init-from", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors


@pytest.mark.parametrize("config_text, message", [
    ('{"n_layer": 10000000}', "config.json's n_layer must be a whole number from 1 to 1024, and it is 10000000"),
    ('{"n_embd": 1000000000}', "n_embd must be a whole number from 1 to 65536, and it is 1000000000"),
    ('{"n_head": 0}', "n_head must be a whole number from 1 to 1024, and it is 0"),
    ('{"n_layer": 2.0}', "n_layer must be a whole number from 1 to 1024, and it is 2.0"),
    ('{"n_layer": -1}', "and it is -1"),
    ('{"n_layer": true}', "and it is True"),
    ('{"n_layer": "2"}', "and it is '2'"),
    ('{"n_positions": null}', "n_positions must be a whole number from 1 to 1048576, and it is None"),
    ('{"vocab_size": "remove"}', "vocab_size must be a whole number from 2 to 65536, and it is no value"),
    ('{"n_layer": 3}', "config.json says n_layer 3, but model.safetensors holds tensors of 2 layer(s) numbered up"),
    ("[1, 2]", "config.json holds a JSON list, not an object of settings"),
    ('"gpt2"', "config.json holds a JSON str, not an object"),
    ("[" * 100000 + "]" * 100000, "config.json is nested too deeply"),
])
def test_config_json_numbers_are_checked_before_anything_is_built(gpt2_folder, tmp_path, capsys, config_text,
                                                                   message):
    """Each case took minutes and gigabytes (n_layer 1e7), a traceback or a misleading line (issue 27, item 8)."""
    folder = copy_with_config(gpt2_folder, tmp_path / "changed")
    if config_text.startswith("{"):
        changes = json.loads(config_text)
        config = {**json.loads((gpt2_folder / "config.json").read_text()), **changes}
        config_text = json.dumps({key: value for key, value in config.items() if value != "remove"})
    (folder / "config.json").write_text(config_text)
    with pytest.raises(SystemExit):
        parse_config(["--init-from", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors


def test_the_folder_decides_the_model_so_model_and_vocab_size_are_refused(gpt2_folder, tmp_path, capsys):
    args = parse_config(["--init-from", str(gpt2_folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    assert (args.model, args.vocab_size, args.seq_len) == ("gpt2-2l-4h-64w-128p", 50257, 128)
    with pytest.raises(SystemExit):
        parse_config(["--init-from", str(gpt2_folder), "--model", "gpt2-small"], world_size=1)
    assert "--model with --init-from" in capsys.readouterr().err


def copy_with_tensors(folder: pathlib.Path, destination: pathlib.Path, **changes: torch.Tensor) -> pathlib.Path:
    from safetensors.torch import load_file, save_file

    destination.mkdir()
    (destination / "config.json").symlink_to(folder / "config.json")
    save_file({**load_file(folder / "model.safetensors"), **changes}, destination / "model.safetensors")
    return destination


@pytest.mark.parametrize("extra, message", [
    ({"h.0.attn.rotary.weight": torch.zeros(4)}, "has tensor h.0.attn.rotary.weight, which"),
    ({"lm_head.weight": torch.zeros(50257, 64)}, "lm_head.weight is not wte.weight"),
])
def test_a_tensor_the_model_would_drop_is_one_line(gpt2_folder, tmp_path, capsys, extra, message):
    folder = copy_with_tensors(gpt2_folder, tmp_path / "extra", **extra)
    with pytest.raises(SystemExit):
        parse_config(["--init-from", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors


def test_a_tied_lm_head_and_the_attention_buffers_are_accepted(gpt2_folder, tmp_path):
    from safetensors.torch import load_file

    wte = load_file(gpt2_folder / "model.safetensors")["transformer.wte.weight"]
    folder = copy_with_tensors(gpt2_folder, tmp_path / "tied", **{"lm_head.weight": wte.clone(),
                                                                  "transformer.h.0.attn.bias": torch.ones(1),
                                                                  "transformer.h.1.attn.masked_bias": torch.ones(1)})
    parse_config(["--init-from", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)


def test_a_relative_init_from_is_stored_absolute(gpt2_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(gpt2_folder.parent)
    args = parse_config(["--init-from", gpt2_folder.name, "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    assert args.init_from == gpt2_folder.resolve()  # export reads it from another working directory


def test_a_fine_tuned_checkpoint_is_not_resumed_without_its_padded_vocabulary(gpt2_folder, tmp_path):
    fine_tuned = parse_config(["--init-from", str(gpt2_folder), "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    saved = {name: str(value) for name, value in vars(fine_tuned).items()}
    # The same model and vocabulary named by flags, without --init-from: the embedding would be unpadded.
    by_flags = with_model_defaults(argparse.Namespace(**{**vars(fine_tuned), "init_from": None}))
    assert (by_flags.model, by_flags.vocab_size) == (fine_tuned.model, fine_tuned.vocab_size)
    assert "50304; now" in describe_model_change(saved, by_flags)


def test_exporting_the_cnn_as_hugging_face_is_one_line(tmp_path):
    config = {"model": "small", "num_classes": "10", "vocab_size": "None", "init_from": "None"}
    with pytest.raises(SystemExit, match="--format hf is for the GPT models"):
        export_weights.write_huggingface_folder({}, config, tmp_path / "out")


def test_a_tokenizer_folder_needs_merges_txt_beside_vocab_json(tmp_path, capsys):
    (tmp_path / "text.txt").write_text("hello")
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "vocab.json").write_text("{}")
    with pytest.raises(SystemExit):
        prepare_text.parse_args([str(tmp_path / "text.txt"), str(tmp_path / "out.bin"),
                                 "--tokenizer", str(tmp_path / "tokenizer")])
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "merges.txt" in errors[0], errors
