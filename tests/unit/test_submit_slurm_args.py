"""tools/pipeline/submit_slurm.py's command line: its own flags before `--`, the trainer's after it, as
gate_and_submit.sh passes them. (tests/pipeline/test_pipeline_slurm.py submits for real.)"""
from __future__ import annotations

import subprocess

import pytest
from submit_slurm import metrics_summary, parse_args, sbatch_command

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


def test_a_value_with_commas_reaches_the_job_whole():
    # `--export=ALL,CKPT_DIR=/runs/run,lr=3e-4` would give the job CKPT_DIR=/runs/run and a variable lr:
    # the values travel in sbatch's environment, and --export names nothing but ALL.
    command = sbatch_command(parse_args([DIGEST, "--ckpt-dir", "/runs/run,lr=3e-4,LAUNCH_MODE=bare"]))
    sbatch = command.index("sbatch")
    assert command[0] == "env" and "CKPT_DIR=/runs/run,lr=3e-4,LAUNCH_MODE=bare" in command[1:sbatch]
    assert [word for word in command if word.startswith("--export")] == ["--export=ALL"]
    result = subprocess.run([*command[:sbatch], "sh", "-c", 'printf %s "$CKPT_DIR"'], capture_output=True,
                            text=True, check=True)
    assert result.stdout == "/runs/run,lr=3e-4,LAUNCH_MODE=bare"


@pytest.mark.parametrize(("tail", "summary"), [
    ('{"step": 20, "loss": 1.5, "samples_per_sec": 10.0}\n{"step": 30, "lo', "step 20, loss 1.5000"),
    ('{"step": 30, "lo', "no whole metrics record written"),
    ("", "no metrics written"),
])
def test_a_metrics_line_cut_short_leaves_the_record_before_it(tail, summary):
    assert metrics_summary(tail).startswith(summary)
