"""The one place the release tools run cosign: its binary, its pinned major version, its flags.

Signing and verifying use cosign 2.x. cosign 3 stores signatures and attestations as sigstore bundles
(OCI referrers) by default, which cosign 2.x cannot find: a release signed with one and checked with the
other reads as unsigned. So the tools refuse any other major (a Debian build reports `devel`: allowed).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from command_line import ReleaseError

PINNED_MAJOR = "2"
# What cosign's errors name when the public Sigstore services (the Rekor log, Fulcio, their TUF root)
# cannot be reached: an offline machine, or a network that lets only a private registry through.
PUBLIC_SIGSTORE = re.compile(r"sigstore\.dev|rekor|fulcio|\btuf\b", re.IGNORECASE)
COSIGN_TIMEOUT_S = 300
# The annotations every signature carries: the tag it was pushed under (verify.py checks the tag asked for),
# and the release's place in the order of the repository's releases (release_order.py).
TAG_ANNOTATION = "dev.pytorch-dev.tag"
SEQUENCE_ANNOTATION = "dev.pytorch-dev.sequence"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
# What `cosign verify` says of an image with no signature, and of one whose signatures do not verify with
# the key or identity given; any other failure (a registry that does not answer) is neither.
UNSIGNED = re.compile(r"no signatures found|manifest.unknown", re.IGNORECASE)
NOT_THIS_KEY = re.compile(r"verification error|invalid signature|no matching signatures", re.IGNORECASE)
# What shows cosign could not ask (the registry or the transparency log did not answer): that proves nothing
# about a signature, even where cosign reports it under "no matching signatures".
UNANSWERED = re.compile(r"dial tcp|connection (refused|reset)|i/o timeout|no such host|tls handshake|"
                        r"status code 5\d\d|giving up after", re.IGNORECASE)


def cosign_binary() -> str:
    binary = os.environ.get("COSIGN") or "cosign"
    path = shutil.which(binary)
    if not path:
        raise ReleaseError(f"cosign is not installed ({binary} is not on PATH): run `bash .ci/install-cosign.sh` "
                           f"(as root), or install cosign {PINNED_MAJOR}.x and set COSIGN=path/to/cosign")
    version = subprocess.run([path, "version"], capture_output=True, text=True, timeout=60, check=False).stdout
    match = re.search(r"GitVersion:\s*v?(\d+)\.", version)
    if match and match.group(1) != PINNED_MAJOR:
        raise ReleaseError(f"{path} is cosign {match.group(1)}.x; releases are signed and verified with cosign "
                           f"{PINNED_MAJOR}.x only (cosign 3 stores signatures where 2.x cannot read them)")
    return path


def transparency_log_flags(verifying: bool) -> list[str]:
    """COSIGN_TLOG=0 keeps signatures out of the public transparency log (Rekor): for a private registry,
    or a machine that cannot reach it, like the tests'. The default uploads to it and checks it."""
    if os.environ.get("COSIGN_TLOG", "1") != "0":
        return []
    return ["--insecure-ignore-tlog=true"] if verifying else ["--tlog-upload=false"]


def run_cosign(*args: str) -> subprocess.CompletedProcess:
    """Runs cosign (COSIGN_PASSWORD reaches it through the environment); never raises on its exit code, and
    one that hangs (a registry that stops answering) ends in one line."""
    try:
        return subprocess.run([cosign_binary(), *args], capture_output=True, text=True, timeout=COSIGN_TIMEOUT_S,
                              check=False, env=dict(os.environ, COSIGN_YES="true"))
    except subprocess.TimeoutExpired:
        raise ReleaseError(f"cosign {args[0]} {args[-1]} did not finish in {COSIGN_TIMEOUT_S} s: check that the "
                           f"registry answers, then run it again") from None


def last_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {result.returncode}"


def failure_line(what: str, result: subprocess.CompletedProcess) -> str:
    """The one line for a failed cosign command: its last error line, and, where the public Sigstore
    services could not be reached while the transparency log is on, the switch that signs without them."""
    line = f"cosign could not {what}: {last_error_line(result)}"
    if transparency_log_flags(verifying=False) or not PUBLIC_SIGSTORE.search(result.stderr + result.stdout):
        return line
    return (f"{line}; the public Sigstore services cannot be reached from here: for a private registry or an "
            "offline machine, sign with a key pair and COSIGN_TLOG=0 (docs/releases.md)")


def identity_flags(public_key: str) -> list[str]:
    """The flags that verify a release's signatures: its public key, or for a keyless release the signing
    workflow's identity (COSIGN_IDENTITY, a regular expression) and issuer."""
    if public_key:
        if not os.path.isfile(public_key):
            raise ReleaseError(f"COSIGN_PUB={public_key} is not a file: give the release's public key (cosign.pub)")
        return ["--key", public_key]
    identity = os.environ.get("COSIGN_IDENTITY", "")
    if not identity:
        raise ReleaseError("give COSIGN_PUB=cosign.pub for a key-signed release, or COSIGN_IDENTITY=<workflow "
                           "identity regexp> for a keyless one")
    return ["--certificate-identity-regexp", identity,
            "--certificate-oidc-issuer", os.environ.get("COSIGN_ISSUER", GITHUB_ISSUER)]


def run_verify(image: str, flags: list[str]) -> subprocess.CompletedProcess:
    """`cosign verify` of IMAGE with FLAGS; on success its output is the payloads it verified, as JSON."""
    return run_cosign("verify", *flags, *transparency_log_flags(verifying=True), "--output", "json", image)


def verified_payloads(result: subprocess.CompletedProcess, image: str) -> list[dict]:
    """The payloads a successful `cosign verify` of IMAGE printed."""
    try:
        payloads = json.loads(result.stdout)
    except ValueError:
        payloads = None
    if not isinstance(payloads, list) or not payloads or not all(isinstance(item, dict) for item in payloads):
        raise ReleaseError(f"cosign verified {image} but printed no signature payloads: check `cosign version` "
                           f"is {PINNED_MAJOR}.x")
    return payloads


def why_unverified(result: subprocess.CompletedProcess) -> str:
    """Why a `cosign verify` failed: "unsigned" (no signature), "another key" (none verifies with the key or
    identity given), or "" where the failure proves neither (cosign could not ask the registry or the log)."""
    detail = result.stderr + result.stdout
    if UNANSWERED.search(detail):
        return ""
    if UNSIGNED.search(detail):
        return "unsigned"
    return "another key" if NOT_THIS_KEY.search(detail) else ""


def payloads_that_verify(image: str, flags: list[str]) -> list[dict] | None:
    """The payloads of IMAGE's signatures that verify with FLAGS; None when it has no signature, or none that
    verifies (made without the key). Any other failure of cosign is one line: it proves nothing either way."""
    result = run_verify(image, flags)
    if result.returncode == 0:
        return verified_payloads(result, image)
    if why_unverified(result):
        return None
    raise ReleaseError(failure_line(f"verify {image}", result))
