"""The Kubernetes manifests give torch.compile's work a home that outlives the pod: the notebook keeps its
compile caches on its workspace claim, and the training jobs keep their checkpoints (and so, with
--compile, their compiled code: trainer/compiled_code.py) on the shared checkpoint claim.

    make test-unit PYTEST_ARGS=tests/unit/test_deploy_compile_cache.py
"""
from __future__ import annotations

import pathlib
from collections.abc import Iterator

import yaml

from tests.support import REPO_ROOT

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"


def pod_specs(document: object) -> Iterator[dict]:
    """Every dict in DOCUMENT that has both containers and volumes: a pod spec, wherever it is nested."""
    if isinstance(document, dict):
        if "containers" in document and "volumes" in document:
            yield document
        for value in document.values():
            yield from pod_specs(value)
    elif isinstance(document, list):
        for value in document:
            yield from pod_specs(value)


def claim_backed(spec: dict, container: dict, path: str) -> bool:
    """Whether PATH in CONTAINER lies on a volume backed by a PersistentVolumeClaim."""
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = sorted(container.get("volumeMounts", []), key=lambda mount: len(mount["mountPath"]), reverse=True)
    for mount in mounts:
        if pathlib.PurePosixPath(path).is_relative_to(mount["mountPath"]):
            return "persistentVolumeClaim" in volumes[mount["name"]]
    return False


def pods(manifest: str) -> list[tuple[dict, dict]]:
    """(pod spec, its first container) for every pod MANIFEST describes."""
    return [(spec, spec["containers"][0]) for document in yaml.safe_load_all((KUBERNETES / manifest).read_text())
            for spec in pod_specs(document)]


def ckpt_dir(args: list[str]) -> str:
    (folder,) = [arg.split("=", 1)[1] for arg in args if arg.startswith("--ckpt-dir=")]
    return folder


def test_the_notebook_keeps_its_compile_caches_on_its_workspace_claim():
    ((spec, container),) = pods("notebook.yaml")
    env = {variable["name"]: variable.get("value") for variable in container.get("env", [])}
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert variable in env and claim_backed(spec, container, env[variable]), (variable, env)


def test_every_pytorchjob_pod_keeps_its_checkpoints_and_compiled_code_on_the_shared_claim():
    for spec, container in pods("pytorchjob.yaml"):  # the Master's and the Workers'
        assert claim_backed(spec, container, ckpt_dir(container["args"])), container["args"]


def test_the_trainjob_keeps_its_checkpoints_and_compiled_code_on_the_shared_claim():
    document = yaml.safe_load((KUBERNETES / "trainjob.yaml").read_text())
    ((spec, container),) = pods("trainjob.yaml")
    assert claim_backed(spec, container, ckpt_dir(document["spec"]["trainer"]["args"]))
