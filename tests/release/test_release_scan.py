"""The vulnerability gate, `make scan`, on the built image: every outcome, against stand-ins served on
127.0.0.1 in the formats of the real sources (OSV's API; an apt repository for Debian's security suite),
since no public vulnerability service is reachable here.

    make test PYTEST_ARGS="tests/release/test_release_scan.py"

The gate must never pass without having looked: an unreachable service, a service that leaves packages
unanswered, or an expired allowlist entry each fail it.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT
from tests.support.containers import free_port
from tests.support.release import make, split_image_ref
from tests.release.helpers.vulnerability_data import OsvData, apt_repository, osv_service, write_flat_apt_repository

pytestmark = pytest.mark.tier("full")

TODAY = datetime.date.today()


@pytest.fixture(scope="module")
def sbom_packages(image: str, flavor: str) -> dict[str, str]:
    """name -> version of the image's Python packages, from the SBOM `make sbom` writes for it."""
    written = make("sbom", image, flavor)
    assert written.returncode == 0, written.stderr
    sbom = json.loads((REPO_ROOT / written.stdout.strip().splitlines()[-1]).read_text())
    return {c["name"].lower(): c["version"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:pypi/")}


@pytest.fixture
def osv() -> Iterator[tuple[OsvData, str]]:
    data = OsvData()
    with osv_service(data) as url:
        yield data, url


@pytest.fixture(scope="module")
def security_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[pathlib.Path, str]]:
    """An apt repository in place of the security suite: empty unless a test lists an update in it."""
    folder = tmp_path_factory.mktemp("security-suite")
    write_flat_apt_repository(folder, {})
    with apt_repository(folder) as url:
        yield folder, f"deb [trusted=yes] {url}/ ./"


def scan(image: str, flavor: str, osv_url: str, source: str, allowlist: pathlib.Path | None = None,
         **environment: str) -> subprocess.CompletedProcess:
    variables = {"OSV_URL": osv_url, "DEBIAN_SECURITY_SOURCE": source, **environment}
    if allowlist:
        variables["SCAN_ALLOWLIST"] = str(allowlist)
    return make("scan", image, flavor, environment=variables, timeout=600)


def allowlist(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "allowlist.toml"
    path.write_text(text)
    return path


def verdict(result: subprocess.CompletedProcess) -> str:
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


@pytest.mark.tier("landing")
def test_a_clean_image_passes_and_says_how_many_packages_it_checked(image, flavor, sbom_packages, osv, security_suite):
    result = scan(image, flavor, osv[1], security_suite[1])
    assert result.returncode == 0, result.stdout + result.stderr
    assert verdict(result).startswith("scan: passed:") and f"{len(sbom_packages)} Python packages" in verdict(result)


@pytest.mark.tier("landing")
def test_a_high_finding_in_an_installed_package_fails(image, flavor, sbom_packages, osv, security_suite):
    data, url = osv
    data.add("GHSA-test-high-0001", "jinja2", sbom_packages["jinja2"], "HIGH")
    result = scan(image, flavor, url, security_suite[1])
    assert result.returncode != 0, result.stdout + result.stderr
    assert any("GHSA-test-high-0001" in line and "FAIL" in line for line in result.stdout.splitlines()), result.stdout
    assert verdict(result).startswith("scan: FAILED: 1 finding")


def test_a_finding_without_severity_counts_and_one_below_the_threshold_does_not(image, flavor, sbom_packages, osv,
                                                                                 security_suite):
    data, url = osv
    data.add("GHSA-test-low-0001", "torch", sbom_packages["torch"], "LOW")
    assert scan(image, flavor, url, security_suite[1]).returncode == 0
    assert "GHSA-test-low-0001" in scan(image, flavor, url, security_suite[1], SCAN_SEVERITY="LOW").stdout
    data.add("PYSEC-test-unrated-1", "torch", sbom_packages["torch"], None)
    result = scan(image, flavor, url, security_suite[1])
    assert result.returncode != 0 and "UNKNOWN  PYSEC-test-unrated-1" in result.stdout, result.stdout


def test_an_allowlisted_finding_passes_until_its_review_date(image, flavor, sbom_packages, osv, security_suite,
                                                             tmp_path):
    data, url = osv
    data.add("GHSA-test-high-0002", "jinja2", sbom_packages["jinja2"], "CRITICAL")
    future = allowlist(tmp_path, f'[[allow]]\nid = "GHSA-test-high-0002"\nreason = "not reachable in our use"\n'
                                 f"review_by = {TODAY + datetime.timedelta(days=30)}\n")
    result = scan(image, flavor, url, security_suite[1], future)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "allowed until" in result.stdout and "not reachable in our use" in result.stdout


def test_an_expired_allowlist_entry_fails_in_one_line(image, flavor, sbom_packages, osv, security_suite, tmp_path):
    expired = allowlist(tmp_path, f'[[allow]]\nid = "GHSA-test-old-0003"\nreason = "was fine once"\n'
                                  f"review_by = {TODAY - datetime.timedelta(days=1)}\n")
    result = scan(image, flavor, osv[1], security_suite[1], expired)
    assert result.returncode != 0, result.stdout
    problems = [line for line in result.stdout.splitlines() if line.startswith("allowlist:")]
    assert len(problems) == 1 and "expired on" in problems[0], result.stdout


def test_an_allowlist_entry_without_reason_or_date_fails(image, flavor, osv, security_suite, tmp_path):
    vague = allowlist(tmp_path, '[[allow]]\nid = "GHSA-test-0004"\n')
    result = scan(image, flavor, osv[1], security_suite[1], vague)
    assert result.returncode != 0 and "needs id, reason and review_by" in result.stdout, result.stdout


def test_an_unreachable_service_fails_in_one_line_and_never_passes(image, flavor, security_suite):
    closed = f"http://127.0.0.1:{free_port()}"  # reserved and never listened on
    result = scan(image, flavor, closed, security_suite[1])
    assert result.returncode != 0, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot be reached" in errors[0], result.stderr
    assert "passed" not in result.stdout

    not_run = scan(image, flavor, closed, security_suite[1], SCAN_UNREACHABLE="not-run")
    assert not_run.returncode != 0 and verdict(not_run).startswith("scan: not run:"), not_run.stdout
    assert "passed" not in not_run.stdout


def test_an_sbom_taken_from_another_image_of_the_same_release_tag_is_refused(image, flavor, osv, security_suite,
                                                                               tmp_path):
    """Two builds of one commit on one day share the release tag the SBOM's file is named after: the scan
    must gate the image it names, not whichever build last wrote the file."""
    other = f"{split_image_ref(image)[0]}:other-build-{flavor}"
    subprocess.run(["docker", "build", "--quiet", "--tag", other, "-"], input=f"FROM {image}\nLABEL test=other-build\n",
                   capture_output=True, text=True, timeout=300, check=True)
    try:
        written = make("sbom", other, flavor, f"RELEASE_DIR={tmp_path}")
        assert written.returncode == 0, written.stderr
        result = make("scan", image, flavor, f"RELEASE_DIR={tmp_path}",
                      environment={"OSV_URL": osv[1], "DEBIAN_SECURITY_SOURCE": security_suite[1]})
    finally:
        subprocess.run(["docker", "image", "rm", other], capture_output=True, timeout=120, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "was written for image" in errors[0] and "make sbom" in errors[0], result.stderr
    assert "passed" not in result.stdout, result.stdout


def test_a_service_that_leaves_packages_unanswered_fails(image, flavor, osv, security_suite):
    """The false green of a scanner that skips what it could not look up: here it is a failure."""
    data, url = osv
    data.drop_answers = 1
    result = scan(image, flavor, url, security_suite[1])
    assert result.returncode != 0 and "answered" in result.stderr, result.stdout + result.stderr


def failing_debian_updates(image: str, flavor: str, osv_url: str, security_suite: tuple[pathlib.Path, str],
                           packages: dict[str, str], depends: dict[str, str] | None = None) -> set[str]:
    """The packages the scan fails on while the security suite lists PACKAGES (with DEPENDS); the scan
    must fail. The suite is emptied again after."""
    if flavor != "cpu":
        pytest.skip("the Debian part of the scan is for the Debian-based CPU flavor")
    folder, source = security_suite
    write_flat_apt_repository(folder, packages, depends)
    try:
        result = scan(image, flavor, osv_url, source)
    finally:
        write_flat_apt_repository(folder, {})
    assert result.returncode != 0, result.stdout + result.stderr
    return {line.split()[2] for line in result.stdout.splitlines()
            if len(line.split()) > 3 and line.split()[1].startswith("DEBIAN-SECURITY-UPDATE:") and line.endswith("FAIL")}


def test_a_pending_debian_security_update_fails(image, flavor, osv, security_suite):
    assert failing_debian_updates(image, flavor, osv[1], security_suite, {"tini": "99.0-1"}) == {"tini"}


def test_a_security_update_that_needs_a_new_package_fails(image, flavor, osv, security_suite):
    """`apt-get upgrade` keeps such an update back and shows nothing: the gate counts what a full upgrade
    installs, the update and the new package it pulls in."""
    assert failing_debian_updates(image, flavor, osv[1], security_suite, {"tini": "99.0-1", "libtini-new1": "99.0-1"},
                                  depends={"tini": "libtini-new1"}) == {"tini", "libtini-new1"}


def test_a_security_update_apt_would_keep_back_still_fails(image, flavor, osv, security_suite):
    """An update no upgrade can install here (it needs a package the suite lacks) is pending all the same."""
    assert failing_debian_updates(image, flavor, osv[1], security_suite, {"tini": "99.0-1"},
                                  depends={"tini": "libnowhere-to-be-found9"}) == {"tini"}


def test_an_unreachable_debian_security_suite_fails_in_one_line(image, flavor, osv):
    if flavor != "cpu":
        pytest.skip("the Debian part of the scan is for the Debian-based CPU flavor")
    result = scan(image, flavor, osv[1], f"deb http://127.0.0.1:{free_port()}/ ./")
    assert result.returncode != 0, result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")][0].count("cannot be reached") == 1
