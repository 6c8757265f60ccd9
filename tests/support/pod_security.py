"""The "restricted" Pod Security Standard, rule by rule, as a function of a pod spec: the controls of the
Baseline and Restricted profiles on kubernetes.io/docs/concepts/security/pod-security-standards that a
manifest can break. No maintained checker installs here without a cluster (kube-apiserver's admission
runs the same controls), so each control is written down below.
"""
from __future__ import annotations

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
