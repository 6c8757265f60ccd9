"""Kubernetes: the PodMonitor and the scrape annotations reach the trainer on every pod of the
PyTorchJob, on a port the pod declares. No cluster runs here: the pod template is validated against the
Kubernetes schema (kubernetes-validate), the PodMonitor against what the Prometheus Operator reads.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_kubernetes_monitoring.py
"""
from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"


def load(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text())


def trainer_pods(job: dict) -> list[dict]:
    return [spec["template"] for spec in job["spec"]["pytorchReplicaSpecs"].values()]


def test_the_podmonitor_selects_every_pod_of_the_job_on_a_declared_port():
    job, monitor = load("pytorchjob.yaml"), load("podmonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    # training-operator labels every pod of a job, Master and Worker alike, with the job's name.
    assert monitor["spec"]["selector"]["matchLabels"] == {"training.kubeflow.org/job-name": job["metadata"]["name"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    for pod in trainer_pods(job):
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "pytorch")
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports[endpoint["port"]] == 9401


def test_the_annotations_name_the_same_port_and_the_pod_template_stays_valid():
    for pod in trainer_pods(load("pytorchjob.yaml")):
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9401"
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
                                      "template": pod}, KUBERNETES_VERSION, strict=True)
