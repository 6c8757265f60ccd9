#!/usr/bin/env python3
"""Submit the training job to Slurm with the image the gate proved, wait for it, report how it ended.

    python3 tools/pipeline/submit_slurm.py REPOSITORY@sha256:... --ckpt-dir /shared/runs/run1 \\
        [--login user@login-node] [--nodes 2] [--nproc-per-node gpu] -- [TRAINER FLAGS]

deploy/slurm/train.sbatch runs the job in LAUNCH_MODE docker (or podman, --launch-mode): every node
pulls the image by its digest. With --login the commands run over SSH on that login node (its checkout
holds --script); without, on this machine. The trainer appends its metrics to CKPT_DIR/metrics.jsonl,
whose last record is printed with the job's final state. Exit status: 0 the job completed, 1 it ended
otherwise, 2 bad input or a submission Slurm rejected (one line; nothing runs).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time

DIGEST_REFERENCE = re.compile(r"^[a-z0-9][\w.:/-]*@sha256:[0-9a-f]{64}$")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
COMMAND_TIMEOUT_S = 60


class SubmitError(Exception):
    """The one line the user reads (exit 2)."""


def run(args: argparse.Namespace, command: list[str]) -> subprocess.CompletedProcess:
    """COMMAND on the login node (over ssh) or here."""
    words = ["ssh", "-o", "BatchMode=yes", args.login, shlex.join(command)] if args.login else command
    return subprocess.run(words, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)


def sbatch_command(args: argparse.Namespace) -> list[str]:
    """The submission, with the job's variables set in sbatch's own environment and exported with ALL:
    `--export=ALL,NAME=VALUE` would split a value at its commas (a --ckpt-dir of run,lr=3e-4 would reach
    the job as run, and lr as another variable), and Slurm has no way to escape one."""
    variables = {"CONTAINER_IMAGE": args.image, "LAUNCH_MODE": args.launch_mode, "CKPT_DIR": args.ckpt_dir,
                 "NPROC_PER_NODE": args.nproc_per_node}
    return ["env", *(f"{name}={value}" for name, value in variables.items()),
            "sbatch", "--parsable", f"--nodes={args.nodes}", "--export=ALL", *args.sbatch_option,
            args.script, *args.trainer_flags, f"--metrics-file={args.ckpt_dir}/metrics.jsonl"]


def submit(args: argparse.Namespace) -> str:
    if not DIGEST_REFERENCE.match(args.image):
        raise SubmitError(f"{args.image!r} is not a digest reference: give what the gate passed "
                          "(python3 tools/regression/resolve.py REF prints it)")
    result = run(args, sbatch_command(args))
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SubmitError(f"Slurm rejected the job ({reason[0]}): fix the partition, account or limits it names "
                          "and run the pipeline again")
    job = result.stdout.strip().split(";")[0]
    print(f"submitted Slurm job {job}: {args.image}, {args.launch_mode} mode, {args.nodes} node(s)", flush=True)
    return job


def job_state(args: argparse.Namespace, job: str) -> str:
    shown = run(args, ["scontrol", "show", "job", "--oneliner", job]).stdout
    match = re.search(r"\bJobState=(\S+)", shown)
    if match:
        return match.group(1)
    accounted = run(args, ["sacct", "--noheader", "--parsable2", "--format=State", "--jobs", job]).stdout.split()
    return accounted[0].split()[0] if accounted else "UNKNOWN"


def wait_for_job(args: argparse.Namespace, job: str) -> str:
    deadline, state = time.monotonic() + args.timeout, "UNKNOWN"
    while time.monotonic() < deadline:
        state = job_state(args, job)
        if state in FINAL_STATES:
            return state
        time.sleep(args.poll_interval)
    return f"{state} (still, after {args.timeout} s of waiting; the job goes on: scancel {job} to stop it)"


def metrics_summary(tail: str) -> str:
    """The newest whole metrics record among the last lines of metrics.jsonl, in words. A job killed
    mid-write (a node lost, a full disk) leaves its last line cut short: the line before it still counts."""
    for line in reversed(tail.strip().splitlines()):
        try:
            record = json.loads(line)
            return f"step {record['step']}, loss {record['loss']:.4f}, {record['samples_per_sec']:.1f} samples/s"
        except (ValueError, KeyError, TypeError):
            continue
    return "no whole metrics record written" if tail.strip() else "no metrics written"


def final_metrics(args: argparse.Namespace) -> str:
    return metrics_summary(run(args, ["tail", "-n", "5", f"{args.ckpt_dir}/metrics.jsonl"]).stdout)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """This tool's flags, then everything after the first `--` as the trainer's, read by the trainer only.
    (argparse cannot say that: a `*` positional after IMAGE is filled, empty, at IMAGE already.)"""
    own, trainer_flags = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="submit_slurm.py", description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s IMAGE --ckpt-dir DIR [options] [-- TRAINER FLAGS]",
                                     epilog="Everything after -- is passed to the trainer (train_ddp.py --help).")
    parser.add_argument("image", help="REPOSITORY@sha256:..., the reference the gate passed")
    parser.add_argument("--ckpt-dir", required=True, help="a folder every node sees; the job resumes from it")
    parser.add_argument("--login", default="", help="user@host of a login node (ssh); default: this machine")
    parser.add_argument("--script", default="deploy/slurm/train.sbatch", help="train.sbatch on the login node")
    parser.add_argument("--launch-mode", choices=["docker", "podman"], default="docker")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--nproc-per-node", default="gpu", help="ranks per node: gpu (one per GPU) or a number")
    parser.add_argument("--sbatch-option", action="append", default=[], help="more sbatch options (--partition=...)")
    parser.add_argument("--timeout", type=float, default=86400, help="seconds to wait for the job")
    parser.add_argument("--poll-interval", type=float, default=10)
    args = parser.parse_args(own)
    args.trainer_flags = trainer_flags
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        job = submit(args)
    except SubmitError as error:
        print(f"submit_slurm.py: {error}", file=sys.stderr)
        return 2
    state = wait_for_job(args, job)
    print(f"Slurm job {job} {state}; final metrics: {final_metrics(args)}", flush=True)
    return 0 if state == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
