"""Release tooling on the built image: the tags `make tags` computes, the SBOM `make sbom` writes, the
errors of `make push`, and the CI workflow (actionlint, every step a make target).

    make test PYTEST_ARGS="tests/release/test_release.py"

The registry round trip is tests/release/test_release_registry.py; build reproducibility is
tests/release/test_release_reproducible.py.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest
import yaml

from tests.support.release import REPO_ROOT, make

pytestmark = pytest.mark.tier("landing")

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "image.yml"
IMMUTABLE_TAG = re.compile(r"(cpu|gpu)-torch[0-9][0-9A-Za-z.]*-(cpu|cuda[0-9]+\.[0-9]+)-[a-z0-9.]+-[0-9]{8}-g[0-9a-f]{7}")


@pytest.fixture(scope="module")
def release_tags(image: str, flavor: str) -> list[str]:
    result = make("tags", image, flavor)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_make_tags_states_flavor_torch_cuda_base_date_and_commit(release_tags, labels, flavor):
    immutable = release_tags[0]
    assert IMMUTABLE_TAG.fullmatch(immutable), immutable
    torch_version = labels["dev.pytorch-dev.torch-version"].split("+")[0]
    assert immutable.startswith(f"{flavor}-torch{torch_version}-"), (immutable, labels)
    assert ("-cpu-" in immutable) == (labels["dev.pytorch-dev.cuda-version"] == "none")
    assert immutable.endswith("-g" + labels["org.opencontainers.image.revision"][:7])
    assert labels["org.opencontainers.image.created"][:10].replace("-", "") in immutable
    if flavor == "cpu":
        assert "-bookworm-" in immutable, immutable


def test_moving_tags_are_flavor_latest_and_latest_only_for_gpu(release_tags, flavor):
    assert release_tags[1:] == ([f"{flavor}-latest", "latest"] if flavor == "gpu" else [f"{flavor}-latest"])


def test_make_tags_on_a_missing_image_says_so_in_one_line(flavor):
    result = make("tags", "pytorch-dev:no-such-tag-for-release-test", flavor)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not exist" in errors[0] and "make build" in errors[0], result.stderr


def test_make_push_without_registry_says_so_in_one_line(image, flavor):
    result = make("push", image, flavor, "REGISTRY=")
    assert result.returncode != 0
    assert "error: REGISTRY is not set" in result.stderr, result.stderr


@pytest.fixture(scope="module")
def sbom(image: str, flavor: str, release_tags: list[str]) -> dict:
    result = make("sbom", image, flavor)
    assert result.returncode == 0, result.stderr
    path = pathlib.Path(result.stdout.strip().splitlines()[-1])
    path = path if path.is_absolute() else REPO_ROOT / path
    expected_name = f"sbom-{release_tags[0]}.cdx.json"
    assert path.parent == REPO_ROOT / ".build" and path.name == expected_name, path
    return json.loads(path.read_text())


def test_sbom_is_valid_cyclonedx_1_5(sbom):
    validation = pytest.importorskip("cyclonedx.validation.json", reason="`make test` installs cyclonedx-python-lib")
    from cyclonedx.schema import SchemaVersion

    error = validation.JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(sbom))
    assert error is None, error


def test_sbom_lists_os_and_python_packages_with_purls(sbom, training_container):
    purls = {component.get("purl", "") for component in sbom["components"]}
    assert sbom["metadata"]["component"]["type"] == "container"
    for deb in ("openssh-server", "tmux", "tini"):
        assert any(purl.startswith(f"pkg:deb/debian/{deb}@") or purl.startswith(f"pkg:deb/ubuntu/{deb}@")
                   for purl in purls), deb
    for dist in ("torch", "jupyterlab", "tensorboard"):
        assert any(purl.startswith(f"pkg:pypi/{dist}@") for purl in purls), dist
    installed = training_container.run("dpkg-query -W -f '${db:Status-Abbrev}\\n' | grep -c '^ii'").stdout.strip()
    assert sum(purl.startswith("pkg:deb/") for purl in purls) == int(installed)
    refs = [component["bom-ref"] for component in sbom["components"]]
    assert len(refs) == len(set(refs)), "bom-refs must be unique"


@pytest.mark.tier("full")
def test_workflow_passes_actionlint():
    result = make("lint-workflows", "unused:unused", "cpu", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problem(s)" in result.stdout, result.stdout


def test_every_workflow_step_that_runs_something_is_a_make_target():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"].values()
    runs = [step["run"] for job in jobs for step in job.get("steps", []) if "run" in step]
    assert runs, "the workflow runs no step"
    assert all(re.fullmatch(r'make [a-z-]+( [A-Z_]+=("[^"]*"|[^\s"]+))*', run) for run in runs), runs


def test_workflow_builds_both_flavors_tests_gpu_on_self_hosted_and_pushes_only_on_version_tags():
    text = WORKFLOW.read_text()
    assert "make test FLAVOR=cpu" in text and "make test FLAVOR=gpu" in text
    assert "runs-on: [self-hosted, gpu]" in text
    push_steps = re.findall(r"- name: Push every tag\n\s+if: (.*)\n\s+run: make push", text)
    assert push_steps == ["startsWith(github.ref, 'refs/tags/v')"] * 2, push_steps
