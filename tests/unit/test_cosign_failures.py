"""The one line a failed cosign command ends in (tools/release/cosign_cli.py): where the public Sigstore
services cannot be reached with the transparency log on, it names COSIGN_TLOG=0, the switch for a private
registry or an offline machine. (tests/release/test_release_signing.py signs for real, offline.)"""
from __future__ import annotations

import subprocess

import pytest
from cosign_cli import failure_line, why_unverified

# What cosign 2.5 printed here, with no route to the public log (measured on this project's machines).
OFFLINE = ('error during command execution: signing [127.0.0.1:5000/tiny@sha256:0a]: signing digest: Post '
           '"https://rekor.sigstore.dev/api/v1/log/entries": POST https://rekor.sigstore.dev/api/v1/log/entries giving '
           'up after 4 attempt(s): Post "https://rekor.sigstore.dev/api/v1/log/entries": dial tcp: lookup '
           'rekor.sigstore.dev on 10.255.255.53:53: no such host\n')
REGISTRY_DOWN = 'Error: signing [127.0.0.1:5000/x@sha256:0a]: GET http://127.0.0.1:5000/v2/: connection refused\n'


def failed(stderr: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["cosign", "sign"], 1, "", stderr)


def test_an_unreachable_transparency_log_names_the_switch(monkeypatch):
    monkeypatch.delenv("COSIGN_TLOG", raising=False)
    line = failure_line("sign REF", failed(OFFLINE))
    assert line.startswith("cosign could not sign REF: error during command execution: signing") and "no such host" in line
    assert "COSIGN_TLOG=0" in line and "\n" not in line


@pytest.mark.parametrize(("tlog", "stderr"), [("0", OFFLINE), ("1", REGISTRY_DOWN)])
def test_other_failures_keep_cosigns_line_alone(monkeypatch, tlog, stderr):
    monkeypatch.setenv("COSIGN_TLOG", tlog)
    line = failure_line("sign REF", failed(stderr))
    assert "COSIGN_TLOG" not in line and line.endswith(stderr.strip())


@pytest.mark.parametrize(("stderr", "why"), [
    ("Error: no signatures found\n", "unsigned"),
    ("Error: GET http://127.0.0.1:5000/v2/x/manifests/sha256-0a.sig: MANIFEST_UNKNOWN: manifest unknown\n", "unsigned"),
    ("Error: no matching signatures: invalid signature when validating ASN.1 encoded signature\n", "another key"),
    # cosign puts each signature's own error under "no matching signatures", an unanswered log's too.
    (f"Error: no matching signatures: {OFFLINE}", ""),
    (REGISTRY_DOWN, ""),
])
def test_a_failed_verify_says_unsigned_or_another_key_only_where_cosign_could_ask(stderr, why):
    assert why_unverified(subprocess.CompletedProcess(["cosign", "verify"], 1, "", stderr)) == why
