"""The "restricted" Pod Security Standard, rule by rule, as a function of a pod spec: the controls of the
Baseline and Restricted profiles on kubernetes.io/docs/concepts/security/pod-security-standards that a
manifest can break. No maintained checker installs here without a cluster (kube-apiserver's admission
runs the same controls), so each control is written down below.
"""
from __future__ import annotations

import copy
import pathlib

import yaml

# Restricted, "Volume Types": only these volume sources.
ALLOWED_VOLUME_SOURCES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                          "projected", "secret"}
# Restricted, "Capabilities": every capability dropped; NET_BIND_SERVICE is the only one that may be added.
ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}
ALLOWED_SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}


def containers_of(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod.get("containers", []), *pod.get("ephemeralContainers", [])]


def baseline_violations(pod: dict) -> list[str]:
    found = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"{field} shares the host's namespace")
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"volume {volume['name']} is a hostPath")
    for container in containers_of(pod):
        context = container.get("securityContext", {})
        name = container["name"]
        if context.get("privileged"):
            found.append(f"{name} is privileged")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name} asks for a host port")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name} unmasks /proc")
    return found


def effective(pod: dict, container: dict, field: str):
    """A security field as it applies to CONTAINER: its own setting, else the pod's."""
    own = container.get("securityContext", {})
    return own[field] if field in own else pod.get("securityContext", {}).get(field)


def restricted_violations(pod: dict) -> list[str]:
    """Every control of the Restricted profile (Baseline's included) that POD breaks, one line each."""
    found = baseline_violations(pod)
    for volume in pod.get("volumes", []):
        sources = set(volume) - {"name"}
        if not sources <= ALLOWED_VOLUME_SOURCES:
            found.append(f"volume {volume['name']} is of a type restricted forbids: {sorted(sources)}")
    for container in containers_of(pod):
        name = container["name"]
        context = container.get("securityContext", {})
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name} must set allowPrivilegeEscalation: false")
        if effective(pod, container, "runAsNonRoot") is not True:
            found.append(f"{name} must run with runAsNonRoot: true (pod or container)")
        if effective(pod, container, "runAsUser") == 0:
            found.append(f"{name} runs as uid 0")
        seccomp = effective(pod, container, "seccompProfile") or {}
        if seccomp.get("type") not in ALLOWED_SECCOMP_TYPES:
            found.append(f"{name} must use seccompProfile RuntimeDefault or Localhost (pod or container)")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name} must drop ALL capabilities")
        if not set(capabilities.get("add", [])) <= ADDABLE_CAPABILITIES:
            found.append(f"{name} adds capabilities restricted forbids: {capabilities['add']}")
    return found


# ---- every pod a document of deploy/ makes -----------------------------------------------------------
# Where each kind keeps the pod specs it makes; a kind that makes none is listed with no path. A document of
# another kind fails the walk, so a new manifest is checked the day it is added, not when someone remembers.
WORKLOAD_TEMPLATE = ("spec", "template", "spec")
KINDS_WITHOUT_PODS = {"PersistentVolumeClaim", "NetworkPolicy", "PodMonitor", "Service", "ConfigMap", "Secret",
                      "ClusterPolicy"}  # Kyverno's admission policy (verify-image-policy.yaml)
KINDS_WITH_PODS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Notebook",
                   "PyTorchJob", "TrainJob"}


def kubernetes_documents(folder: pathlib.Path) -> list[tuple[pathlib.Path, dict]]:
    """Every YAML document under FOLDER that is a Kubernetes object (a string apiVersion and a kind), with
    its file; compose files, Prometheus and Grafana provisioning (apiVersion 1) are not."""
    found = []
    for path in sorted([*folder.rglob("*.yaml"), *folder.rglob("*.yml")]):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and isinstance(document.get("apiVersion"), str) and "kind" in document:
                found.append((path, document))
    return found


def trainjob_node_pod(trainjob: dict) -> dict:
    """The pod Kubeflow Trainer makes for the TrainJob's nodes, as far as the TrainJob decides it: the
    overrides of the job "node" (pod fields, the container's security context and mounts) and the trainer's
    image, command, args, env and resources. The rest is the ClusterTrainingRuntime's."""
    trainer = trainjob["spec"]["trainer"]
    (override,) = [entry for entry in trainjob["spec"].get("podTemplateOverrides", [])
                   if {"name": "node"} in entry["targetJobs"]] or [{"spec": {}}]
    spec = copy.deepcopy(override["spec"])
    (container,) = [entry for entry in spec.pop("containers", []) if entry["name"] == "node"] or [{"name": "node"}]
    container.update(image=trainer["image"], command=trainer["command"], args=trainer["args"], env=trainer["env"],
                     resources=trainer["resourcesPerNode"])
    return {**spec, "containers": [container]}


def pod_labels(document: dict) -> dict[str, str]:
    """The labels DOCUMENT's pods carry (the notebook controller gives a Notebook's own labels to its pod)."""
    if document["kind"] == "Notebook":
        return document["metadata"].get("labels", {})
    return document["spec"].get("template", {}).get("metadata", {}).get("labels", {})


def pod_specs(document: dict) -> dict[str, dict]:
    """Every pod spec DOCUMENT makes, by a name that says which; ValueError for a kind not known here."""
    kind, name = document["kind"], document["metadata"]["name"]
    if kind in KINDS_WITHOUT_PODS:
        return {}
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Notebook"}:
        return {f"{kind} {name}": document["spec"]["template"]["spec"]}
    if kind == "Pod":
        return {f"Pod {name}": document["spec"]}
    if kind == "CronJob":
        return {f"CronJob {name}": document["spec"]["jobTemplate"]["spec"]["template"]["spec"]}
    if kind == "PyTorchJob":
        return {f"PyTorchJob {name} {replica}": spec["template"]["spec"]
                for replica, spec in document["spec"]["pytorchReplicaSpecs"].items()}
    if kind == "TrainJob":
        return {f"TrainJob {name} node": trainjob_node_pod(document)}
    raise ValueError(f"{kind} {name}: tests/deploy/helpers/pod_security.py does not know where a {kind} keeps its pods;"
                     " add it to pod_specs (or to KINDS_WITHOUT_PODS)")
