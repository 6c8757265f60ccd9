"""Every flag rejects bad values with one line that names it, before any process group starts;
--help explains every flag. The refusals run train_ddp.main in one forked process each
(data/refusals.py), the rest as the trainer's own command line.

Run: TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_flags.py -q
(or `make test`, which runs it inside the image).
"""
from __future__ import annotations

import json
import pathlib
import shlex

import pytest

from tests.support.training import ENV, RUN_TIMEOUT_S, make_workdir, trainer_command

pytestmark = pytest.mark.tier("full")

REFUSALS = pathlib.Path(__file__).parent / "data" / "refusals.py"

DOCUMENTED_FLAGS = [
    "--max-steps", "--batch-size", "--grad-accum", "--lr", "--warmup-steps", "--weight-decay", "--grad-clip",
    "--precision", "--compile", "--seed", "--model", "--image-size", "--data-dir", "--synthetic-samples",
    "--num-classes", "--num-workers", "--pin-memory", "--persistent-workers", "--ckpt-dir", "--save-every",
    "--keep", "--log-every", "--metrics-file", "--tensorboard-dir", "--peak-tflops", "--device", "--backend",
    "--pg-timeout", "--parallel", "--activation-checkpointing", "--seq-len", "--vocab-size", "--data-file",
    "--init-from", "--prometheus-port", "--prometheus-address", "--async-checkpoint",
]

# (flag, bad value, words the one-line message must contain)
BAD_VALUES = [
    ("--max-steps", "-1", "an integer >= 0"),
    ("--max-steps", "ten", "an integer >= 0"),
    ("--batch-size", "-4", "a positive integer"),
    ("--grad-accum", "0", "a positive integer"),
    ("--lr", "0", "a number > 0"),
    ("--lr", "nan", "a number > 0"),
    ("--warmup-steps", "-1", "an integer >= 0"),
    ("--weight-decay", "-0.1", "a number >= 0"),
    ("--grad-clip", "x", "a number >= 0"),
    ("--precision", "fp8", "invalid choice"),
    ("--seed", "-1", "an integer >= 0"),
    ("--model", "huge", "invalid choice"),
    ("--image-size", "4", "an integer >= 8"),
    ("--synthetic-samples", "0", "a positive integer"),
    ("--synthetic-samples", "3", "smaller than one batch"),
    ("--num-classes", "1", "an integer >= 2"),
    ("--num-workers", "-2", "an integer >= 0"),
    ("--ckpt-dir", "/dev/null/checkpoints", "is not a directory"),
    ("--save-every", "-5", "an integer >= 0"),
    ("--keep", "0", "a positive integer"),
    ("--log-every", "0", "a positive integer"),
    ("--metrics-file", "/no/such/dir/metrics.jsonl", "does not exist"),
    ("--metrics-file", ".", "is a directory"),
    ("--metrics-file", "/sys/metrics.jsonl", "cannot be written"),  # read-only, even for root
    ("--peak-tflops", "0", "a number > 0"),
    ("--device", "tpu", "invalid choice"),
    ("--backend", "mpi", "invalid choice"),
    ("--pg-timeout", "0", "a positive integer"),
    ("--vocab-size", "70000", "an integer 2..65536"),
]

# Values that are only wrong for a model or together with other flags:
# (setup run first in the empty working folder, arguments, flag to name, words of the one-line message)
BAD_COMBINATIONS = [
    ("", "--model gpt-tiny --seq-len 300", "--seq-len", "longer than gpt-tiny's context of 256 tokens"),
    ("printf abc > odd.bin", "--model gpt-tiny --data-file odd.bin", "--data-file", "not whole uint16 tokens"),
    ("touch empty.bin", "--model gpt-tiny --data-file empty.bin", "--data-file", "empty.bin is empty; make it"),
    ("printf ab > one.bin", "--model gpt-tiny --data-file one.bin", "--data-file", "holds 0 windows"),
    # token ids 0..299 as uint16: 300 is outside gpt-tiny's byte vocabulary
    ("python -c 'import numpy; numpy.arange(300, dtype=numpy.uint16).tofile(\"ids.bin\")'",
     "--model gpt-tiny --seq-len 8 --batch-size 2 --data-file ids.bin", "--data-file", "outside --vocab-size 256"),
    ("", "--model tiny --parallel fsdp", "--parallel fsdp", "is for the GPT models"),
    ("", "--activation-checkpointing", "--activation-checkpointing", "is for the GPT models"),
    ("", "--model gpt-tiny --parallel fsdp --precision fp16", "--precision fp16", "use --precision bf16"),
    ("", "--model gpt-tiny --data-dir .", "--data-dir", "use --data-file"),
]


def run_trainer(torch_host, scripts_dir: str, arguments: str, setup: str = "true"):
    # No torchrun: a bad flag must fail before any rendezvous, so a lone process shows the same.
    return torch_host.run(f"cd $(mktemp -d) && {setup} && "
                          f"{trainer_command(nproc=None, scripts_dir=scripts_dir, timeout_s=60)} {arguments}")


@pytest.fixture(scope="module")
def refusals(torch_host, scripts_dir) -> dict[str, dict]:
    """What the trainer answered to each bad value and combination, by its test id: status, stdout, stderr."""
    cases = {f"{flag}={value}": {"argv": [flag, value]} for flag, value, _ in BAD_VALUES}
    cases |= {arguments: {"argv": shlex.split(arguments), "setup": setup} for setup, arguments, _, _ in BAD_COMBINATIONS}
    workdir = make_workdir(torch_host)
    torch_host.check_output(f"cat > {workdir}/refusals.py <<'EOF'\n{REFUSALS.read_text()}\nEOF")
    answers = torch_host.check_output(f"{ENV} timeout {RUN_TIMEOUT_S} python {workdir}/refusals.py {scripts_dir} "
                                      f"<<'EOF'\n{json.dumps(list(cases.values()))}\nEOF")
    torch_host.run(f"rm -rf {workdir}")
    return dict(zip(cases, json.loads(answers)))


def assert_one_line_naming(answer: dict, flag: str, message: str) -> None:
    assert answer["status"] == 2, answer
    lines = answer["stderr"].strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and message in lines[0], answer["stderr"]
    assert answer["stdout"] == ""  # rejected before training printed anything


@pytest.mark.parametrize(("flag", "value", "message"), BAD_VALUES, ids=[f"{f}={v}" for f, v, _ in BAD_VALUES])
@pytest.mark.tier("landing")
def test_bad_value_gets_one_line_naming_the_flag(refusals, flag, value, message):
    assert_one_line_naming(refusals[f"{flag}={value}"], flag, message)


@pytest.mark.parametrize(("setup", "arguments", "flag", "message"), BAD_COMBINATIONS,
                         ids=[arguments for _, arguments, _, _ in BAD_COMBINATIONS])
@pytest.mark.tier("landing")
def test_bad_combination_gets_one_line_naming_the_flag(refusals, setup, arguments, flag, message):
    assert_one_line_naming(refusals[arguments], flag, message)


def test_a_refusal_from_the_command_line_is_the_same_one_line(torch_host, scripts_dir, refusals):
    """The forks answer as the trainer's own process does."""
    result = run_trainer(torch_host, scripts_dir, "--lr nan")
    assert (result.rc, result.stdout, result.stderr) == tuple(refusals["--lr=nan"].values())


def test_missing_optional_packages_are_named(torch_host, scripts_dir):
    """--data-dir needs torchvision and --tensorboard-dir needs tensorboard; both are optional."""
    checks = {"torchvision": ("--data-dir .", "--data-dir needs torchvision"),
              "tensorboard": ("--tensorboard-dir tb", "--tensorboard-dir needs tensorboard")}
    missing = [name for name in checks
               if torch_host.run(f"python -c 'import {name}'").rc != 0]
    if not missing:
        pytest.skip("torchvision and tensorboard are both installed here")
    for name in missing:
        arguments, message = checks[name]
        result = run_trainer(torch_host, scripts_dir, arguments)
        lines = result.stderr.strip().splitlines()
        assert result.rc == 2 and len(lines) == 1 and message in lines[0], result.stderr


def test_cuda_only_choices_are_refused_without_a_gpu(torch_host, scripts_dir):
    if torch_host.run("python -c 'import torch, sys; sys.exit(torch.cuda.is_available())'").rc != 0:
        pytest.skip("a GPU is visible here")
    for arguments, message in [("--device cuda", "--device cuda: no CUDA device is visible"),
                               ("--backend nccl", "--backend nccl needs a GPU")]:
        result = run_trainer(torch_host, scripts_dir, arguments)
        assert result.rc == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_help_explains_every_flag(torch_host, scripts_dir):
    result = run_trainer(torch_host, scripts_dir, "--help")
    assert result.rc == 0
    for flag in DOCUMENTED_FLAGS:
        assert flag in result.stdout, flag
    assert "torchrun" in result.stdout
