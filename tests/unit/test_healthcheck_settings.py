"""The image's HEALTHCHECK and compose's healthcheck are one probe with one timing. The image probes every
second while the container starts (Docker Engine 25+), so `up --wait` returns about a second after the
services answer; compose.yaml leaves that one setting to the image, because podman-compose turns
`start_interval` into a flag Podman 4 refuses. (tests/image/test_compose.py shows that Docker still takes
it from the image, and waits for the real container to turn healthy.)
"""
from __future__ import annotations

import re

import yaml

from tests.support import REPO_ROOT

FLAGS = {"interval": "interval", "timeout": "timeout", "start-period": "start_period",
         "start-interval": "start_interval", "retries": "retries"}


def dockerfile_healthcheck() -> dict[str, str]:
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = re.search(r"^HEALTHCHECK (.*)$", text, re.M).group(1)
    settings = dict(re.findall(r"--([a-z-]+)=(\S+)", line))
    return {FLAGS[flag]: value for flag, value in settings.items()} | {"test": line.split("CMD", 1)[1].strip()}


def compose_healthcheck() -> dict[str, str]:
    check = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())["services"]["dev"]["healthcheck"]
    return {key: str(value) for key, value in check.items() if key != "test"} | {"test": str(check["test"][1:])}


def test_the_image_and_compose_probe_the_same_way():
    image, compose = dockerfile_healthcheck(), compose_healthcheck()
    assert {key: value for key, value in image.items() if key not in ("test", "start_interval")} == \
        {key: value for key, value in compose.items() if key != "test"}
    assert "/usr/local/bin/healthcheck" in image["test"] and "/usr/local/bin/healthcheck" in compose["test"]


def test_the_image_probes_twice_a_second_while_starting_and_compose_leaves_that_to_it():
    assert dockerfile_healthcheck()["start_interval"] == "0.5s"
    assert "start_interval" not in compose_healthcheck()
