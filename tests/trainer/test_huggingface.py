"""Fine-tuning a Hugging Face GPT-2 in the image, the README's three commands: prepare the text with the
folder's tokenizer, train with --init-from, export with --format hf; and transformers loads the result.

    make test PYTEST_ARGS="tests/trainer/test_huggingface.py"
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_huggingface.py

No hub is reachable, so the "pretrained" folder is made here, in the test environment: a small GPT-2
(2 layers, 4 heads, width 64, GPT-2's vocabulary of 50257) trained for a few steps on a text, with a
byte-level BPE tokenizer trained on that text. The trainer runs on the torch host (the image), which
has no transformers: folders go there and back with docker cp.
"""
from __future__ import annotations

import math
import pathlib
import random
import subprocess

import numpy
import pytest
import torch

from tests.conftest import torch_tests_run_on_host
from tests.support.containers import docker
from tests.support.training import ENV, make_workdir, read_metrics, trainer_command

pytestmark = pytest.mark.tier("full")

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SEQ_LEN = 32
WORDS = ("the cat dog sat ran on a mat log under over red blue small big quickly slowly and then it was "
         "there here one two three").split()
FRESH_LOSS = math.log(50257)  # what an untrained model's uniform guess costs


def write_text(path: pathlib.Path) -> None:
    """About 40 kB of sentences from a small vocabulary: enough to learn from in a few steps."""
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "."
                              for _ in range(5000)))


def pretrain(folder: pathlib.Path, text: pathlib.Path) -> float:
    """Makes FOLDER a GPT-2 folder with a tokenizer that has learned TEXT a little; returns its loss on it."""
    tokenizer = tokenizers.ByteLevelBPETokenizer()
    tokenizer.train_from_iterator([text.read_text()], vocab_size=400, min_frequency=2, show_progress=False)
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = torch.tensor(tokenizer.encode(text.read_text()).ids)
    windows = ids[:len(ids) // (SEQ_LEN + 1) * (SEQ_LEN + 1)].view(-1, SEQ_LEN + 1)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=128, vocab_size=50257)
    model = transformers.GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(15):
        batch = windows[torch.randint(len(windows), (8,), generator=torch.Generator().manual_seed(step))]
        loss = model(batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(folder)
    with torch.no_grad():
        return model(windows[:64], labels=windows[:64]).loss.item()


@pytest.fixture(scope="module")
def shared(request, torch_host, tmp_path_factory):
    """(local, remote): the pretrained folder and the text here, and a work folder on the torch host holding
    copies of both; `fetch(remote_path)` copies a path of the torch host back here."""
    local = tmp_path_factory.mktemp("hf")
    write_text(local / "text.txt")
    pretrained_loss = pretrain(local / "pretrained", local / "text.txt")
    subprocess.run(["chmod", "-R", "a+rX", str(local)], check=True)  # readable by the image's user
    remote = make_workdir(torch_host)
    container = None if torch_tests_run_on_host() else request.getfixturevalue("training_container").name
    for name in ("pretrained", "text.txt"):
        if container:
            docker("cp", str(local / name), f"{container}:{remote}/{name}")
        else:
            subprocess.run(["cp", "-r", str(local / name), remote], check=True)

    def fetch(path: str) -> pathlib.Path:
        target = local / pathlib.PurePosixPath(path).name
        if container:
            docker("cp", f"{container}:{path}", str(target))
        else:
            subprocess.run(["cp", "-r", path, str(target)], check=True)
        return target

    yield {"local": local, "remote": remote, "fetch": fetch, "pretrained_loss": pretrained_loss}
    torch_host.run(f"rm -rf {remote}")


def load_exported(folder: pathlib.Path) -> transformers.GPT2LMHeadModel:
    """FOLDER loaded as transformers loads a checkpoint, which must match the model key for key."""
    model, info = transformers.GPT2LMHeadModel.from_pretrained(folder, output_loading_info=True)
    assert not any(info[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    return model.eval()


def test_zero_steps_in_and_out_gives_the_same_logits(torch_host, scripts_dir, shared):
    remote = shared["remote"]
    torch_host.check_output(trainer_command(f"--init-from {remote}/pretrained --max-steps 0 --seq-len {SEQ_LEN} "
                                            f"--synthetic-samples 8 --batch-size 2 --num-workers 0 --ckpt-dir {remote}/zero",
                                            nproc=None, scripts_dir=scripts_dir))
    torch_host.check_output(f"{ENV} timeout 60 python {scripts_dir}/export_weights.py --ckpt-dir {remote}/zero "
                            f"--format hf --output {remote}/zero-hf")
    exported = shared["fetch"](f"{remote}/zero-hf")
    tokenizer_file = shared["local"] / "pretrained" / "tokenizer.json"
    assert (exported / "tokenizer.json").read_bytes() == tokenizer_file.read_bytes()
    original = transformers.GPT2LMHeadModel.from_pretrained(shared["local"] / "pretrained").eval()
    tokens = torch.randint(50257, (2, 128), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # Tolerance 0: no step was taken, the tensors are copied (transposed twice, never recomputed), and
        # both forwards are transformers' own code on the same CPU.
        assert torch.equal(load_exported(exported)(tokens).logits, original(tokens).logits)


def test_fsdp_fine_tunes_from_the_folder_on_text_its_tokenizer_made(torch_host, scripts_dir, shared):
    remote = shared["remote"]
    prepared = torch_host.check_output(f"{ENV} timeout 60 python {scripts_dir}/prepare_text.py {remote}/text.txt "
                                       f"{remote}/text.bin --tokenizer {remote}/pretrained")
    tokenizer = tokenizers.Tokenizer.from_file(str(shared["local"] / "pretrained" / "tokenizer.json"))
    expected = tokenizer.encode((shared["local"] / "text.txt").read_text(), add_special_tokens=False).ids
    assert numpy.fromfile(shared["fetch"](f"{remote}/text.bin"), dtype="<u2").tolist() == expected, prepared
    command = trainer_command(f"--parallel fsdp --init-from {remote}/pretrained --data-file {remote}/text.bin "
                              f"--seq-len {SEQ_LEN} --batch-size 2 --num-workers 0 --lr 1e-3 --warmup-steps 2 "
                              f"--log-every 1 --ckpt-dir {remote}/fsdp --metrics-file {remote}/fsdp.jsonl",
                              scripts_dir=scripts_dir)
    output = torch_host.check_output(f"{command} --max-steps 20 2>&1")
    assert f"starting from the pretrained weights of {remote}/pretrained" in output
    losses = [record["loss"] for record in read_metrics(torch_host, f"{remote}/fsdp.jsonl")]
    # The first step's loss is the pretrained model's on other windows of the same text: near it, far
    # below a fresh model's, and the next 19 steps improve on it.
    assert losses[0] == pytest.approx(shared["pretrained_loss"], rel=0.15) and losses[0] < 0.6 * FRESH_LOSS, losses
    assert min(losses[-3:]) < losses[0], losses

    # Restarted next to its checkpoint, it continues its own progress instead of the pretrained weights.
    resumed = torch_host.check_output(f"{command} --max-steps 22 2>&1")
    assert f"resumed from {remote}/fsdp/step_000020, not from the pretrained --init-from" in resumed, resumed

    torch_host.check_output(f"{ENV} timeout 60 python {scripts_dir}/export_weights.py --ckpt-dir {remote}/fsdp "
                            f"--format hf --output {remote}/fsdp-hf")
    fine_tuned = load_exported(shared["fetch"](f"{remote}/fsdp-hf"))
    assert fine_tuned.config.vocab_size == 50257 and fine_tuned.transformer.wte.weight.shape == (50257, 64)
