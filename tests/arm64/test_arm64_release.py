"""One tag for amd64 and arm64: the arm64 build under test and the amd64 build of the same TAG, released as
a publisher does it (push, zstd, sign), into a real registry, with a cosign key pair made here.

    make build FLAVOR=cpu && make test-arm64      # the image under test is $(IMAGE):cpu-latest-arm64

`make push PLATFORMS=linux/amd64,linux/arm64` puts one OCI index under every release tag, `make sign` signs
it and each entry (each attested with its own platform's SBOM and provenance), `make verify` checks the
index and the entry of the platform asked for, and `docker pull` of the tag gets each platform its own
image. `make zstd` gives every tag a `-zstd` index of each platform's zstd image, signed and verified alike.
An index whose entry was swapped, signed or not, fails `make verify`; builds that are not one release
are refused in one line. On this machine the arm64 build has another torch (docs/testing.md), so the push
runs with ALLOW_PLATFORM_DIFFERENCES=1, as a publisher in that position must.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import docker
from tests.support.host_tools import skip_where_missing
from tests.support.local_registry import local_registry, put_manifest, registry_api
from tests.support.release import environment_without_make, make, split_image_ref

pytestmark = pytest.mark.tier("full")

PLATFORMS = "linux/amd64,linux/arm64"
PASSWORD = "two-platform-release-password"
INDEX_TYPES = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
RELEASE_TIMEOUT_S = 1800


def cosign_environment() -> dict[str, str]:
    return dict(environment_without_make(), COSIGN_PASSWORD=PASSWORD, COSIGN_TLOG="0", COSIGN_YES="true",
                ALLOW_PLATFORM_DIFFERENCES="1")


def release_make(target: str, image: str, *variables: str) -> subprocess.CompletedProcess:
    return make(target, image, "cpu", *variables, timeout=RELEASE_TIMEOUT_S, environment=cosign_environment())


def verify(reference: str, public_key: str, platform: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "verify", f"IMAGE={reference}",
                           f"COSIGN_PUB={public_key}", f"PLATFORM={platform}"], cwd=REPO_ROOT,
                          env=cosign_environment(), capture_output=True, text=True, timeout=300, check=False)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def image_id(image: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()


@dataclass
class TwoPlatformRelease:
    registry: str
    repository: str  # host:port/name
    builds: dict[str, str]  # platform: the local build
    tags: list[str]
    index_digest: str
    public_key: str
    key: str
    directory: pathlib.Path

    def reference(self, tag: str) -> str:
        return f"{self.repository}:{tag}"

    def path(self) -> str:
        return self.repository.partition("/")[2]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[TwoPlatformRelease]:
    name, arm64_tag = split_image_ref(image)
    amd64 = f"{name}:{arm64_tag.removesuffix('-arm64')}"
    if docker("image", "inspect", amd64, check=False).returncode != 0:
        skip_where_missing(f"{amd64}, the amd64 build of the same TAG, is missing: make build FLAVOR=cpu first")
    if not shutil.which("cosign"):
        skip_where_missing("cosign is missing: install it with `bash .ci/install-cosign.sh`")
    builds = {"linux/amd64": amd64, "linux/arm64": image}
    root = tmp_path_factory.mktemp("two-platforms")
    directory = root / "release"
    directory.mkdir()
    # make build wrote each build's provenance into .build; this module publishes from its own folder.
    for platform, build in builds.items():
        suffix = "" if platform == "linux/amd64" else "-arm64"
        immutable = make("tags", build, "cpu").stdout.split()[0]
        shutil.copy(REPO_ROOT / ".build" / f"provenance-{immutable}{suffix}.json", directory)
        sbom = release_make("sbom", build, f"RELEASE_DIR={directory}")
        assert sbom.returncode == 0, sbom.stderr
    keys = root / "keys"
    keys.mkdir()
    subprocess.run(["cosign", "generate-key-pair"], cwd=keys, env=cosign_environment(), capture_output=True,
                   timeout=60, check=True)
    with local_registry(root) as registry:
        variables = (f"REGISTRY={registry}", f"RELEASE_DIR={directory}", f"PLATFORMS={PLATFORMS}")
        pushed = release_make("push", amd64, *variables)
        assert pushed.returncode == 0, pushed.stderr
        zstd = release_make("zstd", amd64, *variables[1:])
        assert zstd.returncode == 0, zstd.stderr
        signed = release_make("sign", amd64, f"COSIGN_KEY={keys / 'cosign.key'}", *variables[1:])
        assert signed.returncode == 0, signed.stdout + signed.stderr
        tags = make("tags", amd64, "cpu").stdout.split()
        index_digest = pushed.stdout.split()[0].rpartition("@")[2]
        yield TwoPlatformRelease(registry, f"{registry}/{name}", builds, tags, index_digest,
                                 str(keys / "cosign.pub"), str(keys / "cosign.key"), directory)


def test_every_tag_is_one_index_of_both_builds(release):
    for tag in release.tags:
        index = registry_api(release.registry, f"/v2/{release.path()}/manifests/{tag}", INDEX_TYPES)
        assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
        entries = {f"{e['platform']['os']}/{e['platform']['architecture']}": e for e in index["manifests"]}
        assert sorted(entries) == sorted(release.builds), index
        for platform, build in release.builds.items():
            manifest = registry_api(release.registry, f"/v2/{release.path()}/manifests/{entries[platform]['digest']}",
                                    MANIFEST_TYPES)
            assert manifest["config"]["digest"] == image_id(build), platform
            torch = docker("image", "inspect", "--format", '{{index .Config.Labels "dev.pytorch-dev.torch-version"}}',
                           build).stdout.strip()
            assert entries[platform]["annotations"]["dev.pytorch-dev.torch-version"] == torch


def test_docker_pull_of_the_tag_gets_each_platform_its_own_image(release):
    reference = release.reference(release.tags[0])
    try:
        for platform, build in release.builds.items():
            docker("pull", "--platform", platform, reference, timeout=RELEASE_TIMEOUT_S)
            assert image_id(reference) == image_id(build), platform
            assert docker("image", "inspect", "--format", "{{.Architecture}}", reference).stdout.strip() == \
                platform.split("/")[1]
    finally:
        docker("image", "rm", reference, check=False)


def test_verify_checks_the_index_and_the_entry_of_the_platform_asked_for(release):
    for tag in release.tags:
        for platform in ("", "linux/amd64", "linux/arm64"):
            result = verify(release.reference(tag), release.public_key, platform)
            assert result.returncode == 0, result.stderr
            checked = platform or "linux/amd64"  # this machine's
            entry = next(line for line in result.stdout.splitlines() if line.startswith(f"{checked}: "))
            last = result.stdout.splitlines()[-1]
            assert last.startswith(f"verified {release.repository}@{release.index_digest} for {checked}: "), last
            assert last.endswith(entry.split()[1]), result.stdout
            torch = docker("image", "inspect", "--format", '{{index .Config.Labels "dev.pytorch-dev.torch-version"}}',
                           release.builds[checked]).stdout.strip()
            assert f"torch {torch.split('+')[0]}" in result.stdout, result.stdout
    line = one_error_line(verify(release.reference(release.tags[0]), release.public_key, "linux/s390x"))
    assert "has no linux/s390x image (it has linux/amd64, linux/arm64)" in line, line


def test_an_index_with_a_swapped_entry_fails_verify_signed_or_not(release, tmp_path):
    """Someone who can push puts an index under a tag whose arm64 entry is another image: unsigned, refused;
    signed with the release key (a signer tricked into signing the index alone), the entry still is not."""
    swapped_arm64 = f"{release.repository}:swapped-arm64"
    subprocess.run(["docker", "build", "--quiet", "--platform", "linux/arm64", "--tag", swapped_arm64, "-"],
                   input=f"FROM {release.builds['linux/arm64']}\nLABEL swapped=yes\n", text=True,
                   capture_output=True, timeout=600, check=True)
    try:
        docker("push", swapped_arm64, timeout=RELEASE_TIMEOUT_S)
    finally:
        docker("image", "rm", swapped_arm64, check=False)
    index = registry_api(release.registry, f"/v2/{release.path()}/manifests/{release.tags[0]}", INDEX_TYPES)
    swapped = registry_api(release.registry, f"/v2/{release.path()}/manifests/swapped-arm64", MANIFEST_TYPES)
    for entry in index["manifests"]:
        if entry["platform"]["architecture"] == "arm64":
            entry.pop("annotations", None)
            entry.update(put_manifest(release.registry, release.path(), "swapped-arm64", swapped,
                                      swapped["mediaType"]))
    tampered = put_manifest(release.registry, release.path(), "tampered", index, index["mediaType"])
    line = one_error_line(verify(release.reference("tampered"), release.public_key, "linux/arm64"))
    assert "is not signed" in line, line
    subprocess.run(["cosign", "sign", "--key", release.key, "--tlog-upload=false", "-a", "dev.pytorch-dev.tag=tampered",
                    f"{release.repository}@{tampered['digest']}"], env=cosign_environment(), capture_output=True,
                   timeout=300, check=True)
    line = one_error_line(verify(release.reference("tampered"), release.public_key, "linux/arm64"))
    assert "its linux/arm64 image" in line and "is not signed" in line, line
    assert verify(release.reference("tampered"), release.public_key, "linux/amd64").returncode == 0


def test_builds_that_are_not_one_release_and_missing_builds_are_refused_in_one_line(release, tmp_path):
    mixed = f"{split_image_ref(release.builds['linux/amd64'])[0]}-mixed:cpu-latest"
    subprocess.run(["docker", "build", "--quiet", "--tag", mixed, "-"], text=True, capture_output=True, timeout=600,
                   input=f"FROM {release.builds['linux/amd64']}\n"
                         f"LABEL org.opencontainers.image.revision=89abcdef0123456789abcdef0123456789abcdef\n",
                   check=True)
    docker("tag", release.builds["linux/arm64"], f"{mixed}-arm64")
    try:
        variables = (f"REGISTRY={release.registry}", f"RELEASE_DIR={tmp_path}")
        line = one_error_line(release_make("push", mixed, *variables, f"PLATFORMS={PLATFORMS}"))
        assert "not one release: linux/arm64's commit is" in line and "89abcdef0123" in line, line
        line = one_error_line(release_make("push", mixed, *variables, "PLATFORMS=linux/amd64,linux/s390x"))
        assert f"no linux/s390x build of {mixed} here" in line, line
    finally:
        docker("image", "rm", mixed, f"{mixed}-arm64", check=False)
    assert not list(tmp_path.glob("pushed-*")), "a refused push recorded something to sign"


def test_every_zstd_tag_is_one_index_of_each_platforms_zstd_image_signed_and_pulled_as_that_build(release):
    path = release.path()
    for tag in release.tags:
        gzip_index = registry_api(release.registry, f"/v2/{path}/manifests/{tag}", INDEX_TYPES)
        zstd_index = registry_api(release.registry, f"/v2/{path}/manifests/{tag}-zstd", INDEX_TYPES)
        assert [entry["platform"] for entry in zstd_index["manifests"]] == \
            [entry["platform"] for entry in gzip_index["manifests"]], zstd_index
        for gzip_entry, zstd_entry in zip(gzip_index["manifests"], zstd_index["manifests"], strict=True):
            assert zstd_entry["annotations"] == gzip_entry["annotations"]
            gzip_image = registry_api(release.registry, f"/v2/{path}/manifests/{gzip_entry['digest']}", MANIFEST_TYPES)
            zstd_image = registry_api(release.registry, f"/v2/{path}/manifests/{zstd_entry['digest']}", MANIFEST_TYPES)
            assert zstd_image["config"]["digest"] == gzip_image["config"]["digest"], "the image id must not change"
            kinds = [layer["mediaType"].rpartition("+")[2] for layer in zstd_image["layers"]]
            # Each platform's own base layers stay the very gzip blobs; ours are zstd, and there are some.
            base_layers = kinds.index("zstd")
            assert set(kinds[base_layers:]) == {"zstd"}, kinds
            assert [layer["digest"] for layer in zstd_image["layers"][:base_layers]] == \
                [layer["digest"] for layer in gzip_image["layers"][:base_layers]]
    zstd_reference = release.reference(f"{release.tags[0]}-zstd")
    for platform in release.builds:
        result = verify(zstd_reference, release.public_key, platform)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1].startswith(f"verified {release.repository}@"), result.stdout
    try:
        for platform, build in release.builds.items():
            docker("pull", "--platform", platform, zstd_reference, timeout=RELEASE_TIMEOUT_S)
            assert image_id(zstd_reference) == image_id(build), platform
    finally:
        docker("image", "rm", zstd_reference, check=False)


def test_zstd_without_a_platforms_provenance_ends_in_one_line_and_publishes_nothing(release, tmp_path):
    directory = tmp_path / "release"
    shutil.copytree(release.directory, directory)
    for provenance in directory.glob("provenance-*-arm64.json"):
        provenance.unlink()
    pushed = next(directory.glob("pushed-*.txt"))
    before = pushed.read_text()
    line = one_error_line(release_make("zstd", release.builds["linux/amd64"], f"RELEASE_DIR={directory}"))
    assert "names the base of the linux/arm64 build" in line and "nothing was published" in line, line
    assert pushed.read_text() == before
