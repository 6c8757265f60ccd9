#!/usr/bin/env python3
"""The release's vulnerability gate: the image's Python packages against OSV, and for the Debian-based
CPU flavor the Debian security updates it lacks. It cannot pass without having looked.

    python3 tools/release/scan.py IMAGE RELEASE_DIR     # or: make scan FLAVOR=cpu  (after make sbom)

- Python: every pkg:pypi package of the image's SBOM (`make sbom`) is sent to OSV's API (OSV_URL, by
  default the public https://api.osv.dev) and each answer is required: a package without one, an error,
  a malformed reply or an empty inventory is a failure, never "no known vulnerabilities" (the false green
  a scanner gives when its service is unreachable and it skips every package).
- Debian (CPU flavor): in the image, against its release's security suite (DEBIAN_SECURITY_URL, or a whole
  apt source line in DEBIAN_SECURITY_SOURCE for a mirror of your own), every package a full upgrade
  (`apt-get --simulate dist-upgrade`) would install or update, and every installed package the suite has a
  newer version of even where apt would keep it back (`apt list --upgradable`). Each is a finding (apt gives
  it no severity, so it counts at any threshold). A plain `apt-get upgrade` is not enough: it keeps back an
  update that needs a new package, and the gate would never see it.
- A finding fails at or above SCAN_SEVERITY (LOW, MODERATE, HIGH, CRITICAL; default HIGH; a finding
  whose data gives no severity counts as at the threshold) unless SCAN_ALLOWLIST lists its id with a
  reason and a review-by date (tools/release/scan-allowlist.toml). An entry past its date fails.

Exit status: 0 passed; 1 findings or an invalid or expired allowlist; 2 could not run (one `error:`
line). SCAN_UNREACHABLE=not-run turns "the data cannot be reached" into one `scan: not run:` line and
exit status 3, for a job that must not block on the network: still never a pass.
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request

from sbom import read_sbom_of
from command_line import ReleaseError
from tags import FLAVOR_LABEL, read_labels

SEVERITIES = ["LOW", "MODERATE", "HIGH", "CRITICAL"]
SEVERITY_ALIASES = {"MEDIUM": "MODERATE"}
DEFAULT_OSV_URL = "https://api.osv.dev"
DEFAULT_DEBIAN_SECURITY_URL = "http://deb.debian.org/debian-security"
BATCH = 500
TIMEOUT_S = 60
EXIT_FINDINGS, EXIT_ERROR, EXIT_NOT_RUN = 1, 2, 3


class Unreachable(Exception):
    """The vulnerability data could not be had: the scan did not run."""


def osv_post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    return _osv_answer(request)


def _osv_answer(request: urllib.request.Request) -> dict:
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except (OSError, ValueError) as error:  # URLError, HTTPError, timeouts, a reply that is not JSON
        raise Unreachable(f"{request.full_url}: {error}") from None
    if not isinstance(answer, dict):
        raise Unreachable(f"{request.full_url} answered something that is not OSV's format")
    return answer


def python_packages(sbom: dict) -> list[tuple[str, str, str]]:
    """(name, version, purl) of every Python package of the SBOM."""
    return [(c["name"], c["version"], c["purl"]) for c in sbom.get("components", [])
            if c.get("purl", "").startswith("pkg:pypi/")]


def vulnerability_ids(osv_url: str, packages: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """purl -> OSV ids; every package must have been answered, page by page."""
    found: dict[str, list[str]] = {}
    for start in range(0, len(packages), BATCH):
        chunk = packages[start:start + BATCH]
        queries = [{"package": {"purl": purl}} for _, _, purl in chunk]
        while queries:
            results = osv_post(f"{osv_url}/v1/querybatch", {"queries": queries}).get("results")
            if not isinstance(results, list) or len(results) != len(queries):
                raise Unreachable(f"{osv_url} answered {len(results or [])} of {len(queries)} queries")
            next_queries = []
            for query, result in zip(queries, results):
                purl = query["package"]["purl"]
                found.setdefault(purl, []).extend(vuln["id"] for vuln in (result or {}).get("vulns", []))
                if (result or {}).get("next_page_token"):
                    next_queries.append({**query, "page_token": result["next_page_token"]})
            queries = next_queries
    missing = [purl for _, _, purl in packages if purl not in found]
    if missing:
        raise Unreachable(f"{osv_url} gave no answer for {len(missing)} packages (first {missing[0]})")
    return found


def severity_of(vulnerability: dict) -> str:
    """The advisory's own rating (GitHub's LOW..CRITICAL), else UNKNOWN."""
    rating = str((vulnerability.get("database_specific") or {}).get("severity", "")).upper()
    for affected in vulnerability.get("affected", []):
        rating = rating or str((affected.get("ecosystem_specific") or {}).get("severity", "")).upper()
    rating = SEVERITY_ALIASES.get(rating, rating)
    return rating if rating in SEVERITIES else "UNKNOWN"


def python_findings(osv_url: str, sbom: dict) -> tuple[int, list[dict]]:
    packages = python_packages(sbom)
    if not packages:
        raise ReleaseError("the SBOM lists no Python package: nothing would be scanned; run `make sbom` again")
    ids = vulnerability_ids(osv_url, packages)
    findings = []
    for name, version, purl in packages:
        for vuln_id in dict.fromkeys(ids[purl]):
            vulnerability = _osv_answer(urllib.request.Request(f"{osv_url}/v1/vulns/{vuln_id}"))
            findings.append({"id": vuln_id, "aliases": vulnerability.get("aliases", []), "package": name,
                             "version": version, "severity": severity_of(vulnerability),
                             "summary": vulnerability.get("summary", "")})
    return len(packages), findings


def debian_security_updates(image: str, security_url: str) -> list[dict]:
    """Every package the image's release's security suite would install or update."""
    # Two listings, since neither alone is the whole truth: the simulated full upgrade names the new
    # packages an update pulls in (NEW), and `apt list --upgradable` names each installed package with a
    # newer version, also one the resolver would keep back (UPDATE).
    script = r"""set -e
. /etc/os-release
if [ -n "$2" ]; then echo "$2"; else echo "deb $1 ${VERSION_CODENAME}-security main"; fi >/tmp/security.list
opts="-o Dir::Etc::SourceList=/tmp/security.list -o Dir::Etc::SourceParts=- -o Acquire::Retries=0 -o Acquire::http::Timeout=20"
if ! apt-get $opts update -qq >/tmp/update.log 2>&1 || grep -q '^[WE]:' /tmp/update.log; then
  echo "UNREACHABLE $(grep -m1 '^[WE]:' /tmp/update.log)"; exit 0
fi
apt-get $opts --simulate --quiet dist-upgrade 2>/dev/null \
  | sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/NEW \1 (none) \2/p'
apt $opts list --upgradable 2>/dev/null \
  | sed -n 's|^\([^/]*\)/[^ ]* \([^ ]*\) [^ ]* \[upgradable from: \([^]]*\)\]$|UPDATE \1 \3 \2|p'
"""
    result = subprocess.run(["docker", "run", "--rm", "--user=0", "--network=host", "--entrypoint=bash", image,
                             "-c", script, "scan", security_url, os.environ.get("DEBIAN_SECURITY_SOURCE", "")],
                            capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise ReleaseError(f"could not list the Debian updates of {image}: {result.stderr.strip()[-300:]}")
    if result.stdout.startswith("UNREACHABLE"):
        where = os.environ.get("DEBIAN_SECURITY_SOURCE") or security_url
        raise Unreachable(f"{where}: {result.stdout.split(' ', 1)[1].strip()}")
    pending = {name: (kind, installed, candidate)
               for kind, name, installed, candidate in (line.split() for line in result.stdout.splitlines())}
    return [{"id": f"DEBIAN-SECURITY-UPDATE:{name}", "aliases": [], "package": name, "version": installed,
             "severity": "UNKNOWN",
             "summary": (f"Debian security update to {candidate} not installed" if kind == "UPDATE" else
                         f"new package {candidate} that a Debian security update needs")}
            for name, (kind, installed, candidate) in sorted(pending.items())]


def read_allowlist(path: pathlib.Path, today: datetime.date) -> tuple[dict[str, dict], list[str]]:
    """id -> entry of the allowlist, and one problem line per invalid or expired entry."""
    if not path.is_file():
        raise ReleaseError(f"SCAN_ALLOWLIST={path} does not exist: give the allowlist file (an empty one allows nothing)")
    try:
        entries = tomllib.loads(path.read_text()).get("allow", [])
    except tomllib.TOMLDecodeError as error:
        raise ReleaseError(f"{path} is not valid TOML: {error}") from None
    allowed, problems = {}, []
    for number, entry in enumerate(entries, 1):
        review_by = entry.get("review_by")
        if not entry.get("id") or not str(entry.get("reason", "")).strip() or not isinstance(review_by, datetime.date):
            problems.append(f"{path} entry {number} ({entry.get('id', 'no id')}) needs id, reason and "
                            f"review_by = YYYY-MM-DD")
        elif review_by < today:
            problems.append(f"{path} entry {entry['id']} expired on {review_by}: review it, then renew its "
                            f"review_by or remove it")
        else:
            allowed[entry["id"]] = entry
    return allowed, problems


def at_or_above(severity: str, threshold: str) -> bool:
    return severity == "UNKNOWN" or SEVERITIES.index(severity) >= SEVERITIES.index(threshold)


def scan(image: str, release_dir: str) -> int:
    threshold = SEVERITY_ALIASES.get(os.environ.get("SCAN_SEVERITY", "HIGH").upper(),
                                     os.environ.get("SCAN_SEVERITY", "HIGH").upper())
    if threshold not in SEVERITIES:
        raise ReleaseError(f"SCAN_SEVERITY={threshold} is not one of {', '.join(SEVERITIES)}")
    allowlist = pathlib.Path(os.environ.get("SCAN_ALLOWLIST") or "tools/release/scan-allowlist.toml")
    allowed, problems = read_allowlist(allowlist, datetime.date.today())
    labels = read_labels(image)
    _, sbom = read_sbom_of(image, pathlib.Path(release_dir), labels)
    osv_url = (os.environ.get("OSV_URL") or DEFAULT_OSV_URL).rstrip("/")
    scanned, findings = python_findings(osv_url, sbom)
    sources = f"{scanned} Python packages (OSV at {osv_url})"
    if labels.get(FLAVOR_LABEL) == "cpu":
        security_url = os.environ.get("DEBIAN_SECURITY_URL") or DEFAULT_DEBIAN_SECURITY_URL
        findings += debian_security_updates(image, security_url)
        sources += f" and Debian security updates ({os.environ.get('DEBIAN_SECURITY_SOURCE') or security_url})"
    failing = 0
    for finding in findings:
        if not at_or_above(finding["severity"], threshold):
            continue
        entry = next((allowed[i] for i in [finding["id"], *finding["aliases"]] if i in allowed), None)
        verdict = f"allowed until {entry['review_by']}: {entry['reason']}" if entry else "FAIL"
        failing += entry is None
        print(f"{finding['severity']:8} {finding['id']} {finding['package']} {finding['version']}  {verdict}")
    for problem in problems:
        print(f"allowlist: {problem}")
    if failing or problems:
        print(f"scan: FAILED: {failing} finding(s) at or above {threshold} not allowed, {len(problems)} allowlist "
              f"problem(s); checked {sources}")
        return EXIT_FINDINGS
    print(f"scan: passed: no finding at or above {threshold} outside the allowlist; checked {sources}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: scan.py IMAGE RELEASE_DIR", file=sys.stderr)
        return EXIT_ERROR
    try:
        return scan(argv[1], argv[2])
    except Unreachable as error:
        if os.environ.get("SCAN_UNREACHABLE") == "not-run":
            print(f"scan: not run: the vulnerability data cannot be reached ({error}); nothing was checked")
            return EXIT_NOT_RUN
        print(f"error: the vulnerability data cannot be reached ({error}): the scan did not run, so nothing is "
              f"known to be safe; fix the network or OSV_URL, or set SCAN_UNREACHABLE=not-run", file=sys.stderr)
        return EXIT_ERROR
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv))
