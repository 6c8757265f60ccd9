"""CI's two entry points install the same prerequisites: .ci/run (this CI's bare Debian machines) and the
GitHub workflow's job that runs the suites (GitHub's Ubuntu runner) each call .ci/install-prerequisites.sh
and install nothing else themselves, and that script calls every installer of .ci/. Under CI=true a
missing tool fails its tests, so a prerequisite only one of them installs is a CI that fails on the other.
"""
from __future__ import annotations

import re

import yaml

from tests.support import REPO_ROOT

CI = REPO_ROOT / ".ci"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "image.yml"
PREREQUISITES = ".ci/install-prerequisites.sh"
HELPERS = {"install-prerequisites.sh", "apt-install-without-services.sh", "next-debian-release.sh",
           "debian-base.sh"}  # not installers of their own


def called_prerequisites(script: str) -> set[str]:
    """The .ci/ scripts and `make ci-*` targets SCRIPT calls, comments left out."""
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    targets = {f"make {name}" for name in re.findall(r"\bmake (ci-[\w-]+)", code)}
    return set(re.findall(r"\.ci/[\w.-]+\.sh", code)) | targets


def workflow_suite_job_script() -> str:
    """Every `run` of the workflow's job that runs the suites on a GitHub-hosted runner, as one script."""
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    (job,) = [job for job in jobs.values()
              if any("make test FLAVOR=cpu" in step.get("run", "") for step in job["steps"])]
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_ci_run_and_the_workflow_install_the_same_prerequisites():
    ci_run, workflow = called_prerequisites((CI / "run").read_text()), called_prerequisites(workflow_suite_job_script())
    assert ci_run == workflow, (f"only .ci/run calls {sorted(ci_run - workflow)}, only {WORKFLOW.name} calls "
                                f"{sorted(workflow - ci_run)}: install it in {PREREQUISITES}, which both call")
    # Both call it through `make ci-prerequisites`, since every workflow step is a make target.
    assert ci_run == {"make ci-prerequisites"}, f"install prerequisites in {PREREQUISITES}, the one list both call"


def test_the_prerequisites_script_calls_every_installer_of_ci():
    called = set(re.findall(r'"\$HERE/([\w.-]+\.sh)"', (REPO_ROOT / PREREQUISITES).read_text()))
    installers = {path.name for path in CI.glob("*.sh")} - HELPERS
    assert installers <= called, f"{PREREQUISITES} does not call {sorted(installers - called)}"


def test_the_check_notices_a_prerequisite_only_one_side_installs():
    assert called_prerequisites(f"bash {PREREQUISITES}\nbash .ci/install-nginx.sh") != {PREREQUISITES}
    assert called_prerequisites("make ci-registry\n# bash .ci/install-slurm.sh") == {"make ci-registry"}
