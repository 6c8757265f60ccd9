"""Every `run` step of the GitHub workflows we ship runs in `bash -eo pipefail`, which GitHub gives only
when a shell is named: its default (`bash -e`) ends `submit ... | tee -a "$GITHUB_STEP_SUMMARY"` green
after the submission failed. Each job names the shell itself or inherits the workflow's `defaults`.
"""
from __future__ import annotations

import pytest
import yaml

from tests.support import REPO_ROOT

WORKFLOWS = sorted(path.relative_to(REPO_ROOT).as_posix()
                   for path in [*REPO_ROOT.glob(".github/workflows/*.yml"),
                                *REPO_ROOT.glob("examples/*/.github/workflows/*.yml")])


def named_shell(node: dict) -> str | None:
    return (node.get("defaults") or {}).get("run", {}).get("shell")


def test_the_workflows_are_found():
    assert {".github/workflows/image.yml", "examples/github-actions/.github/workflows/new-image.yml"} <= set(WORKFLOWS)


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_every_run_step_names_bash_so_a_failing_pipe_fails_the_step(workflow):
    document = yaml.safe_load((REPO_ROOT / workflow).read_text())
    unnamed = [f"{name}: {step.get('name', step['run'].splitlines()[0])}"
               for name, job in document["jobs"].items()
               for step in job.get("steps", []) if "run" in step
               and not (step.get("shell") or named_shell(job) or named_shell(document))]
    assert not unnamed, f"{workflow}: steps in GitHub's default bash -e, without pipefail: {unnamed}"
