"""The CI examples (examples/github-actions, examples/gitlab-ci) run as their runners run them, reproduced
with docker commands, on the image under test in place of the pinned release.

    make test-image PYTEST_ARGS=tests/editor/test_ci_examples.py

GitHub Actions, job container: `docker create --entrypoint tail IMAGE -f /dev/null` with the workflow's
`options`, the checkout bind-mounted at /__w/<repo>/<repo> and owned by the runner's user (uid 1001 on
hosted runners), HOME=/github/home, CI=true; then every `run:` step as a file in /__w/_temp, run by
`docker exec` (as root, in the checkout) with `bash --noprofile --norc -eo pipefail`.
GitLab, Docker executor: the checkout cloned into a volume at /builds/<group>/<project> with umask 0000
(what the runner's helper does), then `docker run -i` with the image's entrypoint, GitLab's shell-detection
`sh -c` as the command, and the job script (before_script + script, after `set -eo pipefail`) on stdin.
Not reproduced: the runners themselves, `actions/checkout` (the files are copied), caches and services.
"""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import uuid

import yaml

from tests.editor.pip_in_containers import pip_trust_options
from tests.support import REPO_ROOT
from tests.support.containers import docker

GITHUB_WORKFLOW = REPO_ROOT / "examples" / "github-actions" / ".github" / "workflows" / "tests.yml"
GITLAB_PIPELINE = REPO_ROOT / "examples" / "gitlab-ci" / ".gitlab-ci.yml"
# The uid the checkout belongs to on GitHub's hosted runners (the `runner` user).
GITHUB_RUNNER_UID = 1001
JOB_TIMEOUT_S = 420
# GitLab's shell detection (gitlab-runner shells/bash.go), given to the image as its command.
GITLAB_DETECT_SHELL = ("if [ -x /usr/local/bin/bash ]; then exec /usr/local/bin/bash; "
                       "elif [ -x /usr/bin/bash ]; then exec /usr/bin/bash; "
                       "elif [ -x /bin/bash ]; then exec /bin/bash; "
                       "elif [ -x /bin/sh ]; then exec /bin/sh; else echo shell not found; exit 1; fi")
SERVICE_PROCESSES = "ps -eo comm= | grep -E '^(sshd|jupyter)' && exit 9 || true"


def owned_by(path: pathlib.Path, uid: int) -> None:
    if os.geteuid() == 0:
        for folder, _, files in os.walk(path):
            for name in [folder, *(os.path.join(folder, file) for file in files)]:
                os.chown(name, uid, uid)


def files_not_owned_by(path: pathlib.Path, uid: int) -> list[str]:
    return [os.path.join(folder, name) for folder, dirs, files in os.walk(path) for name in [*dirs, *files]
            if os.lstat(os.path.join(folder, name)).st_uid != uid]


def test_the_examples_pin_an_immutable_tag_or_a_digest():
    images = [yaml.safe_load(GITHUB_WORKFLOW.read_text())["jobs"]["test"]["container"]["image"],
              yaml.safe_load(GITLAB_PIPELINE.read_text())["test"]["image"]]
    for image in images:
        tag = image.rsplit(":", 1)[1]
        assert "@sha256:" in image or ("latest" not in tag and "-g" in tag), f"{image} is not pinned"


def test_github_job_container_runs_the_workflow_steps(image, team_repository, tmp_path):
    job = yaml.safe_load(GITHUB_WORKFLOW.read_text())["jobs"]["test"]
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
        assert job["defaults"]["run"]["shell"] == "bash", "the reproduction runs steps as `shell: bash` does"
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
