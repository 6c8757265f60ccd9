"""deploy/kubernetes rendered with the digest the gate passed (tools/deploy/render_image.py): every pod
template of the rendered PyTorchJob and TrainJob still passes the Kubernetes schema, and every image in
it is the digest reference, never the repository's moving tag.

    make test FLAVOR=cpu PYTEST_ARGS="tests/pipeline/test_rendered_manifests.py"
"""
from __future__ import annotations

import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

RENDER = REPO_ROOT / "tools" / "deploy" / "render_image.py"
DIGEST = "registry.example.com/team/pytorch-dev@sha256:" + "0123456789abcdef" * 4
KUBERNETES_VERSION = "1.30.0"


def rendered(manifest: str, reference: str = DIGEST) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RENDER), str(REPO_ROOT / "deploy" / "kubernetes" / manifest), reference],
                          capture_output=True, text=True, timeout=30, check=False)


def pod_templates(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return [spec["template"] for spec in job["spec"]["pytorchReplicaSpecs"].values()]
    trainer = job["spec"]["trainer"]  # a TrainJob names its image once, in spec.trainer
    return [{"spec": {"containers": [{"name": "node", "image": trainer["image"]}]}}]


@pytest.mark.parametrize("manifest", ["pytorchjob.yaml", "trainjob.yaml"])
def test_the_rendered_job_is_valid_and_runs_only_the_digest(manifest):
    result = rendered(manifest)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    templates = pod_templates(job)
    for template in templates:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
                                      "template": template}, KUBERNETES_VERSION, strict=True)
    assert {container["image"] for template in templates for container in template["spec"]["containers"]} == {DIGEST}
    assert ":gpu-latest" not in result.stdout.replace("was pytorch-dev:gpu-latest", "")


def test_a_tag_is_refused_in_one_line():
    result = rendered("pytorchjob.yaml", "registry.example.com/team/pytorch-dev:gpu-latest")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "is not a digest reference" in result.stderr
