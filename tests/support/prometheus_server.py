"""A real Prometheus for the tests: Debian's package in a small image (prometheus_image/), run as a
container on a docker network beside the trainers, and promtool from the same image.

The server runs the repository's deploy/monitoring/prometheus configuration, copied with the intervals
shortened from 15 s to 1 s so a test sees dozens of samples within seconds; everything else (scrape
jobs, service discovery, rules) is the file users run.
"""
from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
import uuid

import requests
import yaml

from tests.support import HTTP_TIMEOUT_S, REPO_ROOT, SETTLES_S
from tests.support.containers import LIVE_CONTAINERS, Container, docker
from tests.support.waiting import wait_until

PROMETHEUS_IMAGE = "pytorch-dev-test-prometheus:latest"
IMAGE_CONTEXT = pathlib.Path(__file__).resolve().parent / "prometheus_image"
CONFIG_DIR = REPO_ROOT / "deploy" / "monitoring" / "prometheus"
FAST_INTERVAL = "1s"


def build_prometheus_image() -> str:
    """Builds the test image (apt from Debian's mirror, no registry); a cached rebuild takes a second."""
    result = docker("build", "--quiet", "--tag", PROMETHEUS_IMAGE, str(IMAGE_CONTEXT), timeout=600, check=False)
    assert result.returncode == 0, f"building {PROMETHEUS_IMAGE} failed:\n{result.stderr[-3000:]}"
    return PROMETHEUS_IMAGE


def promtool(*args: str, mounts: dict[pathlib.Path, str], workdir: str = "/", stdin: str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs promtool ARGS in the test image with MOUNTS (host path -> container path, read-only)."""
    volumes = [option for host, target in mounts.items() for option in ("--volume", f"{host}:{target}:ro")]
    interactive = ["--interactive"] if stdin is not None else []
    return subprocess.run(["docker", "run", "--rm", *interactive, *volumes, "--workdir", workdir,
                           "--entrypoint", "promtool", PROMETHEUS_IMAGE, *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def fast_config_copy(destination: pathlib.Path, gpu_targets: list[str]) -> pathlib.Path:
    """deploy/monitoring/prometheus copied to DESTINATION with 1 s intervals, and GPU_TARGETS written to
    targets/gpus.yml as a user lists static hosts; readable by the server's user (nobody)."""
    shutil.copytree(CONFIG_DIR, destination)
    config_path = destination / "prometheus.yml"
    config = yaml.safe_load(config_path.read_text())
    config["global"] = {"scrape_interval": FAST_INTERVAL, "evaluation_interval": FAST_INTERVAL}
    for job in config["scrape_configs"]:
        for discovery in job.get("dns_sd_configs", []):
            discovery["refresh_interval"] = FAST_INTERVAL
    config_path.write_text(yaml.safe_dump(config))
    (destination / "targets" / "gpus.yml").write_text(yaml.safe_dump([{"targets": gpu_targets}]))
    for path in [destination, *destination.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return destination


@dataclasses.dataclass
class PrometheusServer:
    container: Container
    url: str

    def api(self, path: str, **params: str) -> object:
        """GET /api/v1/PATH; returns its data, failing the test with Prometheus's error when it has one."""
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=HTTP_TIMEOUT_S)
        body = response.json()
        assert body.get("status") == "success", f"{path} {params}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The result of an instant query (a list of series, or [] when nothing matches)."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data["result"]]

    def wait_for(self, expr: str, timeout: float = SETTLES_S) -> list[dict]:
        """Polls EXPR until it returns something; returns that."""
        return wait_until(lambda: self.query(expr), timeout, interval=1,
                          failure=lambda: f"{expr} returned nothing; targets: {self.api('targets')}")


def start_prometheus(network: str, config_dir: pathlib.Path) -> PrometheusServer:
    """Runs the test image with CONFIG_DIR as /etc/prometheus on NETWORK; waits until it is ready."""
    name = f"pt-test-prometheus-{uuid.uuid4().hex[:8]}"
    container = Container(name)
    LIVE_CONTAINERS[name] = container
    docker("run", "--detach", "--name", name, "--network", network, "--publish", "127.0.0.1::9090",
           "--volume", f"{config_dir}:/etc/prometheus:ro", PROMETHEUS_IMAGE,
           "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/tmp/data",
           "--web.listen-address=:9090")
    url = f"http://127.0.0.1:{container.published_port(9090)}"
    def ready() -> bool:
        try:
            return requests.get(f"{url}/-/ready", timeout=HTTP_TIMEOUT_S).status_code == 200
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            container.fail_if_exited("before Prometheus was ready")
            return False
    wait_until(ready, SETTLES_S, failure=lambda: f"Prometheus did not become ready:\n{container.logs()[-3000:]}")
    return PrometheusServer(container, url)
