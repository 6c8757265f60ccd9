"""The checks of the regression gate: pure functions from a run's metrics and its baseline to results.

A result is one line a person reads in a CI log and one record of the JSON report. Each run gets three
checks: its losses match the baseline's at every reported step within a relative tolerance, its loss
fell (it learns at all), and its throughput stays above a floor relative to the baseline's.
"""
from __future__ import annotations

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
    deviations = {step: abs(measured[step] - baseline[step]) / abs(baseline[step]) for step in baseline}
    worst = max(deviations, key=deviations.get)
    passed = deviations[worst] <= rtol
    return CheckResult(run, "loss", passed,
                       f"largest relative deviation {deviations[worst]:.2e} at step {worst} "
                       f"(loss {measured[worst]:.6f}, baseline {baseline[worst]:.6f}; tolerance {rtol:.0e})")


def check_learns(run: str, measured: dict[str, float]) -> CheckResult:
    first, last = next(iter(measured.values())), list(measured.values())[-1]
    return CheckResult(run, "learns", last < first, f"loss {first:.4f} at the first report, {last:.4f} at the last")


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
        results.append(check_learns(name, measured["losses"]))
        results.append(check_throughput(name, measured["samples_per_sec"], expected["samples_per_sec"],
                                        baseline["throughput_floor"]))
    return results
