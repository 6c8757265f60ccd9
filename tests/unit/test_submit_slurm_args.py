"""tools/pipeline/submit_slurm.py's command line: its own flags before `--`, the trainer's after it, as
gate_and_submit.sh passes them. (tests/pipeline/test_pipeline_slurm.py submits for real.)"""
from __future__ import annotations

import pytest
from submit_slurm import parse_args

DIGEST = f"127.0.0.1:5000/pytorch-dev@sha256:{'a' * 64}"


def test_everything_after_the_separator_is_the_trainers():
    args = parse_args([DIGEST, "--ckpt-dir", "/runs/a", "--nodes", "2", "--", "--model", "tiny", "--max-steps", "30"])
    assert (args.image, args.ckpt_dir, args.nodes) == (DIGEST, "/runs/a", 2)
    assert args.trainer_flags == ["--model", "tiny", "--max-steps", "30"]


def test_a_trainer_flag_named_like_one_of_the_tools_stays_the_trainers():
    args = parse_args([DIGEST, "--ckpt-dir", "/runs/a", "--", "--timeout", "5", "--", "x"])
    assert args.timeout == 86400 and args.trainer_flags == ["--timeout", "5", "--", "x"]


def test_no_separator_means_the_trainers_defaults():
    assert parse_args([DIGEST, "--ckpt-dir", "/runs/a"]).trainer_flags == []


def test_a_trainer_flag_before_the_separator_is_refused(capsys):
    with pytest.raises(SystemExit) as ended:
        parse_args([DIGEST, "--ckpt-dir", "/runs/a", "--model", "tiny"])
    assert ended.value.code == 2 and "unrecognized arguments: --model tiny" in capsys.readouterr().err
