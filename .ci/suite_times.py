"""Prints each suite's test time from pytest's JUnit XML files, as a Markdown table for BENCHMARKS.md.

    python3 .ci/suite_times.py .build/junit/*.xml

A suite is a folder of tests/ (tests/image, tests/runtimes, ...). Its time is the sum of its tests' times
(setup, call and teardown, fixtures included): with --dist=loadfile each file runs on one worker, so this
is the worker time the suite costs; the run's wall time is about the sum over suites divided by the workers.
"""
from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ElementTree


def suite_times(paths: list[str]) -> dict[str, tuple[int, float]]:
    """(pass name, suite) -> (tests, seconds), the pass being the XML file's name without .xml."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for path in paths:
        run = path.rsplit("/", 1)[-1].removesuffix(".xml")
        for case in ElementTree.parse(path).iter("testcase"):
            suite = "/".join(case.get("classname", "").split(".")[:2])
            totals[f"{run} {suite}"][0] += 1
            totals[f"{run} {suite}"][1] += float(case.get("time", 0))
    return {name: (int(count), seconds) for name, (count, seconds) in sorted(totals.items())}


def pass_wall_times(paths: list[str]) -> dict[str, float]:
    """Pass name -> its wall time: pytest's testsuite time, collection and every worker included."""
    return {path.rsplit("/", 1)[-1].removesuffix(".xml"):
            sum(float(suite.get("time", 0)) for suite in ElementTree.parse(path).iter("testsuite"))
            for path in paths}


def main(paths: list[str]) -> None:
    print("| pass | suite | tests | test time (s) |\n|---|---|---|---|")
    for name, (count, seconds) in suite_times(paths).items():
        run, suite = name.split(" ", 1)
        print(f"| {run} | {suite} | {count} | {seconds:.0f} |")
    for run, seconds in pass_wall_times(paths).items():
        print(f"\npass {run}: {seconds:.0f} s of wall time")


if __name__ == "__main__":
    main(sys.argv[1:])
