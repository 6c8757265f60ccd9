"""Helpers of tests/pipeline: the gate and the pipeline's steps run as the example workflows run them,
and a drifted image built from the image under test.
"""
from __future__ import annotations

import os
import pathlib
import subprocess

from tests.support import REPO_ROOT
from tests.support.containers import docker
from tests.support.release import environment_without_make

GATE_TIMEOUT_S = 2400
# A changed default learning rate, as a careless edit of the trainer would ship it: the drifted image
# trains differently with the very same flags.
# The image under test with the trainer's default learning rate changed: the reference runs give only their
# own flags, so they train at it.
OTHER_LR_DOCKERFILE = """\
FROM {image}
USER root
RUN sed -i 's/"--lr", type=positive_float, default=1e-3/"--lr", type=positive_float, default={lr}/' \\
      /opt/scripts/trainer/config.py \\
 && grep -q 'default={lr}' /opt/scripts/trainer/config.py
"""


def run_tool(*command: str, timeout: float = GATE_TIMEOUT_S, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A command of the pipeline in the repository root, as a CI job runs it; never raises on failure."""
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**environment_without_make(), **(env or {})})


def own_error_lines(stderr: str) -> list[str]:
    """The lines a tool wrote to stderr, less make's own `make: *** [...] Error N` after a failed recipe."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("make: ***")]


def make_regression(image: str, *variables: str) -> subprocess.CompletedProcess:
    return run_tool("make", "-s", "--no-print-directory", "regression", f"IMAGE={image}", *variables)


def build_drifted_image(image: str, context: pathlib.Path, lr: str = "2e-3") -> str:
    """Builds the image under test with the trainer's default learning rate changed to LR; returns its tag."""
    tag = f"pytorch-dev-drifted:{os.getpid()}-{lr}"
    (context / "Dockerfile").write_text(OTHER_LR_DOCKERFILE.format(image=image, lr=lr))
    docker("build", "--quiet", "--tag", tag, str(context), timeout=600)
    return tag


def push(image: str, reference: str) -> str:
    """Tags IMAGE as REFERENCE, pushes it, untags it here; returns REFERENCE's repository@digest."""
    docker("tag", image, reference)
    docker("push", reference, timeout=900)
    digest = docker("image", "inspect", "--format", "{{range .RepoDigests}}{{.}} {{end}}", reference).stdout.split()
    docker("image", "rm", reference)
    repository = reference.rsplit(":", 1)[0]
    return next(entry for entry in digest if entry.startswith(repository + "@"))
