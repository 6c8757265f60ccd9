"""promtool on deploy/monitoring/prometheus: the configuration and the rules are valid, and the rules'
unit tests pass, with a test that makes each alert fire and one that keeps it quiet.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_rules.py
"""
from __future__ import annotations

import pytest
import yaml

from tests.support.prometheus_server import CONFIG_DIR, promtool

pytestmark = pytest.mark.tier("landing")

RULES = CONFIG_DIR / "rules" / "training.rules.yml"
RULE_TESTS = CONFIG_DIR / "tests" / "training.rules.test.yml"
MOUNTS = {CONFIG_DIR: "/etc/prometheus"}


def alert_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_promtool_accepts_the_configuration_and_its_rules(prometheus_image):
    result = promtool("check", "config", "/etc/prometheus/prometheus.yml", mounts=MOUNTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout  # the rules glob matched the rules file


def test_promtool_accepts_the_rules(prometheus_image):
    result = promtool("check", "rules", "/etc/prometheus/rules/training.rules.yml", mounts=MOUNTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout


def test_the_rule_unit_tests_pass(prometheus_image):
    result = promtool("test", "rules", "training.rules.test.yml", mounts=MOUNTS, workdir="/etc/prometheus/tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case_and_says_what_to_do():
    fired, quiet = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fired == alert_names() and quiet == alert_names(), (fired, quiet)
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule.get("for"), f"{rule['alert']} has no for: duration"
            assert ": " in rule["annotations"]["summary"], f"{rule['alert']}'s summary does not say what to do"


@pytest.mark.tier("full")
def test_the_unit_tests_catch_a_broken_rule(prometheus_image, tmp_path):
    # The unit tests must be able to fail: a rule with a threshold nobody reaches leaves its alert quiet.
    broken = tmp_path / "prometheus"
    (broken / "rules").mkdir(parents=True)
    (broken / "tests").mkdir()
    (broken / "rules" / RULES.name).write_text(RULES.read_text().replace("DCGM_FI_DEV_GPU_TEMP > 85",
                                                                         "DCGM_FI_DEV_GPU_TEMP > 850"))
    (broken / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    for path in [broken, *broken.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    result = promtool("test", "rules", RULE_TESTS.name, mounts={broken: "/etc/prometheus"},
                      workdir="/etc/prometheus/tests")
    assert result.returncode != 0
    assert "alertname: GpuTooHot" in result.stdout + result.stderr
