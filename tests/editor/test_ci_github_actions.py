"""examples/github-actions runs as a GitHub Actions job container runs it, reproduced with docker commands,
on the image under test in place of the pinned release.

    make test-image PYTEST_ARGS=tests/editor/test_ci_github_actions.py

Reproduced: `docker create --entrypoint tail IMAGE -f /dev/null` with the workflow's `options`, the checkout
bind-mounted at /__w/<repo>/<repo> and owned by the runner's user (uid 1001 on hosted runners),
HOME=/github/home, CI=true; then every `run:` step as a file in /__w/_temp, run by `docker exec` (as root,
in the checkout) with `bash --noprofile --norc -eo pipefail`, as `shell: bash` does.
Not reproduced: the runner itself, `actions/checkout` (the files are copied), caches and services.
"""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import uuid

import pytest
import yaml

from tests.editor.helpers.pip_in_containers import pip_trust_options
from tests.support import REPO_ROOT
from tests.support.containers import docker

pytestmark = pytest.mark.tier("landing")

GITHUB_WORKFLOW = REPO_ROOT / "examples" / "github-actions" / ".github" / "workflows" / "tests.yml"
# The uid the checkout belongs to on GitHub's hosted runners (the `runner` user).
GITHUB_RUNNER_UID = 1001
JOB_TIMEOUT_S = 420
SERVICE_PROCESSES = "ps -eo comm= | grep -E '^(sshd|jupyter)' && exit 9 || true"


def owned_by(path: pathlib.Path, uid: int) -> None:
    """Gives PATH to UID, as the runner's checkout is (only as root; otherwise this uid owns it already)."""
    if os.geteuid() == 0:
        for folder, _, files in os.walk(path):
            for name in [folder, *(os.path.join(folder, file) for file in files)]:
                os.chown(name, uid, uid)


def files_not_owned_by(path: pathlib.Path, uid: int) -> list[str]:
    return [os.path.join(folder, name) for folder, dirs, files in os.walk(path) for name in [*dirs, *files]
            if os.lstat(os.path.join(folder, name)).st_uid != uid]


def test_the_workflow_pins_an_immutable_tag_or_a_digest():
    image = yaml.safe_load(GITHUB_WORKFLOW.read_text())["jobs"]["test"]["container"]["image"]
    # The immutable tags of `make tags` end in -g<sha7>; a digest pins even more.
    assert "@sha256:" in image or re.search(r":[^/]+-g[0-9a-f]{7}$", image), f"{image} is not pinned"


def test_github_job_container_runs_the_workflow_steps(image, team_repository, tmp_path):
    workflow = yaml.safe_load(GITHUB_WORKFLOW.read_text())
    job = workflow["jobs"]["test"]
    runner_uid = GITHUB_RUNNER_UID if os.geteuid() == 0 else os.getuid()
    work, temp, home = tmp_path / "work", tmp_path / "work" / "_temp", tmp_path / "github-home"
    checkout_in_container = "/__w/team-repo/team-repo"
    temp.mkdir(parents=True)
    home.mkdir()
    for folder in (team_repository, work, home):
        owned_by(folder, runner_uid)
    name = f"pt-gh-{uuid.uuid4().hex[:8]}"
    docker("create", "--name", name, "--workdir", checkout_in_container,
           "--env", "HOME=/github/home", "--env", "CI=true", "--env", "GITHUB_ACTIONS=true",
           "--volume", f"{team_repository}:{checkout_in_container}", "--volume", f"{temp}:/__w/_temp",
           "--volume", f"{home}:/github/home", *shlex.split(job["container"].get("options", "")),
           *pip_trust_options(), "--entrypoint", "tail", image, "-f", "/dev/null")
    try:
        docker("start", name)
        env = {**job.get("env", {}), "GITHUB_WORKSPACE": checkout_in_container}
        env_options = [option for key, value in env.items() for option in ("--env", f"{key}={value}")]
        shell = (job.get("defaults") or workflow.get("defaults", {}))["run"]["shell"]
        assert shell == "bash", "the reproduction runs steps as `shell: bash` does"
        failed = None
        for number, step in enumerate(job["steps"]):
            if "run" not in step or (failed and step.get("if") != "always()"):
                continue
            (temp / f"step{number}.sh").write_text(step["run"])
            result = docker("exec", *env_options, name, "bash", "--noprofile", "--norc", "-eo", "pipefail",
                            f"/__w/_temp/step{number}.sh", timeout=JOB_TIMEOUT_S, check=False)
            failed = failed or (result.returncode and f"step {step.get('name')!r}: {result.stdout}{result.stderr}")
        assert not failed, failed
        probe = docker("exec", name, "bash", "-c", SERVICE_PROCESSES, check=False)
        assert probe.returncode == 0, f"SSH or JupyterLab runs in a job container: {probe.stdout}"
    finally:
        docker("rm", "--force", name, check=False)
    assert (team_repository / ".pytest_cache").is_dir(), "pytest wrote nothing into the checkout"
    assert not files_not_owned_by(team_repository, runner_uid), "the runner could not clean its checkout"
