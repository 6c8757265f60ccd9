"""The trainer's learning-rate schedule and flag checks, called directly (no process group)."""
from __future__ import annotations

import pytest

import train_ddp
from trainer.config import build_parser, check_compatible, parse_config, with_model_defaults


def test_the_learning_rate_warms_up_linearly_then_decays_to_a_tenth():
    schedule = [train_ddp.warmup_then_cosine(step, warmup_steps=4, max_steps=20) for step in range(21)]
    assert schedule[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(later <= earlier for earlier, later in zip(schedule[3:], schedule[4:]))
    assert schedule[-1] == pytest.approx(0.1)


@pytest.mark.parametrize("argv, message", [
    (["--max-steps", "-1"], "an integer >= 0"),
    (["--lr", "nan"], "a number > 0"),
    (["--synthetic-samples", "3", "--batch-size", "4"], "smaller than one batch"),
    (["--backend", "nccl", "--device", "cpu"], "--backend nccl needs a GPU"),
    (["--prometheus-address", "localhost"], "--prometheus-address: must be an IP address"),
])
def test_a_bad_flag_ends_in_one_line_that_names_it(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        parse_config([*argv, "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    assert stopped.value.code == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors


def test_a_checkpoint_folder_under_a_file_is_rejected_before_training(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit):
        parse_config(["--ckpt-dir", str(tmp_path / "a-file" / "ckpt")], world_size=1)
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--ckpt-dir", "--tensorboard-dir"])
def test_an_output_folder_that_cannot_be_made_is_one_line_before_training(flag, tmp_path, capsys):
    """--tensorboard-dir used to fail in SummaryWriter, a traceback on rank 0 once the process group ran."""
    (tmp_path / "a-file").write_text("")
    folders = {"--ckpt-dir": tmp_path / "ckpt", flag: tmp_path / "a-file" / "x"}
    with pytest.raises(SystemExit) as stopped:
        parse_config([word for name, folder in folders.items() for word in (name, str(folder))], world_size=1)
    errors = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(errors) == 1, errors
    assert f"{flag} {tmp_path / 'a-file' / 'x'}: {tmp_path / 'a-file'} is not a directory" in errors[0], errors


def test_checking_the_flags_never_writes_into_them(tmp_path):
    args = parse_config(["--model", "gpt-tiny", "--ckpt-dir", str(tmp_path / "ckpt")], world_size=1)
    assert (args.seq_len, args.vocab_size) == (256, 256)  # the model's defaults, filled in a copy
    given = build_parser().parse_args(["--model", "gpt-tiny"])
    check_compatible(with_model_defaults(given), world_size=1)
    assert (given.seq_len, given.vocab_size) == (None, None)
