"""Signed, attested, zstd releases through a real registry: `make push`, `make zstd`, `make sign`,
`make verify` against Debian's docker-registry on 127.0.0.1, with a cosign 2.x key pair made here.

    make test PYTEST_ARGS="tests/release/test_release_signing.py"

Needs /usr/bin/docker-registry (`make ci-registry`) and cosign 2.x (`bash .ci/install-cosign.sh`); without
them the tests skip, except in CI (CI=true). No transparency log is reachable here, so COSIGN_TLOG=0.
Each refusal of `make verify` is one `error:` line: unsigned, tag moved after signing, another key, a moving
tag moved back (releases ordered as they were signed, whatever their build clocks), and signature tags
pushed without the key, which never end in a traceback.
"""
from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import resource
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT
from tests.support.containers import docker
from tests.support.host_tools import skip_where_missing
from tests.support.local_registry import local_registry, put_blob, put_manifest, registry_api
from tests.support.release import environment_without_make, make, split_image_ref

pytestmark = pytest.mark.tier("full")

PUSH_TIMEOUT_S = 1800  # a first push of the whole image; minutes on a loaded machine
PASSWORD = "release-test-password"
TAG_ANNOTATION = "dev.pytorch-dev.tag"
SEQUENCE_ANNOTATION = "dev.pytorch-dev.sequence"
SIGNATURE_LAYER = "application/vnd.dev.cosign.simplesigning.v1+json"
MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def cosign_environment() -> dict[str, str]:
    return dict(environment_without_make(), COSIGN_PASSWORD=PASSWORD, COSIGN_TLOG="0", COSIGN_YES="true",
                ZSTD_LEVEL="3")


def cosign(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["cosign", *args], capture_output=True, text=True, timeout=300, check=False,
                            env=cosign_environment())
    assert not check or result.returncode == 0, result.stderr
    return result


def release_make(target: str, image: str, flavor: str, *variables: str) -> subprocess.CompletedProcess:
    return make(target, image, flavor, *variables, timeout=PUSH_TIMEOUT_S, environment=cosign_environment())


def key_pair(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    folder.mkdir()
    subprocess.run(["cosign", "generate-key-pair"], cwd=folder, env=cosign_environment(), capture_output=True,
                   timeout=60, check=True)
    return folder / "cosign.key", folder / "cosign.pub"


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


class Release:
    def __init__(self, registry: str, repository: str, tags: list[str], digest: str, directory: pathlib.Path,
                 key: pathlib.Path, public_key: pathlib.Path):
        self.registry, self.repository, self.tags, self.digest = registry, repository, tags, digest
        self.directory, self.key, self.public_key = directory, key, public_key

    def reference(self, tag: str) -> str:
        return f"{self.repository}:{tag}"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, image: str, flavor: str) -> Iterator[Release]:
    """The image under test pushed, given its -zstd tags and signed, into a registry of this module."""
    if not shutil.which("cosign"):
        skip_where_missing("cosign is missing: install it with `bash .ci/install-cosign.sh`")
    root = tmp_path_factory.mktemp("signing")
    tags = make("tags", image, flavor).stdout.split()
    directory = root / "release"
    directory.mkdir()
    # make build wrote the image's SBOM and provenance into .build; this module publishes from its own folder,
    # so a concurrent `make push` of another test cannot change what it signs.
    for name in (f"sbom-{tags[0]}.cdx.json", f"provenance-{tags[0]}.json"):
        shutil.copy(REPO_ROOT / ".build" / name, directory / name)
    key, public_key = key_pair(root / "keys")
    with local_registry(root) as registry:
        release_dir = f"RELEASE_DIR={directory}"
        pushed = release_make("push", image, flavor, f"REGISTRY={registry}", release_dir)
        assert pushed.returncode == 0, pushed.stderr
        zstd = release_make("zstd", image, flavor, release_dir)
        assert zstd.returncode == 0, zstd.stderr
        signed = release_make("sign", image, flavor, f"COSIGN_KEY={key}", release_dir)
        assert signed.returncode == 0, signed.stderr
        digest = pushed.stdout.split()[0].split("@")[1]
        yield Release(registry, f"{registry}/{split_image_ref(image)[0]}", tags, digest, directory, key, public_key)


def verify(image: str, public_key: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "verify", f"IMAGE={image}", f"COSIGN_PUB={public_key}"],
                          cwd=REPO_ROOT, env=cosign_environment(), capture_output=True, text=True, timeout=300,
                          check=False)


def attested_statement(release: Release, kind: str) -> dict:
    """The in-toto statement of KIND read back from the registry with cosign itself, not our tool."""
    by_digest = f"{release.repository}@{release.digest}"
    result = cosign("verify-attestation", "--key", str(release.public_key), "--insecure-ignore-tlog=true",
                    "--type", kind, by_digest)
    return json.loads(base64.b64decode(json.loads(result.stdout.splitlines()[-1])["payload"]))


def test_every_pushed_tag_verifies_by_tag_and_by_digest(release):
    for tag in release.tags:
        pinned = f"{release.reference(tag)}@{release.digest}"
        for reference in (release.reference(tag), pinned):
            result = verify(reference, release.public_key)
            assert result.returncode == 0, result.stderr
            assert result.stdout.splitlines()[-1] == f"verified {release.repository}@{release.digest}", result.stdout


def test_the_sbom_attestation_lists_torch(release, labels):
    statement = attested_statement(release, "cyclonedx")
    assert statement["predicateType"] == "https://cyclonedx.org/bom"
    assert statement["subject"][0]["digest"]["sha256"] == release.digest.split(":")[1]
    torch = [c for c in statement["predicate"]["components"] if c.get("purl", "").startswith("pkg:pypi/torch@")]
    # The label has NGC's full version, or the CPU flavor's pin without pip's local part (+cpu).
    assert [c["version"].split("+")[0] for c in torch] == [labels["dev.pytorch-dev.torch-version"].split("+")[0]]


def test_the_provenance_attestation_names_commit_base_digest_lock_and_builder(release, labels):
    statement = attested_statement(release, "slsaprovenance1")
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"][0]["digest"]["sha256"] == release.digest.split(":")[1]
    definition = statement["predicate"]["buildDefinition"]
    dependencies = {dependency["name"]: dependency for dependency in definition["resolvedDependencies"]}
    assert dependencies["source"]["digest"]["gitCommit"] == labels["org.opencontainers.image.revision"]
    base = labels["dev.pytorch-dev.base-image"]
    base_digest = labels["dev.pytorch-dev.base-digest"] or docker("image", "inspect", "--format", "{{.Id}}",
                                                                  base).stdout.strip()
    algorithm, value = base_digest.split(":")
    assert dependencies["base-image"]["digest"] == {algorithm: value}, dependencies["base-image"]
    lock = REPO_ROOT / "docker" / "python" / f"requirements-{labels['dev.pytorch-dev.flavor']}.lock"
    if lock.is_file():
        assert dependencies["python-lock"]["digest"]["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert definition["externalParameters"]["buildArgs"]["FLAVOR"] == labels["dev.pytorch-dev.flavor"]
    assert statement["predicate"]["runDetails"]["builder"]["version"]["docker-engine"]


def test_an_unsigned_image_is_refused_in_one_line(release, image):
    unsigned = release.reference("unsigned")
    derived(image, unsigned, "unsigned")
    line = one_error_line(verify(unsigned, release.public_key))
    assert "is not signed" in line, line


def test_a_signature_made_with_another_key_is_refused_in_one_line(release, tmp_path):
    _, other_public_key = key_pair(tmp_path / "other")
    line = one_error_line(verify(release.reference(release.tags[0]), other_public_key))
    assert "not with the key given" in line, line


def test_a_tag_moved_to_another_signed_image_after_signing_is_refused_in_one_line(release, image):
    """The moving tag is pointed at another image that is signed, for a tag of its own: still refused."""
    moving = release.tags[-1]
    other = derived(image, release.reference(moving), "moved")
    cosign("sign", "--key", str(release.key), "--tlog-upload=false", "-a", f"{TAG_ANNOTATION}=other-release", other)
    try:
        line = one_error_line(verify(release.reference(moving), release.public_key))
        assert "moved after signing" in line and moving in line, line
    finally:
        docker("tag", image, release.reference(moving))
        docker("push", release.reference(moving), timeout=PUSH_TIMEOUT_S)
    assert verify(release.reference(moving), release.public_key).returncode == 0


def publish(image: str, flavor: str, release: Release, directory: pathlib.Path) -> tuple[str, subprocess.CompletedProcess]:
    """IMAGE released as a publisher does it: `make push`, `make sbom`, `make sign`; returns the digest of its
    immutable tag and what `make sign` answered. Its provenance is the module image's, renamed: `make sign`
    reads what `make build` wrote."""
    immutable = make("tags", image, flavor).stdout.split()[0]
    directory.mkdir()
    shutil.copy(next(release.directory.glob("provenance-*.json")), directory / f"provenance-{immutable}.json")
    pushed = release_make("push", image, flavor, f"REGISTRY={release.registry}", f"RELEASE_DIR={directory}")
    assert pushed.returncode == 0, pushed.stderr
    sbom = release_make("sbom", image, flavor, f"RELEASE_DIR={directory}")
    assert sbom.returncode == 0, sbom.stderr
    return pushed.stdout.split()[0].rpartition("@")[2], sign_again(image, flavor, release, directory)


def sign_again(image: str, flavor: str, release: Release, directory: pathlib.Path) -> subprocess.CompletedProcess:
    return release_make("sign", image, flavor, f"COSIGN_KEY={release.key}", f"RELEASE_DIR={directory}")


def test_a_moving_tag_moved_back_to_an_older_signed_release_is_refused_whatever_the_build_clocks(
        release, image, flavor, tmp_path):
    """Two releases of one repository, published in turn: the first built on a runner whose clock ran far
    ahead (dated 2099), the second on time. The order is the one they were signed in, whatever was claimed
    between them without the key: the moving tag at the second passes, and signing the first again is
    refused; moved back to the first, the tag is refused in one line, by tag, pinned under the tag, and in
    the pipeline, which resolves the tag and verifies what it resolved."""
    name = f"{split_image_ref(image)[0]}-order"
    built = {}
    for when, created in (("first", "2099-01-01T00:00:00Z"), ("second", "")):
        built[when] = local_derived(image, f"{name}:{when}", when, created)
    moving = f"{release.registry}/{name}:{flavor}-latest"
    try:
        first, signed = publish(built["first"], flavor, release, tmp_path / "first")
        assert signed.returncode == 0 and "as release 1\n" in signed.stdout, signed.stdout + signed.stderr
        # Someone who can push but not sign claims the largest number there is: signing stops, naming it.
        false_claim = push_junk(moving.rpartition(":")[0], b'{"false": "claim"}', [claim(f"{flavor}-latest", "9" * 30)])
        second, signed = publish(built["second"], flavor, release, tmp_path / "second")
        line = one_error_line(signed)
        assert "the largest number there is" in line and f"{false_claim.replace(':', '-')}.sig" in line, line
        # Cleaned up (here: its tag overwritten by a smaller false claim), numbers jump past it, in order.
        push_junk(moving.rpartition(":")[0], b'{"false": "claim"}', [claim(f"{flavor}-latest", "9" * 18)])
        signed = sign_again(built["second"], flavor, release, tmp_path / "second")
        assert signed.returncode == 0 and f"as release 1{'0' * 18}\n" in signed.stdout, signed.stdout + signed.stderr
        at_newest = verify(moving, release.public_key)
        assert at_newest.returncode == 0, at_newest.stderr
        assert f"newest: release 1{'0' * 18} of {flavor}-latest" in at_newest.stdout, at_newest.stdout
        # `make sign` again for the first release (a retry) must not make it the newest.
        again = sign_again(built["first"], flavor, release, tmp_path / "first")
        line = one_error_line(again)
        assert f"now names {second[:19]}" in line and "signed " not in again.stdout, line
        docker("tag", built["first"], moving)
        docker("push", moving, timeout=PUSH_TIMEOUT_S)  # moved back
        for named in (moving, f"{moving}@{first}"):
            line = one_error_line(verify(named, release.public_key))
            assert "moved back" in line and "signed as release 1," in line and second[:19] in line, line
        # Moved back by a pusher, the tag names the first release: a routine `make sign` again of it must
        # still not make it the newest.
        again = sign_again(built["first"], flavor, release, tmp_path / "first")
        line = one_error_line(again)
        assert "moved back to an older build" in line and "SIGN_AS_NEWEST=1" in line, line
        assert "signed " not in again.stdout, again.stdout
        pipeline = subprocess.run(["tools/pipeline/gate_and_submit.sh", moving], cwd=REPO_ROOT, capture_output=True,
                                  text=True, timeout=PUSH_TIMEOUT_S, check=False,
                                  env=dict(cosign_environment(), CKPT_DIR=str(tmp_path), COSIGN_PUB=str(release.public_key)))
        assert pipeline.returncode != 0 and "moved back" in pipeline.stderr, pipeline.stderr
        assert "3/4" not in pipeline.stderr, "an image that failed verification went on to the gate"
        # Told on purpose, the old build is published as the newest.
        meant = release_make("sign", built["first"], flavor, f"COSIGN_KEY={release.key}",
                             f"RELEASE_DIR={tmp_path / 'first'}", "SIGN_AS_NEWEST=1")
        assert meant.returncode == 0 and f"as release 1{'0' * 17}1\n" in meant.stdout, meant.stdout + meant.stderr
        assert verify(moving, release.public_key).returncode == 0
    finally:
        docker("image", "rm", *built.values(), moving, check=False)


def sign_numbered(release: Release, by_digest: str, tag: str, sequence: int) -> None:
    """BY_DIGEST signed with the release key for TAG as release SEQUENCE: what `make sign` writes."""
    cosign("sign", "--key", str(release.key), "--tlog-upload=false", "-a", f"{TAG_ANNOTATION}={tag}",
           "-a", f"{SEQUENCE_ANNOTATION}={sequence}", by_digest)


def sign_as(release: Release, tag: str, sequence: int) -> None:
    """The module's image signed for TAG as release SEQUENCE, and TAG pushed at it."""
    sign_numbered(release, f"{release.repository}@{release.digest}", tag, sequence)
    reference = release.reference(tag)
    docker("tag", f"{release.reference(release.tags[0])}", reference)
    try:
        docker("push", reference, timeout=PUSH_TIMEOUT_S)
    finally:
        docker("image", "rm", reference, check=False)


def push_junk(repository: str, config: bytes, payloads: list[bytes]) -> str:
    """What anyone who can push but not sign can write into REPOSITORY (host:port/path): an image whose config
    is CONFIG, and a cosign-shaped signature tag for it whose payloads are PAYLOADS, none of them signed.
    Returns the image's digest."""
    address, path = repository.split("/", 1)
    config_blob = dict(put_blob(address, path, config), mediaType="application/vnd.oci.image.config.v1+json")
    layer = dict(put_blob(address, path, config + b" layer"), mediaType="application/vnd.oci.image.layer.v1.tar")
    image = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config_blob,
             "layers": [layer]}
    digest = put_manifest(address, path, f"junk-{hashlib.sha256(config).hexdigest()[:12]}", image)["digest"]
    signatures = [unsigned_signature(address, path, payload) for payload in payloads]
    put_manifest(address, path, f"{digest.replace(':', '-')}.sig", dict(image, layers=signatures or [layer]))
    return digest


def unsigned_signature(address: str, path: str, payload: bytes) -> dict:
    """A signature layer as cosign writes one, of PAYLOAD, whose signature is not one."""
    return dict(put_blob(address, path, payload), mediaType=SIGNATURE_LAYER,
                annotations={"dev.cosignproject.cosign/signature": "MEUCIQDnotasignature"})


def claim(tag: str, sequence: str) -> bytes:
    return json.dumps({"critical": {"type": "cosign container image signature"},
                       "optional": {TAG_ANNOTATION: tag, SEQUENCE_ANNOTATION: sequence}}).encode()


def test_junk_under_signature_tags_never_breaks_the_moving_tag_check(release):
    """Signature-shaped tags whose payloads are not JSON, a list, nested past Python's recursion limit, or
    claims that are not numbers, on images whose config is not JSON, is a list, or has a build time that is
    not a string (the configs a check that read them ended on, in a traceback): all skipped, and the moving
    tag still verifies."""
    sign_as(release, "junk-latest", 1)
    created = "org.opencontainers.image.created"
    for config in (b"not json", b"[1, 2]", json.dumps({"config": {"Labels": {created: 2099}}}).encode()):
        push_junk(release.repository, config, [b"not json", b"[]", b"[" * 60000, b'{"optional": []}',
                                               claim("junk-latest", "1e9"), claim("junk-latest", "9" * 40),
                                               json.dumps({"optional": {TAG_ANNOTATION: 5}}).encode()])
    result = verify(release.reference("junk-latest"), release.public_key)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "newest: release 1 of junk-latest" in result.stdout, result.stdout


def test_claims_of_a_later_release_that_do_not_verify_are_ignored_then_stop_the_check_in_one_line(release):
    """Unsigned claims of a later release, on images whose labels say they were built later, each cost one
    `cosign verify`: a few are ignored and said so; at five the check stops, in one line."""
    sign_as(release, "flood-latest", 1)

    def built_later(index: int) -> bytes:
        labels = {"org.opencontainers.image.created": "2099-01-01T00:00:00Z", "test": str(index)}
        return json.dumps({"config": {"Labels": labels}}).encode()
    for index in range(2):
        push_junk(release.repository, built_later(index), [claim("flood-latest", "1000")])
    result = verify(release.reference("flood-latest"), release.public_key)
    assert result.returncode == 0, result.stderr
    assert "2 image(s) claiming a later release in signatures that do not verify ignored" in result.stdout, \
        result.stdout
    for index in range(2, 12):
        push_junk(release.repository, built_later(index), [claim("flood-latest", str(1000 + index))])
    line = one_error_line(verify(release.reference("flood-latest"), release.public_key))
    assert "5 images" in line and "do not verify with this key" in line, line


def test_false_claims_neither_hide_a_later_release_nor_ride_on_a_genuine_signature(release, image):
    """Three unsigned claims of releases 50 to 52 rank above the genuine release 3, whose signature tag is also
    padded past what is read of one: it is still found, and refuses the tag at release 2. An unsigned claim
    of release 9 added to the genuine signature tag of release 1 costs its `cosign verify` like any false
    claim, and is counted as one."""
    tag = "forged-latest"
    sign_as(release, tag, 2)
    older = derived(image, release.reference("forged-older"), "forged-older")
    newer = derived(image, release.reference("forged-newer"), "forged-newer")
    for by_digest, sequence in ((older, 1), (newer, 3)):
        sign_numbered(release, by_digest, tag, sequence)
    for sequence in (50, 51, 52):
        push_junk(release.repository, f'{{"forged": {sequence}}}'.encode(), [claim(tag, str(sequence))])
    address, path = release.repository.split("/", 1)
    # The genuine claim of release 3 put behind 64 layers of padding, past what is read of a signature tag.
    padding = dict(put_blob(address, path, b"padding"), mediaType=SIGNATURE_LAYER)
    edit_signature_tag(release, newer, lambda layers: [padding] * 64 + layers)
    line = one_error_line(verify(release.reference(tag), release.public_key))
    assert "moved back" in line and "release 3" in line and newer.rpartition("@")[2][:19] in line, line

    edit_signature_tag(release, newer, lambda layers: layers[64:])
    sign_numbered(release, f"{release.repository}@{release.digest}", tag, 4)  # the tag's image is newest
    forged = unsigned_signature(address, path, claim(tag, "9"))
    edit_signature_tag(release, older, lambda layers: [*layers, forged])
    result = verify(release.reference(tag), release.public_key)
    assert result.returncode == 0, result.stderr
    assert f"newest: release 4 of {tag}" in result.stdout and "4 image(s) claiming" in result.stdout, result.stdout


def test_make_zstd_on_a_full_scratch_disk_ends_in_one_line_and_publishes_nothing(release, image, flavor, tmp_path):
    """The scratch disk fills while our layers are recompressed (here a file-size limit of 1 MiB stands in
    for it): one line that names the folder and what to do, and the list of what was pushed is unchanged."""
    directory, scratch = tmp_path / "release", tmp_path / "scratch"
    shutil.copytree(release.directory, directory)
    scratch.mkdir()
    pushed = next(directory.glob("pushed-*.txt"))
    before = pushed.read_text()
    name, tag = split_image_ref(image)
    limit = 1 << 20
    result = subprocess.run(["make", "-s", "--no-print-directory", "zstd", f"IMAGE={name}", f"TAG={tag}",
                             f"FLAVOR={flavor}", f"RELEASE_DIR={directory}"], cwd=REPO_ROOT,
                            env=dict(cosign_environment(), TMPDIR=str(scratch)), capture_output=True, text=True,
                            timeout=PUSH_TIMEOUT_S, check=False,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = one_error_line(result)
    assert "could not write our layers" in line and str(scratch) in line and "TMPDIR" in line, line
    assert pushed.read_text() == before


def edit_signature_tag(release: Release, by_digest: str, edit) -> None:
    """What a pusher without the key can do to a genuine signature tag: rewrite its layers with EDIT."""
    address, path = release.repository.split("/", 1)
    signature_tag = f"{by_digest.rpartition('@')[2].replace(':', '-')}.sig"
    manifest = registry_api(address, f"/v2/{path}/manifests/{signature_tag}", MANIFEST_TYPES)
    put_manifest(address, path, signature_tag, dict(manifest, layers=edit(manifest["layers"])))


def test_the_zstd_variant_keeps_the_base_layers_and_compresses_ours(release, image, labels):
    gzip_manifest = registry_api(release.registry, f"/v2/{release.repository.split('/', 1)[1]}/manifests/"
                                 f"{release.tags[0]}", MANIFEST_TYPES)
    zstd_manifest = registry_api(release.registry, f"/v2/{release.repository.split('/', 1)[1]}/manifests/"
                                 f"{release.tags[0]}-zstd", MANIFEST_TYPES)
    assert zstd_manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert zstd_manifest["config"]["digest"] == gzip_manifest["config"]["digest"], "the image id must not change"
    base_layers = len(json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                        labels["dev.pytorch-dev.base-image"]).stdout))
    pairs = list(zip(gzip_manifest["layers"], zstd_manifest["layers"], strict=True))
    for gzip_layer, zstd_layer in pairs[:base_layers]:
        assert zstd_layer["digest"] == gzip_layer["digest"] and zstd_layer["size"] == gzip_layer["size"]
    for gzip_layer, zstd_layer in pairs[base_layers:]:
        assert zstd_layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd"
        assert zstd_layer["digest"] != gzip_layer["digest"]
        url = f"http://{release.registry}/v2/{release.repository.split('/', 1)[1]}/blobs/{zstd_layer['digest']}"
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=0-3"}), timeout=HTTP_TIMEOUT_S) as blob:
            assert blob.read(4) == ZSTD_MAGIC
    for tag in release.tags:
        assert not registry_api(release.registry, f"/v2/{release.repository.split('/', 1)[1]}/manifests/{tag}",
                                MANIFEST_TYPES)["layers"][-1]["mediaType"].endswith("zstd"), "default tags stay gzip"


def test_the_zstd_variant_is_signed_and_pulls_into_the_engine_as_the_same_image(release, image):
    zstd_tag = release.reference(release.tags[0] + "-zstd")
    result = verify(zstd_tag, release.public_key)
    assert result.returncode == 0, result.stderr
    try:
        # The engine knows our gzip blobs, not the zstd ones: it downloads and decompresses these, and
        # checks each against the config's diff ids.
        docker("pull", zstd_tag, timeout=PUSH_TIMEOUT_S)
        assert docker("image", "inspect", "--format", "{{.Id}}", zstd_tag).stdout == \
            docker("image", "inspect", "--format", "{{.Id}}", image).stdout
    finally:
        docker("image", "rm", zstd_tag, check=False)


def local_derived(image: str, reference: str, marker: str, created: str = "") -> str:
    """A different image built here as REFERENCE: one more label, and with CREATED another build time."""
    labels = f"LABEL test={marker}\n" + (f"LABEL org.opencontainers.image.created={created}\n" if created else "")
    subprocess.run(["docker", "build", "--quiet", "--tag", reference, "-"], input=f"FROM {image}\n{labels}",
                   capture_output=True, text=True, timeout=300, check=True)
    return reference


def derived(image: str, reference: str, marker: str) -> str:
    """A different image pushed as REFERENCE; returns it by digest."""
    local_derived(image, reference, marker)
    try:
        output = docker("push", reference, timeout=PUSH_TIMEOUT_S).stdout
    finally:
        docker("image", "rm", reference, check=False)
    return f"{reference.rpartition(':')[0]}@{output.split('digest: ')[1].split()[0]}"


def test_sign_refuses_the_digests_another_build_of_the_tag_pushed(release, image, flavor, tmp_path):
    """`make build; make push; make build; make sign` on one day: the second build has the tag's name and its
    own SBOM, but what the first pushed is not it, and must not be attested with its SBOM and provenance."""
    name, tag = split_image_ref(image)
    rebuilt = f"{name}-rebuilt:{tag}"
    subprocess.run(["docker", "build", "--quiet", "--tag", rebuilt, "-"], input=f"FROM {image}\nLABEL test=rebuilt\n",
                   capture_output=True, text=True, timeout=300, check=True)
    directory = tmp_path / "release"
    shutil.copytree(release.directory, directory)  # the first build's pushed-<tag>.txt and provenance
    try:
        sbom = release_make("sbom", rebuilt, flavor, f"RELEASE_DIR={directory}")  # the second build's own
        assert sbom.returncode == 0, sbom.stderr
        signed = release_make("sign", rebuilt, flavor, f"COSIGN_KEY={release.key}", f"RELEASE_DIR={directory}")
    finally:
        docker("image", "rm", rebuilt, check=False)
    assert "was pushed from another build" in one_error_line(signed) and "signed " not in signed.stdout
