"""Kubeflow Notebooks' rules, reproduced with `docker run`: the controller sets NB_PREFIX and puts its own
authentication in front of port 8888, which the image accepts only when JUPYTER_AUTH=platform says so.
deploy/kubernetes/notebook.yaml is checked against the Notebook CRD's schema.

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_kubeflow.py"
"""
from __future__ import annotations

import uuid

import pytest
import requests
import yaml

from tests.deploy.test_kubernetes import validate_core, validate_pod_template
from tests.support import HTTP_TIMEOUT_S, REPO_ROOT
from tests.support.containers import docker, run_container_to_completion, running_container
from tests.support.jupyter_websockets import JupyterAccess, run_in_kernel, run_in_terminal

pytestmark = pytest.mark.tier("landing")

PREFIX = "/notebook/ns/me"
KUBEFLOW_LIKE = ["--publish", "127.0.0.1::8888", "--env", "ENABLE_SSH=0", "--env", f"NB_PREFIX={PREFIX}"]
PLATFORM_HOST = "kubeflow.example.com"  # the name the platform serves the notebook under
PLATFORM_AUTH = ["--env", "JUPYTER_AUTH=platform", "--env", f"JUPYTER_ALLOWED_HOSTS={PLATFORM_HOST}"]


@pytest.fixture(scope="module")
def kubeflow_notebook(image):
    with running_container(image, options=[*KUBEFLOW_LIKE, *PLATFORM_AUTH]) as container:
        yield container


def access(container) -> JupyterAccess:
    return JupyterAccess(f"http://127.0.0.1:{container.published_port(8888)}{PREFIX}/")


def test_jupyterlab_answers_under_nb_prefix_and_not_at_the_root(kubeflow_notebook):
    server = access(kubeflow_notebook)
    assert server.get("api/status").status_code == 200
    root = f"http://127.0.0.1:{kubeflow_notebook.published_port(8888)}/api/status"
    assert requests.get(root, timeout=HTTP_TIMEOUT_S).status_code == 404


def test_a_kernel_and_a_terminal_work_through_the_prefix(kubeflow_notebook):
    server = access(kubeflow_notebook)
    server.get("lab")  # the page a browser opens first; it sets the _xsrf cookie the POSTs send back
    assert run_in_kernel(server, "import torch; print('torch', torch.__version__)").startswith("torch ")
    assert "prefix-terminal-ok" in run_in_terminal(server, 'echo "prefix-terminal""-ok"', "prefix-terminal-ok")


def test_the_platform_switch_is_logged_as_a_warning(kubeflow_notebook):
    assert "WARNING: JUPYTER_AUTH=platform: JupyterLab runs WITHOUT its own token" in kubeflow_notebook.logs()


@pytest.mark.parametrize(("host", "status"), [
    ("rebound.attacker.example", 403),  # a page whose name now points at 127.0.0.1 (DNS rebinding)
    (f"{PLATFORM_HOST}:443", 200),
    ("localhost", 200),
])
def test_without_a_login_of_its_own_jupyterlab_answers_only_the_platforms_host_names(kubeflow_notebook, host,
                                                                                      status):
    terminals = f"http://127.0.0.1:{kubeflow_notebook.published_port(8888)}{PREFIX}/api/terminals"
    assert requests.get(terminals, headers={"Host": host}, timeout=HTTP_TIMEOUT_S).status_code == status
    assert f"only requests for localhost,{PLATFORM_HOST} and loopback" in kubeflow_notebook.logs()


# ---- Kubeflow's New Notebook form -------------------------------------------------------------------
# The form starts a custom image with its workspace volume at /home/jovyan (its default mount path),
# fsGroup 100 on the pod (the kubelet gives the volume to group 100, setgid), NB_PREFIX, and the image's
# own user unless the admin adds runAsUser. Nothing is mounted at /workspace.
FORM_HOME = "/home/jovyan"


@pytest.fixture
def form_volume(image):
    """A named volume as the kubelet hands a PVC to a pod with fsGroup 100: group 100's, mode 2775."""
    name = f"kubeflow-form-{uuid.uuid4().hex[:12]}"
    docker("volume", "create", name)
    try:
        docker("run", "--rm", "--user", "0", "--entrypoint", "sh", "--volume", f"{name}:/v", image, "-c",
               "chgrp 100 /v && chmod 2775 /v")
        yield name
    finally:
        docker("volume", "rm", "--force", name, check=False)


@pytest.mark.parametrize("run_as", [[], ["--user", "1000"]], ids=["image-user", "runAsUser-1000"])
def test_what_is_saved_in_kubeflows_form_lands_on_its_volume_and_outlives_the_pod(image, form_volume, run_as):
    options = [*KUBEFLOW_LIKE, *PLATFORM_AUTH, *run_as, "--group-add", "100", "--volume", f"{form_volume}:{FORM_HOME}"]
    with running_container(image, options=options) as container:
        server = access(container)
        server.get("lab")  # sets the _xsrf cookie the writes send back
        saved = server.request("PUT", "api/contents/from-jupyterlab.txt",
                               json={"type": "file", "format": "text", "content": "kept\n"})
        assert saved.status_code in (200, 201), saved.text
        run_in_terminal(server, 'echo kept > from-terminal.txt && echo "saved""-ok"', "saved-ok")
        assert f"workspace: {FORM_HOME}, the volume mounted there" in container.logs(), container.logs()
    # The pod is gone; the volume is all that is left.
    listing = docker("run", "--rm", "--entrypoint", "ls", "--volume", f"{form_volume}:/v", image, "/v").stdout.split()
    assert {"from-jupyterlab.txt", "from-terminal.txt", "examples"} <= set(listing), listing


def test_a_volume_at_workspace_stays_the_workspace_beside_a_home_volume(form_volume, containers, tmp_path):
    """deploy/kubernetes/notebook.yaml's way (its claim at /workspace) wins over any home volume."""
    container = containers(command=["sleep", "infinity"],
                           options=["--volume", f"{tmp_path}:/workspace", "--volume", f"{form_volume}:{FORM_HOME}"])
    container.wait_until_started()
    settings = container.run("cat /run/container/settings.json", user="root").stdout
    assert '"workspace": "/workspace"' in settings, settings


@pytest.mark.parametrize("auth", [[], ["--env", "JUPYTER_AUTH="]], ids=["unset", "empty"])
def test_without_the_switch_the_prefix_keeps_a_token(containers, auth):
    container = containers(options=[*KUBEFLOW_LIKE, *auth])
    container.wait_until_healthy()
    server = access(container)
    assert server.get("api/contents").status_code == 403
    assert f"{PREFIX}/?token=" in container.logs()


@pytest.mark.parametrize(("env", "message"), [
    (["JUPYTER_AUTH=none"], "JUPYTER_AUTH='none' is not a kind of authentication"),
    (["JUPYTER_AUTH=platform", "JUPYTER_TOKEN=abcdefghijklmnopqrstuvwx"], "unset them, or unset JUPYTER_AUTH"),
    (["NB_PREFIX=notebook/ns/me"], "is not a URL path"),
    (["NB_PREFIX=/notebook/../etc"], "is not a URL path"),
    (["NB_PREFIX=/a", "JUPYTER_BASE_URL=/b"], "disagree; set only one of them"),
    (["JUPYTER_AUTH=platform", "JUPYTER_ALLOWED_HOSTS=10.0.0.5"], "'10.0.0.5' is not a host name"),
    (["JUPYTER_AUTH=platform", "JUPYTER_ALLOWED_HOSTS=a.example,https://b.example"], "is not a host name"),
], ids=["unknown-auth", "platform-and-token", "relative-prefix", "dot-dot", "two-prefixes", "address-as-host",
        "url-as-host"])
def test_a_bad_setting_stops_start_up_with_one_line(image, env, message):
    options = ["--env", "ENABLE_SSH=0"] + [option for pair in env for option in ("--env", pair)]
    result = run_container_to_completion(image, options=options)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr


# ---- deploy/kubernetes/notebook.yaml against the Notebook CRD --------------------------------------
# What the CRD says (kubeflow/notebooks, components/notebook-controller/config/crd/bases/
# kubeflow.org_notebooks.yaml at c1350d18, controller-gen v0.14.0; version v1, the storage version):
# spec holds only `template`, the template only `spec` (a core PodSpec, `containers` required);
# anything else is pruned by the API server, so this check refuses it.
NOTEBOOK_FIELDS = {"apiVersion", "kind", "metadata", "spec"}


def notebook_documents() -> list[dict]:
    return list(yaml.safe_load_all((REPO_ROOT / "deploy" / "kubernetes" / "notebook.yaml").read_text()))


def check_notebook_against_the_crd(notebook: dict) -> None:
    """Raises AssertionError where NOTEBOOK breaks the v1 Notebook schema; the pod spec goes to kubernetes-validate."""
    assert (notebook["apiVersion"], notebook["kind"]) == ("kubeflow.org/v1", "Notebook")
    assert set(notebook) <= NOTEBOOK_FIELDS, set(notebook) - NOTEBOOK_FIELDS
    assert set(notebook["spec"]) == {"template"}, notebook["spec"]
    assert set(notebook["spec"]["template"]) == {"spec"}, notebook["spec"]["template"]
    assert notebook["spec"]["template"]["spec"]["containers"], "the CRD requires containers"
    validate_pod_template({"spec": notebook["spec"]["template"]["spec"]})


def test_notebook_yaml_is_a_valid_notebook_and_claim():
    claim, notebook = notebook_documents()
    validate_core(claim)
    check_notebook_against_the_crd(notebook)


def test_the_check_refuses_what_the_crd_would_prune():
    _, notebook = notebook_documents()
    notebook["spec"]["replicas"] = 1
    with pytest.raises(AssertionError):
        check_notebook_against_the_crd(notebook)


def test_notebook_yaml_gives_the_image_its_port_platform_auth_gpu_shm_and_workspace():
    claim, notebook = notebook_documents()
    pod = notebook["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["ports"][0]["containerPort"] == 8888  # where the controller's Service sends traffic
    assert {"name": "JUPYTER_AUTH", "value": "platform"} in container["env"]
    assert any(variable["name"] == "JUPYTER_ALLOWED_HOSTS" for variable in container["env"])
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert volumes[mounts["/workspace"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
