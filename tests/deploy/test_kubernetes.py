"""deploy/kubernetes: the PyTorchJob (Kubeflow training-operator v1), the TrainJob (Kubeflow Trainer v2), the
checkpoint claim and the NetworkPolicy of platform-auth pods. No cluster runs here: core objects and every pod
template are validated against the Kubernetes schemas (kubernetes-validate), the custom resources against the
rules of the operators' own validation, and the commands in them must be, word for word, the command
compose.multinode.yaml runs. Every pod of every Kubernetes document under deploy/ meets the restricted profile.

    make test FLAVOR=cpu PYTEST_ARGS="tests/deploy/test_kubernetes.py"
"""
from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest
import yaml

from tests.deploy.helpers.pod_security import (KINDS_WITH_PODS, KINDS_WITHOUT_PODS, kubernetes_documents, pod_labels,
                                        pod_specs, restricted_violations, trainjob_node_pod)
from tests.support.runtime_rules import KUBERNETES_POD_USER, KUBERNETES_TMPFS
from tests.support import REPO_ROOT
from tests.support.compose import compose_config
from tests.deploy.helpers.multinode_compose import COMPOSE_FILE

pytestmark = pytest.mark.tier("landing")

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
DOCUMENTS = kubernetes_documents(REPO_ROOT / "deploy")
# Every pod under deploy/, by file and name; a document of a kind the walk does not know fails its own test.
PODS = {f"{path.relative_to(REPO_ROOT)}: {name}": pod for path, document in DOCUMENTS
        if document["kind"] in KINDS_WITH_PODS for name, pod in pod_specs(document).items()}
CORE_API_VERSIONS = {"v1", "apps/v1", "batch/v1", "networking.k8s.io/v1"}
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


# ---- every Kubernetes document under deploy/ ----

def test_the_walk_finds_every_manifest_and_the_pods_they_make():
    assert {path.name for path, _ in DOCUMENTS} >= {path.name for path in MANIFESTS.glob("*.yaml")}
    assert {name.split(": ")[1].split()[0] for name in PODS} >= {"Notebook", "PyTorchJob", "TrainJob"}


@pytest.mark.parametrize("path, document", DOCUMENTS, ids=[f"{p.name}:{d['kind']}" for p, d in DOCUMENTS])
def test_every_kubernetes_document_under_deploy_is_of_a_kind_the_walk_knows(path, document):
    assert document["kind"] in KINDS_WITH_PODS | KINDS_WITHOUT_PODS, (
        f"{path}: add {document['kind']} to tests/deploy/helpers/pod_security.py (pod_specs, or KINDS_WITHOUT_PODS)")


@pytest.mark.parametrize("path, document", [(p, d) for p, d in DOCUMENTS if d["apiVersion"] in CORE_API_VERSIONS],
                         ids=lambda value: getattr(value, "name", None) or value.get("kind"))
def test_every_core_object_under_deploy_is_valid(path, document):
    validate_core(document)


@pytest.mark.parametrize("name", PODS)
def test_every_pod_under_deploy_is_valid_and_meets_the_restricted_pod_security_standard(name):
    pod = PODS[name]
    validate_pod_template({"spec": pod})
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["fsGroup"], "the workspace or checkpoint volume must be the pod's group's"
    # tests/runtimes/test_kubernetes_restricted.py runs the image as this uid:gid.
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == KUBERNETES_POD_USER


@pytest.mark.parametrize("name", [name for name, pod in PODS.items()
                                  if pod["containers"][0].get("securityContext", {}).get("readOnlyRootFilesystem")])
def test_every_read_only_pod_has_the_folders_the_runtime_tests_give(name):
    """tests/runtimes starts the image with a tmpfs at each of KUBERNETES_TMPFS: the pods have those."""
    pod = PODS[name]
    (container,) = pod["containers"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in container["volumeMounts"]}
    assert all("emptyDir" in mounts.get(path, {}) for path in KUBERNETES_TMPFS), sorted(mounts)


def test_the_pytorchjob_and_trainjob_pods_have_a_read_only_root():
    read_only = {name for name, pod in PODS.items()
                 if pod["containers"][0]["securityContext"].get("readOnlyRootFilesystem")}
    assert {name.split(": ")[1].split()[0] for name in read_only} == {"PyTorchJob", "TrainJob"}


# ---- who may reach a pod that runs JupyterLab without a login of its own ----

def runs_platform_auth(document: dict) -> bool:
    return any({"name": "JUPYTER_AUTH", "value": "platform"} in container.get("env", [])
               for pod in pod_specs(document).values() for container in pod["containers"])


def selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "the check knows matchLabels only"
    return selector["matchLabels"].items() <= labels.items()


def check_admits_only_the_gateway_to_jupyter(policy: dict) -> None:
    """Raises AssertionError unless POLICY refuses every ingress but the gateway's pods to port 8888."""
    spec = policy["spec"]
    assert "Ingress" in spec["policyTypes"], "without Ingress in policyTypes nothing is refused"
    for rule in spec["ingress"]:
        assert rule.get("ports") == [{"protocol": "TCP", "port": 8888}], rule
        assert rule.get("from"), "a rule without `from` admits every pod and address"
        for peer in rule["from"]:
            # Both selectors in one peer: the gateway's pods in the gateway's namespace, not either one.
            assert set(peer) == {"namespaceSelector", "podSelector"}, peer
            assert peer["namespaceSelector"]["matchLabels"] and peer["podSelector"]["matchLabels"], peer


def test_every_platform_auth_pod_is_reachable_only_from_the_gateway():
    policies = [document for _, document in DOCUMENTS if document["kind"] == "NetworkPolicy"]
    platform_auth = [document for _, document in DOCUMENTS
                     if document["kind"] in KINDS_WITH_PODS and runs_platform_auth(document)]
    assert platform_auth, "notebook.yaml runs JUPYTER_AUTH=platform: the walk must find it"
    for document in platform_auth:
        selecting = [policy for policy in policies if selects(policy["spec"]["podSelector"], pod_labels(document))]
        assert selecting, f"{document['kind']} {document['metadata']['name']}: no NetworkPolicy selects its pods"
        for policy in selecting:
            check_admits_only_the_gateway_to_jupyter(policy)


POLICY_BREAKAGES = {
    "no Ingress type": lambda spec: spec.update(policyTypes=["Egress"]),
    "from anyone": lambda spec: spec["ingress"][0].pop("from"),
    "any pod of the namespace": lambda spec: spec["ingress"][0]["from"][0].pop("podSelector"),
    "every port": lambda spec: spec["ingress"][0].pop("ports"),
    "an address block": lambda spec: spec["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}),
}


@pytest.mark.parametrize("breakage", POLICY_BREAKAGES)
def test_the_gateway_check_refuses_a_policy_that_admits_more(breakage):
    policy = copy.deepcopy(load("networkpolicy-platform-auth.yaml"))
    POLICY_BREAKAGES[breakage](policy["spec"])
    with pytest.raises(AssertionError):
        check_admits_only_the_gateway_to_jupyter(policy)


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
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]  # the runtime's replicated job and container
    pod = trainjob_node_pod(trainjob)
    validate_pod_template({"spec": pod})
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in pod["containers"][0]["volumeMounts"]}
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
