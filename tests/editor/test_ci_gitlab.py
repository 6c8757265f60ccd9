"""examples/gitlab-ci runs as GitLab's Docker executor runs a job, reproduced with docker commands, on the
image under test in place of the pinned release.

    make test-image PYTEST_ARGS=tests/editor/test_ci_gitlab.py

Reproduced: the checkout cloned into a volume at /builds/<group>/<project> with umask 0000 (what the
runner's helper does), then `docker run -i` with the image's entrypoint, GitLab's shell-detection `sh -c`
as the command, and the job script (before_script + script, after `set -eo pipefail`) on stdin.
Not reproduced: the runner itself, its helper container (the files are copied), caches and services.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import uuid

import pytest
import yaml

from tests.editor.helpers.pip_in_containers import pip_trust_options
from tests.support import REPO_ROOT
from tests.support.containers import docker

pytestmark = pytest.mark.tier("full")

GITLAB_PIPELINE = REPO_ROOT / "examples" / "gitlab-ci" / ".gitlab-ci.yml"
JOB_TIMEOUT_S = 420
# GitLab's shell detection (gitlab-runner shells/bash.go), given to the image as its command.
GITLAB_DETECT_SHELL = ("if [ -x /usr/local/bin/bash ]; then exec /usr/local/bin/bash; "
                       "elif [ -x /usr/bin/bash ]; then exec /usr/bin/bash; "
                       "elif [ -x /bin/bash ]; then exec /bin/bash; "
                       "elif [ -x /bin/sh ]; then exec /bin/sh; else echo shell not found; exit 1; fi")
SERVICE_PROCESSES = "ps -eo comm= | grep -E '^(sshd|jupyter)' && exit 9 || true"


@pytest.mark.tier("landing")
def test_the_pipeline_pins_an_immutable_tag_or_a_digest():
    image = yaml.safe_load(GITLAB_PIPELINE.read_text())["test"]["image"]
    # The immutable tags of `make tags` end in -g<sha7>; a digest pins even more.
    assert "@sha256:" in image or re.search(r":[^/]+-g[0-9a-f]{7}$", image), f"{image} is not pinned"


def gitlab_job_script(job: dict, project_dir: str) -> str:
    """What the runner feeds the shell: strict mode, cd into the checkout, each line of the job."""
    lines = [*job.get("before_script", []), *job["script"], SERVICE_PROCESSES, "touch written-by-the-job"]
    return "\n".join(["set -eo pipefail", f"cd {shlex.quote(project_dir)}", *lines]) + "\n"


def test_gitlab_docker_executor_runs_the_job_through_the_entrypoint(image, team_repository):
    job = yaml.safe_load(GITLAB_PIPELINE.read_text())["test"]
    volume, project_dir = f"pt-gl-builds-{uuid.uuid4().hex[:8]}", "/builds/team/project"
    variables = [option for key, value in {**job.get("variables", {}), "CI": "true", "GITLAB_CI": "true"}.items()
                 for option in ("--env", f"{key}={value}")]
    try:
        docker("run", "--rm", "--user", "0", "--entrypoint", "sh", "--volume", f"{volume}:/builds",
               "--volume", f"{team_repository}:/source:ro", image, "-c",
               f"umask 0000 && mkdir -p {project_dir} && cp -R /source/. {project_dir}")
        job_run = subprocess.run(
            ["docker", "run", "--rm", "-i", "--volume", f"{volume}:/builds", *variables, *pip_trust_options(),
             image, "sh", "-c", GITLAB_DETECT_SHELL],
            input=gitlab_job_script(job, project_dir), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        assert job_run.returncode == 0, job_run.stdout[-3000:] + job_run.stderr[-3000:]
        assert "passed" in job_run.stdout and "started: ssh" not in job_run.stderr, job_run.stdout + job_run.stderr
        owner = docker("run", "--rm", "--entrypoint", "stat", "--volume", f"{volume}:/builds", image,
                       "-c", "%U", f"{project_dir}/written-by-the-job").stdout.strip()
        assert owner == "dev", "the job runs as the container user and can write in the checkout"
    finally:
        docker("volume", "rm", "--force", volume, check=False)
