"""The checks of the regression gate: pure functions from a run's metrics and its baseline to results.

A result is one line a person reads in a CI log and one record of the JSON report. Each run gets three
checks: its losses match the baseline's at every reported step within a relative tolerance, its loss
fell by at least half as much as the baseline's did (it learns: on a GPU, where the loss tolerance is
wide, a run that learns nothing can stay within it), and its throughput stays above a floor relative to
the baseline's.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple


class CheckResult(NamedTuple):
    run: str
    check: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.run} {self.check}: {self.detail}"

    def record(self) -> dict[str, Any]:
        return self._asdict()


def baseline_problem(baseline: Any) -> str | None:
    """What makes BASELINE (a parsed baseline file) unusable, in words, or None when the checks can read it."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not isinstance(baseline, dict):
        return "it is not a JSON object"
    for key in ("loss_rtol", "throughput_floor"):
        if not number(baseline.get(key)):
            return f"{key} is not a number"
    if not isinstance(baseline.get("recorded"), dict):
        return "it has no recorded object"
    runs = baseline.get("runs")
    if not isinstance(runs, dict) or not runs:
        return "it has no runs"
    for name, run in runs.items():
        if not isinstance(run, dict) or not isinstance(run.get("losses"), dict) or not run["losses"]:
            return f"run {name} has no losses"
        if not all(number(loss) and loss != 0 for loss in run["losses"].values()):
            return f"run {name} has a loss that is not a finite number other than 0"
        if not number(run.get("samples_per_sec")):
            return f"run {name} has no samples_per_sec"
        if loss_fall(run["losses"]) <= 0:
            return f"run {name}'s loss does not fall, so it cannot tell a run that learns from one that does not"
    return None


def summarize(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """What a baseline keeps of one run's metrics records: the loss at each reported step, and the mean
    throughput over the reports after the first (whose window holds start-up and compilation)."""
    losses = {str(record["step"]): record["loss"] for record in metrics}
    steady = metrics[1:] or metrics
    throughput = sum(record["samples_per_sec"] for record in steady) / len(steady) if steady else 0.0
    return {"losses": losses, "samples_per_sec": throughput}


def check_losses(run: str, measured: dict[str, float], baseline: dict[str, float], rtol: float) -> CheckResult:
    if list(measured) != list(baseline):
        return CheckResult(run, "loss", False, f"reported steps {list(measured)}, the baseline has {list(baseline)}; "
                                               "the reference run changed: record a new baseline (make baseline)")
    # A NaN compares false with everything, so it would never be the largest deviation: a loss that is not
    # a finite number fails on its own, at the first step that has one.
    broken = next((step for step in baseline if not math.isfinite(measured[step])), None)
    if broken is not None:
        return CheckResult(run, "loss", False, f"loss {measured[broken]} at step {broken}: training diverged")
    deviations = {step: abs(measured[step] - baseline[step]) / abs(baseline[step]) for step in baseline}
    worst = max(deviations, key=deviations.get)
    passed = deviations[worst] <= rtol
    return CheckResult(run, "loss", passed,
                       f"largest relative deviation {deviations[worst]:.2e} at step {worst} "
                       f"(loss {measured[worst]:.6f}, baseline {baseline[worst]:.6f}; tolerance {rtol:.0e})")


# How much of the baseline's fall in loss a run must match to count as learning.
LEARNS_SHARE = 0.5


def loss_fall(losses: dict[str, float]) -> float:
    """The loss at the first report less the loss at the last."""
    values = list(losses.values())
    return values[0] - values[-1]


def check_learns(run: str, measured: dict[str, float], baseline: dict[str, float]) -> CheckResult:
    fall, needed = loss_fall(measured), LEARNS_SHARE * loss_fall(baseline)
    first, last = next(iter(measured.values())), list(measured.values())[-1]
    return CheckResult(run, "learns", math.isfinite(fall) and fall >= needed,
                       f"loss fell {fall:.4f} (from {first:.4f} at the first report to {last:.4f} at the last), "
                       f"at least {needed:.4f} needed: {LEARNS_SHARE:g} of the baseline's fall")


def check_throughput(run: str, measured: float, baseline: float, floor: float) -> CheckResult:
    minimum = floor * baseline
    return CheckResult(run, "throughput", measured >= minimum,
                       f"{measured:.1f} samples/s, floor {floor:g} x baseline {baseline:.1f} = {minimum:.1f}")


def compare(runs: dict[str, dict[str, Any]], baseline: dict[str, Any]) -> list[CheckResult]:
    """Every check of every run of BASELINE against RUNS (run name -> summarize() of its metrics)."""
    results = []
    for name, expected in baseline["runs"].items():
        if name not in runs:
            results.append(CheckResult(name, "ran", False, "the run reported no metrics"))
            continue
        measured = runs[name]
        results.append(check_losses(name, measured["losses"], expected["losses"], baseline["loss_rtol"]))
        results.append(check_learns(name, measured["losses"], expected["losses"]))
        results.append(check_throughput(name, measured["samples_per_sec"], expected["samples_per_sec"],
                                        baseline["throughput_floor"]))
    return results
