#!/usr/bin/env python3
"""The regression gate: train the fixed reference runs in an image and compare them with a baseline.

    python3 tools/regression/gate.py check IMAGE     # make regression IMAGE=REF: exit 0 only if every check held
    python3 tools/regression/gate.py record IMAGE    # make baseline IMAGE=REF: write the baseline file
    python3 tools/regression/gate.py check --host --flavor gpu   # on this host with scripts/ (gpu_check.sh)

IMAGE is a reference (name:tag, or repository@sha256:...; a registry reference is pulled, resolve.py).
The runs are reference_runs.py's for the device kind of this host (gpu where the engine has the NVIDIA
runtime, else cpu; --device overrides), in one container with no network. The baseline is
baselines/<flavor>-<device>.json, recorded by `record`: losses at the reported steps, throughput, the
torch version and the machine. Output: one line per check (compare.py), report.json and loss-curves.png
in --report-dir. Exit status: 0 every check held, 1 a check failed (or the training did not finish),
2 bad input (an image that cannot be resolved, a baseline of another flavor or device), in one line.
Only the standard library: it runs on a CI runner's python3 as it comes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare import CheckResult, baseline_problem, compare, summarize  # noqa: E402
from loss_plot import write_loss_plot  # noqa: E402
from reference_runs import ENVIRONMENT_MARKER, METRICS_MARKER, RUNS, run_script  # noqa: E402
from resolve import ResolveError, resolve  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
BASELINES = HERE / "baselines"
SCRIPTS_DIR = HERE.parent.parent / "scripts"
RUN_TIMEOUT_S = 1800
# Defaults a new baseline file starts with; the file's own values are what the gate uses, so a change
# of either is a reviewed change of data. CPU: the reference is bit-identical run after run on one
# machine, and docs/pipeline.md ("The tolerance") measures how far other CPU kernels move it. GPU: bf16,
# compiled kernels and non-deterministic reductions; not measured on a GPU here yet.
DEFAULT_LOSS_RTOL = {"cpu": 1e-3, "gpu": 2e-2}
# Throughput may fall to this share of the baseline's before the gate fails. On CPU only a collapse
# (20 times slower: a debug build, a lost BLAS) fails: on a shared 2-core machine the same image ran at
# 37 and at 2 to 4 samples/s under two levels of load (BENCHMARKS.md, "Regression gate"). A dedicated
# runner can raise it in its baseline file. Tight on a GPU runner of its own.
DEFAULT_THROUGHPUT_FLOOR = {"cpu": 0.05, "gpu": 0.8}
HOW_TO_UPDATE = ("Recorded by `make baseline IMAGE=REF` (tools/regression/gate.py record) on a machine of this "
                 "device kind, with nothing else running. A new baseline is a reviewed change: it redefines what "
                 "correct training is for every image after it, so its diff (losses, torch version, machine) is "
                 "read like code and its commit says why the losses moved.")


class GateError(Exception):
    """Bad input: the message is the one line the user reads (exit 2)."""


def fail_line(message: str) -> int:
    print(f"regression: {message}", file=sys.stderr)
    return 2


def image_flavor(image: str, engine: list[str]) -> str:
    result = subprocess.run([*engine, "image", "inspect", "--format", '{{index .Config.Labels "dev.pytorch-dev.flavor"}}',
                             image], capture_output=True, text=True, timeout=60, check=False)
    flavor = result.stdout.strip()
    if flavor not in ("cpu", "gpu"):
        raise GateError(f"{image} has no dev.pytorch-dev.flavor label: it is not a pytorch-dev image (make build makes one)")
    return flavor


def detect_device(args: argparse.Namespace) -> str:
    if args.device:
        return args.device
    if args.host:
        probe = [args.python, "-c", "import torch; print(int(torch.cuda.is_available()))"]
        result = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise GateError(f"{args.python} cannot import torch: set --python to an interpreter that has it")
        return "gpu" if result.stdout.strip() == "1" else "cpu"
    runtimes = subprocess.run([*args.engine, "info", "--format", "{{json .Runtimes}}"], capture_output=True,
                              text=True, timeout=60, check=False).stdout
    return "gpu" if "nvidia" in runtimes else "cpu"


def baseline_path(args: argparse.Namespace, flavor: str, device: str) -> pathlib.Path:
    return pathlib.Path(args.baseline) if args.baseline else BASELINES / f"{flavor}-{device}.json"


def load_baseline(path: pathlib.Path, flavor: str, device: str) -> dict[str, Any]:
    if not path.is_file():
        raise GateError(f"no baseline {path} for the {flavor} flavor on {device}: record one on such a machine with "
                        f"`make baseline IMAGE=REF` and commit it after review")
    try:
        baseline = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GateError(f"baseline {path} cannot be read ({error}): restore it from git, or record a new one "
                        "(make baseline IMAGE=REF)") from None
    problem = baseline_problem(baseline)
    if problem:
        raise GateError(f"baseline {path} is malformed: {problem}; restore it from git, or record a new one "
                        "(make baseline IMAGE=REF)")
    if (baseline.get("flavor"), baseline.get("device")) != (flavor, device):
        raise GateError(f"baseline {path} is for the {baseline.get('flavor')} flavor on {baseline.get('device')}, this "
                        f"is the {flavor} flavor on {device}: use baselines/{flavor}-{device}.json (drop BASELINE=)")
    expected = {run.name: run.flags for run in RUNS[device]}
    recorded = {name: run.get("flags") for name, run in baseline["runs"].items()}
    if recorded != expected:
        raise GateError(f"baseline {path} was recorded with other reference runs than reference_runs.py's: "
                        "record a new one (make baseline IMAGE=REF) in the commit that changes them")
    return baseline


def training_command(args: argparse.Namespace, device: str, image: str) -> list[str]:
    if args.host:
        return ["bash", "-c", run_script(device, python=args.python, scripts_dir=str(SCRIPTS_DIR),
                                         workdir=f"{args.report_dir}/work")]
    gpus = ["--gpus", "all"] if device == "gpu" else []
    script = run_script(device, python="python", scripts_dir="/opt/scripts", workdir="/tmp/regression")
    # The default network, not none: torchrun's rendezvous needs the container's host name to resolve.
    return [*args.engine, "run", "--rm", "--name", args.container_name, "--shm-size", "2g",
            *gpus, image, "bash", "-c", script]


def train(args: argparse.Namespace, device: str, image: str) -> tuple[dict[str, Any], dict[str, list[dict]], int]:
    """Runs the reference runs; returns the environment they ran in, each run's metrics, the exit status."""
    print(f"regression: training {', '.join(run.name for run in RUNS[device])} in {image or 'this host'}", file=sys.stderr)
    try:
        result = subprocess.run(training_command(args, device, image), stdout=subprocess.PIPE, text=True,
                                timeout=RUN_TIMEOUT_S, check=False)
        output, status = result.stdout, result.returncode
    except subprocess.TimeoutExpired as timeout:
        if not args.host:
            subprocess.run([*args.engine, "kill", args.container_name], capture_output=True, timeout=60, check=False)
        partial = timeout.stdout or ""
        output, status = partial.decode() if isinstance(partial, bytes) else partial, 124
    environment: dict[str, Any] = {}
    metrics: dict[str, list[dict]] = {}
    current: list[dict] | None = None
    for line in output.splitlines():
        if line == ENVIRONMENT_MARKER:
            current = None
            environment = {"pending": True}
        elif line.startswith(METRICS_MARKER):
            current = metrics.setdefault(line[len(METRICS_MARKER):], [])
        elif environment.get("pending"):
            environment = json.loads(line)
        elif current is not None and line.strip():
            current.append(json.loads(line))
    return environment, metrics, status


def target(args: argparse.Namespace) -> tuple[str, str, str]:
    """(image to run, its digest reference or id, flavor); the image is "" for a run on this host."""
    if args.host:
        return "", "this host", args.flavor or "gpu"
    if not args.image:
        raise GateError("name the image: make regression IMAGE=REF (name:tag or repository@sha256:...)")
    resolved = resolve(args.image, args.engine)
    return args.image, resolved.digest_reference or resolved.image_id, image_flavor(args.image, args.engine)


def record(args: argparse.Namespace) -> int:
    image, identity, flavor = target(args)
    device = detect_device(args)
    environment, metrics, status = train(args, device, image)
    if status != 0 or set(metrics) != {run.name for run in RUNS[device]}:
        return fail_line(f"the reference runs failed (exit {status}) in {image or 'this host'}: nothing recorded; "
                         "fix the image first (its output is above)")
    path = baseline_path(args, flavor, device)
    try:
        previous = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        previous = {}  # its tolerances only are kept, and a file that cannot be read has none to keep
    previous = previous if isinstance(previous, dict) else {}
    baseline = {
        "how_to_update": HOW_TO_UPDATE,
        "flavor": flavor, "device": device,
        "loss_rtol": previous.get("loss_rtol", DEFAULT_LOSS_RTOL[device]),
        "throughput_floor": previous.get("throughput_floor", DEFAULT_THROUGHPUT_FLOOR[device]),
        "recorded": {"image": identity, "date": datetime.date.today().isoformat(), **environment},
        "runs": {run.name: {"flags": run.flags, **summarize(metrics[run.name])} for run in RUNS[device]},
    }
    problem = baseline_problem(baseline)
    if problem:  # a diverged reference run: a baseline of NaN would pass nothing, or everything
        return fail_line(f"the reference runs of {image or 'this host'} cannot be a baseline ({problem}): nothing "
                         "recorded; fix the image first")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=2) + "\n")
    print(f"regression: recorded {path} from {identity} (torch {environment.get('torch')}); review and commit it")
    return 0


def check(args: argparse.Namespace) -> int:
    started = time.monotonic()
    image, identity, flavor = target(args)
    device = detect_device(args)
    path = baseline_path(args, flavor, device)
    baseline = load_baseline(path, flavor, device)
    environment, metrics, status = train(args, device, image)
    runs = {name: summarize(records) for name, records in metrics.items() if records}
    results = compare(runs, baseline)
    if status != 0:
        results.insert(0, CheckResult("all", "ran", False, f"the reference training exited {status} (its output is above)"))
    print(f"regression: {identity}, {flavor} flavor on {device}, torch {environment.get('torch')} "
          f"(baseline: torch {baseline['recorded'].get('torch')}, {path.name})")
    for result in results:
        print(result.line())
    passed = all(result.passed for result in results)
    report_dir = pathlib.Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    seconds = round(time.monotonic() - started, 1)
    report = {"image": identity, "flavor": flavor, "device": device, "baseline": str(path.name), "seconds": seconds,
              "environment": environment, "baseline_recorded": baseline["recorded"], "passed": passed,
              "checks": [result.record() for result in results], "runs": runs}
    (report_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    loss_passed = {result.run: result.passed for result in results if result.check == "loss"}
    write_loss_plot(report_dir / "loss-curves.png",
                    [(runs.get(name, {}).get("losses", {}), expected["losses"], loss_passed.get(name, False))
                     for name, expected in baseline["runs"].items()])
    failed = [f"{result.run} {result.check}" for result in results if not result.passed]
    print(f"regression: {'PASSED' if passed else 'FAILED: ' + ', '.join(failed)} ({len(results)} checks, {seconds} s); "
          f"report {report_dir / 'report.json'}, curves {report_dir / 'loss-curves.png'}")
    return 0 if passed else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["check", "record"])
    parser.add_argument("image", nargs="?", default="", help="the image: name:tag or repository@sha256:...")
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None, help="default: what this host has")
    parser.add_argument("--baseline", default=None,
                        help="the baseline file (default: baselines/<flavor>-<device>.json)")
    parser.add_argument("--report-dir", default=".build/regression", help="where report.json and the PNG go")
    parser.add_argument("--engine", default="docker", help="the container engine's command: docker or podman")
    parser.add_argument("--host", action="store_true", help="train on this host with scripts/, no image")
    parser.add_argument("--flavor", choices=["cpu", "gpu"], default=None, help="--host: whose baseline to use")
    parser.add_argument("--python", default="python3", help="--host: the interpreter with torch")
    args = parser.parse_args(argv)
    args.engine = args.engine.split()
    args.report_dir = os.path.abspath(args.report_dir)
    args.container_name = f"pytorch-dev-regression-{os.getpid()}"
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        return check(args) if args.action == "check" else record(args)
    except (GateError, ResolveError) as error:
        return fail_line(str(error))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
