"""deploy/kubernetes/verify-image-policy.yaml: the Kyverno admission policy that lets only signed, attested
releases run. No cluster runs here, so the policy is held to the fields, enums and required keys of
Kyverno's published ClusterPolicy schema (kyverno.io/v1, as the CRD catalogue publishes it), encoded
below for the parts the policy uses, and to what `make sign` really attaches.

    make test PYTEST_ARGS="tests/release/test_release_policy.py"
"""
from __future__ import annotations

import re

import pytest
import yaml

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

POLICY = REPO_ROOT / "deploy" / "kubernetes" / "verify-image-policy.yaml"
# What tools/release/sign.py attaches (cosign's --type cyclonedx and slsaprovenance1).
ATTESTED_TYPES = {"https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"}

# The schema's properties per level (additionalProperties: false at each), its enums and required keys.
REKOR = {"ignoreTlog", "pubkey", "url"}
KEYLESS = {"additionalExtensions", "ctlog", "issuer", "issuerRegExp", "rekor", "roots", "subject", "subjectRegExp"}
KEYS = {"ctlog", "kms", "publicKeys", "rekor", "secret", "signatureAlgorithm"}
ENTRY = {"annotations", "attestor", "certificates", "keyless", "keys", "repository", "signatureAlgorithm"}
ATTESTOR = {"count", "entries"}
ATTESTATION = {"attestors", "conditions", "name", "predicateType", "type"}
VERIFY_IMAGE = {"additionalExtensions", "annotations", "attestations", "attestors", "cosignOCI11", "failureAction",
                "image", "imageReferences", "imageRegistryCredentials", "issuer", "key", "mutateDigest",
                "repository", "required", "roots", "skipImageReferences", "subject", "type", "useCache", "validate",
                "verifyDigest"}
RULE = {"celPreconditions", "context", "exclude", "generate", "imageExtractors", "match", "mutate", "name",
        "preconditions", "reportProperties", "skipBackgroundRequests", "validate", "verifyImages"}
RULE_REQUIRED = {"match", "name"}
MATCH = {"all", "any", "clusterRoles", "resources", "roles", "subjects"}
SPEC = {"admission", "applyRules", "background", "emitWarning", "failurePolicy", "generateExisting",
        "generateExistingOnPolicyUpdate", "mutateExistingOnPolicyUpdate", "rules", "schemaValidation",
        "useServerSideApply", "validationFailureAction", "validationFailureActionOverrides", "webhookConfiguration",
        "webhookTimeoutSeconds"}
ENUMS = {"failureAction": {"Audit", "Enforce"}, "type": {"Cosign", "SigstoreBundle", "Notary"}}
BOOLEANS = {"mutateDigest", "verifyDigest", "required", "background"}


def unknown(obj: dict, allowed: set[str], where: str) -> list[str]:
    return [f"{where}.{key}" for key in obj if key not in allowed]


def schema_violations(policy: dict) -> list[str]:
    problems = [] if policy.get("apiVersion") == "kyverno.io/v1" and policy.get("kind") == "ClusterPolicy" \
        else ["apiVersion/kind is not kyverno.io/v1 ClusterPolicy"]
    spec = policy["spec"]
    problems += unknown(spec, SPEC, "spec")
    for number, rule in enumerate(spec["rules"]):
        where = f"spec.rules[{number}]"
        problems += unknown(rule, RULE, where) + [f"{where} lacks {key}" for key in RULE_REQUIRED - set(rule)]
        problems += unknown(rule["match"], MATCH, f"{where}.match")
        for index, verify in enumerate(rule.get("verifyImages", [])):
            at = f"{where}.verifyImages[{index}]"
            problems += unknown(verify, VERIFY_IMAGE, at)
            problems += [f"{at}.{key}={verify[key]!r}" for key, allowed in ENUMS.items()
                         if key in verify and verify[key] not in allowed]
            problems += [f"{at}.{key} is not a boolean" for key in BOOLEANS & set(verify)
                         if not isinstance(verify[key], bool)]
            attestors = list(verify.get("attestors", []))
            for attestation in verify.get("attestations", []):
                problems += unknown(attestation, ATTESTATION, f"{at}.attestations")
                attestors += attestation.get("attestors", [])
            for attestor in attestors:
                problems += unknown(attestor, ATTESTOR, f"{at}.attestors")
                for entry in attestor["entries"]:
                    problems += unknown(entry, ENTRY, f"{at}.entries")
                    for kind, allowed in (("keyless", KEYLESS), ("keys", KEYS)):
                        problems += unknown(entry.get(kind, {}), allowed, f"{at}.{kind}")
                        problems += unknown(entry.get(kind, {}).get("rekor", {}), REKOR, f"{at}.{kind}.rekor")
    return problems


def verify_images() -> list[dict]:
    return [verify for rule in yaml.safe_load(POLICY.read_text())["spec"]["rules"] for verify in rule["verifyImages"]]


def test_the_policy_keeps_to_kyvernos_schema():
    assert schema_violations(yaml.safe_load(POLICY.read_text())) == []


def test_the_schema_check_rejects_a_misspelt_field():
    policy = yaml.safe_load(POLICY.read_text())
    policy["spec"]["rules"][0]["verifyImages"][0]["atestations"] = []
    policy["spec"]["rules"][0]["verifyImages"][0]["failureAction"] = "Block"
    assert len(schema_violations(policy)) == 2


def test_the_policy_enforces_signature_digest_and_both_attestations_of_our_image():
    for verify in verify_images():
        assert verify["failureAction"] == "Enforce" and verify["required"] and verify["verifyDigest"]
        assert verify["mutateDigest"], "the tag must be replaced by the digest Kyverno verified"
        assert all(re.match(r"[a-z0-9.-]+/[^/]+/pytorch-dev[:@]\*$", ref) for ref in verify["imageReferences"])
        assert {attestation["type"] for attestation in verify["attestations"]} == ATTESTED_TYPES
        identities = [entry["keyless"] for attestor in verify["attestors"] + [a for att in verify["attestations"]
                                                                              for a in att["attestors"]]
                      for entry in attestor["entries"]]
        assert all(identity["issuer"] == "https://token.actions.githubusercontent.com" for identity in identities)
        assert all(identity["subjectRegExp"].endswith("/\\.github/workflows/image\\.yml@refs/tags/v.*$")
                   for identity in identities), "only the release workflow, on a version tag, may sign"
