"""deploy/kubernetes: the PyTorchJob (Kubeflow training-operator v1), the TrainJob (Kubeflow Trainer v2) and
the checkpoint claim. No cluster runs here: core objects and every pod template are validated against the
Kubernetes schemas (kubernetes-validate), the custom resources against the rules of the operators' own
validation, and the commands in them must be, word for word, the command compose.multinode.yaml runs.

    make test FLAVOR=cpu PYTEST_ARGS="tests/deploy/test_kubernetes.py"
"""
from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest
import yaml

from tests.support.pod_security import restricted_violations
from tests.support.runtime_rules import KUBERNETES_TMPFS
from tests.support import REPO_ROOT
from tests.support.compose import compose_config
from tests.support.multinode_compose import COMPOSE_FILE

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"  # the oldest release a current training-operator or Trainer supports


def load(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text())


def validate_core(obj: dict) -> None:
    """Raises kubernetes_validate's ValidationError when OBJ breaks the Kubernetes schema (unknown fields too)."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def validate_pod_template(template: dict) -> None:
    """A PodTemplateSpec is checked as the template of a core PodTemplate object, which has exactly that type."""
    validate_core({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template})


def compose_command(**env: str) -> list[str]:
    """node0's command in compose.multinode.yaml with these variables, as compose resolves and splits it."""
    return compose_config([COMPOSE_FILE], env=env)["services"]["node0"]["command"]


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of command and args, with the variables the operator puts in the pod."""
    return [re.sub(r"\$\(([A-Z_]+)\)", lambda match: env[match[1]], word) for word in words]


# ---- the checkpoint claim ----

def test_the_checkpoint_claim_is_a_valid_read_write_many_claim():
    claim = load("checkpoints-pvc.yaml")
    validate_core(claim)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # pods on several machines mount it at once


# ---- PyTorchJob (training-operator v1) ----

@pytest.fixture(scope="module")
def pytorchjob() -> dict:
    return load("pytorchjob.yaml")


def test_the_pytorchjob_passes_the_operators_validation(pytorchjob):
    # The rules of training-operator's admission webhook (pkg/webhooks/pytorch/pytorchjob_webhook.go).
    assert (pytorchjob["apiVersion"], pytorchjob["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", pytorchjob["metadata"]["name"])  # DNS-1035
    replicas = pytorchjob["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    assert replicas["Master"]["replicas"] == 1
    for spec in replicas.values():
        containers = spec["template"]["spec"]["containers"]
        assert any(container["name"] == "pytorch" for container in containers)
        assert all(container.get("image") for container in containers)
    elastic = pytorchjob["spec"]["elasticPolicy"]
    assert "nProcPerNode" not in elastic, "deprecated: the operator wants spec.nprocPerNode"
    assert elastic["rdzvBackend"] == "c10d"
    assert 1 <= elastic["minReplicas"] <= elastic["maxReplicas"] == sum(s["replicas"] for s in replicas.values())
    assert elastic["maxRestarts"] >= 1
    assert elastic["rdzvHost"] == f"{pytorchjob['metadata']['name']}-master-0"  # the Master pod's service


def test_the_pytorchjob_pods_are_valid_and_have_gpus_shared_memory_and_the_checkpoint_claim(pytorchjob):
    claim_name = load("checkpoints-pvc.yaml")["metadata"]["name"]
    for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values():
        template = spec["template"]
        validate_pod_template(template)
        pod = template["spec"]
        container = next(container for container in pod["containers"] if container["name"] == "pytorch")
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        assert volumes[mounts["/workspace"]]["persistentVolumeClaim"]["claimName"] == claim_name
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == int(pytorchjob["spec"]["nprocPerNode"])
        assert "command" not in container, "command would replace the image's entrypoint; use args"


def test_the_pytorchjob_pods_meet_the_restricted_pod_security_standard(pytorchjob):
    for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        assert restricted_violations(pod) == []
        assert pod["securityContext"]["fsGroup"], "the checkpoint volume must be the pod's group's"


def test_the_pytorchjob_pods_have_a_read_only_root_with_the_folders_the_runtime_tests_give(pytorchjob):
    """tests/runtimes starts the image with a tmpfs at each of KUBERNETES_TMPFS: the pods have those."""
    for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in container["volumeMounts"]}
        assert all("emptyDir" in mounts.get(path, {}) for path in KUBERNETES_TMPFS), sorted(mounts)


# One pod that breaks each control, made from the PyTorchJob's: the checker must name each (a hostPath
# breaks two: Baseline's host path rule and Restricted's volume types).
BROKEN_PODS = {
    "root": lambda pod, container: pod["securityContext"].update(runAsNonRoot=False),
    "uid 0": lambda pod, container: container["securityContext"].update(runAsUser=0),
    "escalation": lambda pod, container: container["securityContext"].update(allowPrivilegeEscalation=True),
    "capabilities kept": lambda pod, container: container["securityContext"]["capabilities"].update(drop=[]),
    "capability added": lambda pod, container: container["securityContext"]["capabilities"].update(add=["IPC_LOCK"]),
    "seccomp": lambda pod, container: pod["securityContext"].update(seccompProfile={"type": "Unconfined"}),
    "privileged": lambda pod, container: container["securityContext"].update(privileged=True),
    "host network": lambda pod, container: pod.update(hostNetwork=True),
    "host path": lambda pod, container: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "host port": lambda pod, container: container["ports"].append({"containerPort": 1, "hostPort": 1}),
}


@pytest.mark.parametrize("breakage", BROKEN_PODS)
def test_the_restricted_check_names_a_pod_that_breaks_one_control(pytorchjob, breakage):
    pod = copy.deepcopy(pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"])
    BROKEN_PODS[breakage](pod, pod["containers"][0])
    assert restricted_violations(pod), f"{breakage} went unnoticed"


def operator_environment(job: dict) -> dict[str, str]:
    """The PET_* variables training-operator v1 sets from elasticPolicy (pkg/controller.v1/pytorch/elastic.go)."""
    elastic = job["spec"]["elasticPolicy"]
    return {
        "PET_RDZV_ENDPOINT": f"{elastic['rdzvHost']}:{elastic['rdzvPort']}",
        "PET_RDZV_BACKEND": elastic["rdzvBackend"],
        "PET_NNODES": f"{elastic['minReplicas']}:{elastic['maxReplicas']}",
        "PET_MAX_RESTARTS": str(elastic["maxRestarts"]),
        "PET_NPROC_PER_NODE": str(job["spec"]["nprocPerNode"]),
        "PET_RDZV_ID": elastic["rdzvId"],
    }


def test_the_pytorchjob_runs_the_command_the_multinode_tests_run(pytorchjob):
    env = operator_environment(pytorchjob)
    for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values():
        container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "pytorch")
        pod_command = expand(container["args"], env)
        host, port = env["PET_RDZV_ENDPOINT"].split(":")
        assert pod_command == compose_command(
            NNODES=env["PET_NNODES"], NPROC_PER_NODE=env["PET_NPROC_PER_NODE"], RDZV_HOST=host, RDZV_PORT=port,
            RDZV_ID=env["PET_RDZV_ID"], MAX_RESTARTS=env["PET_MAX_RESTARTS"], TRAIN_ARGS="--max-steps=1000")
        env_names = {variable["name"]: variable["value"] for variable in container["env"]}
        assert env_names["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


# ---- TrainJob (Kubeflow Trainer v2) ----

@pytest.fixture(scope="module")
def trainjob() -> dict:
    return load("trainjob.yaml")


def test_the_trainjob_names_the_torch_runtime_and_sizes_its_nodes(trainjob):
    # The required fields of trainer.kubeflow.org/v1alpha1 TrainJob (pkg/apis/trainer/v1alpha1).
    assert (trainjob["apiVersion"], trainjob["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = trainjob["spec"]["trainer"]
    assert set(trainer) <= {"image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"}
    assert trainer["numNodes"] >= 2 and trainer["image"]
    assert int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) == int(trainer["numProcPerNode"])
    assert trainer["command"] == ["/usr/bin/tini", "-g", "--", "/usr/local/bin/entrypoint.sh"]


def test_the_trainjob_node_pod_is_valid_with_shared_memory_and_the_checkpoint_claim(trainjob):
    trainer = trainjob["spec"]["trainer"]
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]  # the runtime's replicated job and container
    (container_override,) = override["spec"]["containers"]
    # The pod the runtime makes from it: its container "node" with our trainer fields and mounts.
    container = {"name": container_override["name"], "image": trainer["image"], "command": trainer["command"],
                 "args": trainer["args"], "env": trainer["env"], "resources": trainer["resourcesPerNode"],
                 "volumeMounts": container_override["volumeMounts"]}
    validate_pod_template({"spec": {"containers": [container], "volumes": override["spec"]["volumes"]}})
    volumes = {volume["name"]: volume for volume in override["spec"]["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert volumes[mounts["/workspace"]]["persistentVolumeClaim"]["claimName"] == \
        load("checkpoints-pvc.yaml")["metadata"]["name"]


def test_the_trainjob_runs_the_command_the_multinode_tests_run(trainjob):
    trainer = trainjob["spec"]["trainer"]
    name = trainjob["metadata"]["name"]
    # What the torch plugin sets: node 0 of the JobSet is the master, on port 29400.
    env = {"PET_NNODES": str(trainer["numNodes"]), "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
           "PET_MASTER_ADDR": f"{name}-node-0-0.{name}", "PET_MASTER_PORT": "29400"}
    assert expand(trainer["args"], env) == compose_command(
        NNODES=env["PET_NNODES"], NPROC_PER_NODE=env["PET_NPROC_PER_NODE"], RDZV_HOST=env["PET_MASTER_ADDR"],
        RDZV_PORT="29400", RDZV_ID=name, MAX_RESTARTS="3", TRAIN_ARGS="--max-steps=1000")
