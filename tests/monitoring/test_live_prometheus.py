"""A real Prometheus scrapes a real two-node training job: two containers of the image on one docker
network, named node0 and node1 as in compose.multinode.yaml, each running torchrun with
--prometheus-port, and the in-container GPU exporter listed as a static host. Prometheus runs the
repository's configuration (intervals shortened to 1 s), so its DNS discovery finds both nodes by name.

Through Prometheus's HTTP API: both nodes are scraped, the loss falls, the step rises, throughput is
above zero; every expression of the dashboard and of the alert rules runs without error, the training
panels return data, and a healthy job raises no alert. The GPU panels are checked under the gpu marker.

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_live_prometheus.py
"""
from __future__ import annotations

import uuid

import pytest
import yaml

from tests.support.containers import Container, docker, start_container
from tests.monitoring.helpers.dashboard import as_prometheus_runs_it, label_values_query, load_dashboard, panels_by_row
from tests.support.prometheus_server import (CONFIG_DIR, PrometheusServer, fast_config_copy, promtool,
                                                start_prometheus)
from tests.support.training import TINY_MODEL, trainer_argv

pytestmark = pytest.mark.tier("landing")

TRAINER_PORT = 9401
GPU_EXPORTER_PORT = 9400
NODES = ("node0", "node1")
# A tiny model on 16x16 images, one rank per node, a checkpoint every 50 steps, and a peak for MFU on
# CPU. A modest learning rate keeps the loss falling for longer than the test watches it.
TRAINING = (f"{TINY_MODEL} --batch-size 8 --num-workers 0 --device cpu "
            "--max-steps 100000 --log-every 5 --save-every 50 --warmup-steps 20 --lr 5e-4 --peak-tflops 1 "
            f"--ckpt-dir /tmp/checkpoints --prometheus-port {TRAINER_PORT}")
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval
LOSS_SAMPLES = 15
LOSS_FALLS_BY_STEP = 200  # the loss is well below its first value by then, at lr 5e-4


def torchrun_command(rdzv_id: str) -> list[str]:
    return trainer_argv(TRAINING, nproc=1, nnodes=2, rdzv_endpoint="node0:29400", rdzv_id=rdzv_id)


@pytest.fixture(scope="module")
def network():
    name = f"pt-test-monitoring-{uuid.uuid4().hex[:8]}"
    docker("network", "create", name)
    yield name
    docker("network", "rm", name, check=False)


@pytest.fixture(scope="module")
def prometheus(prometheus_image, network, tmp_path_factory) -> PrometheusServer:
    """Started before the trainers, as in a real deployment, so it sees the job from its first report."""
    config = fast_config_copy(tmp_path_factory.mktemp("monitoring") / "prometheus",
                              gpu_targets=[f"node0:{GPU_EXPORTER_PORT}"])
    server = start_prometheus(network, config)
    yield server
    server.container.remove()


@pytest.fixture(scope="module")
def training_job(image, network, prometheus) -> dict[str, Container]:
    rdzv_id = f"monitoring-{uuid.uuid4().hex[:6]}"
    nodes = {}
    try:
        for node in NODES:
            nodes[node] = start_container(image, command=torchrun_command(rdzv_id), options=[
                "--network", network, "--network-alias", node, "--hostname", node, "--env", "OMP_NUM_THREADS=1"])
        # The GPU exporter as the container's start-up step would run it (see docs/monitoring.md).
        docker("exec", "--detach", "--user", "dev", nodes["node0"].name,
               "python", "/opt/scripts/gpu_exporter.py", "--port", str(GPU_EXPORTER_PORT))
        # node0's own series: the tests read it, and node1's may reach the count a scrape earlier.
        prometheus.wait_for(f'count_over_time(trainer_loss{{node="node0"}}[5m]) >= {LOSS_SAMPLES}', timeout=150)
        # Samples come with time, learning with steps: on a loaded machine 15 s may be too few steps.
        prometheus.wait_for(f'trainer_step{{node="node0"}} >= {LOSS_FALLS_BY_STEP}', timeout=150)
        yield {"rdzv_id": rdzv_id, **nodes}
    finally:
        for container in nodes.values():
            container.remove()


def values_of(prometheus: PrometheusServer, selector: str) -> list[float]:
    (series,) = prometheus.query(f"{selector}[5m]")
    return [float(value) for _, value in series["values"]]


def test_prometheus_finds_and_scrapes_every_node_by_its_compose_name(prometheus, training_job):
    # Over the last 10 s: at a 1 s interval the scrape timeout is 1 s, which a starved trainer may miss once.
    up = {series["metric"]["instance"]: series["value"][1]
          for series in prometheus.query('max_over_time(up{job="trainer"}[10s])')}
    assert up == {node: "1" for node in NODES}
    steps = prometheus.query("trainer_step")
    labels = {(series["metric"]["training_job"], series["metric"]["node"]) for series in steps}
    assert labels == {(training_job["rdzv_id"], node) for node in NODES}  # one job, told apart by node
    assert {series["metric"]["rank"] for series in steps} == {"0", "1"}


def test_the_loss_falls_the_step_rises_and_throughput_is_above_zero(prometheus, training_job):
    loss = values_of(prometheus, 'trainer_loss{node="node0"}')
    assert len(loss) >= LOSS_SAMPLES
    assert loss[-1] < 0.8 * loss[0], f"the loss did not fall: {loss}"
    steps = values_of(prometheus, 'trainer_step{node="node1"}')
    assert steps[-1] > steps[0] and steps == sorted(steps), steps
    throughput = prometheus.query("trainer_samples_per_second > 0")
    assert {series["metric"]["node"] for series in throughput} == set(NODES)
    assert prometheus.query('trainer_world_size == 2') and prometheus.query("trainer_mfu_ratio > 0")
    assert prometheus.wait_for("trainer_last_checkpoint_duration_seconds > 0")  # rank 0's node only
    assert prometheus.query("sum(trainer_step_duration_seconds_count) > 10")


def test_the_trainer_exposition_passes_promtools_lint(training_job):
    exposition = training_job["node0"].run(f"curl --fail --silent http://127.0.0.1:{TRAINER_PORT}/metrics")
    assert exposition.rc == 0, exposition.stderr
    result = promtool("check", "metrics", mounts={}, stdin=exposition.stdout)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_runs_and_the_training_panels_show_data(prometheus, training_job):
    dashboard = load_dashboard()
    prometheus.wait_for("trainer_last_checkpoint_timestamp_seconds")
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            prometheus.query(as_prometheus_runs_it(target["expr"], RATE_INTERVAL))  # fails on any error
    for panel in panels_by_row(dashboard)["Training"]:
        results = [prometheus.query(as_prometheus_runs_it(target["expr"], RATE_INTERVAL))
                   for target in panel["targets"]]
        assert any(results), f"panel {panel['title']!r} shows no data"
    for variable in dashboard["templating"]["list"]:
        selector, label = label_values_query(variable["definition"])
        values = prometheus.api(f"label/{label}/values", **{"match[]": as_prometheus_runs_it(selector, "")})
        if variable["name"] != "gpu_host":  # no GPU here: dcgm's Hostname label has no value
            assert values, f"variable {variable['name']} offers nothing"


def test_every_alert_rule_evaluates_and_a_healthy_job_raises_none(prometheus, training_job):
    groups = yaml.safe_load((CONFIG_DIR / "rules" / "training.rules.yml").read_text())["groups"]
    for rule in (rule for group in groups for rule in group["rules"]):
        prometheus.query(rule["expr"])
    loaded = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
    assert len(loaded) == sum(len(group["rules"]) for group in groups)
    assert all(rule["health"] == "ok" for rule in loaded), [(r["name"], r.get("lastError")) for r in loaded]
    # Any alert, even pending, is one too many, except TrainingTargetDown pending: one scrape missed on a
    # loaded machine (a 1 s timeout here) makes it pending until the next one succeeds.
    raised = [alert for alert in prometheus.api("alerts")["alerts"]
              if alert["state"] == "firing" or alert["labels"]["alertname"] != "TrainingTargetDown"]
    assert raised == []


def test_the_gpu_exporter_serves_a_valid_exposition_of_zero_gpus_without_a_gpu(prometheus, training_job):
    exposition = training_job["node0"].run(f"curl --fail --silent http://127.0.0.1:{GPU_EXPORTER_PORT}/metrics")
    assert exposition.rc == 0, exposition.stderr
    # Prometheus parsed it (a target whose exposition is invalid is down) and read the GPU count.
    (gpu_target,) = prometheus.wait_for('up{job="gpu-static"}')
    assert gpu_target["value"][1] == "1", prometheus.api("targets")
    gpus = prometheus.wait_for("gpu_exporter_gpus")
    if "gpu_exporter_nvml_up 1.0" in exposition.stdout:
        pytest.skip("this host has an NVIDIA driver: test_gpu_panels_show_every_gpu covers it")
    assert [series["value"][1] for series in gpus] == ["0"]
    assert "DCGM_FI_DEV_GPU_UTIL{" not in exposition.stdout
    result = promtool("check", "metrics", mounts={}, stdin=exposition.stdout)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.gpu
def test_gpu_panels_show_every_gpu(prometheus, training_job):
    gpus = int(float(prometheus.wait_for("gpu_exporter_gpus")[0]["value"][1]))
    if gpus == 0:
        pytest.skip("no GPU visible to the in-container exporter (CPU-only host, or started without --gpus)")
    for panel in panels_by_row(load_dashboard())["GPUs"]:
        for target in panel["targets"]:
            result = prometheus.query(as_prometheus_runs_it(target["expr"], RATE_INTERVAL))
            assert result, f"GPU panel {panel['title']!r} shows no data"
    assert len(prometheus.query("DCGM_FI_DEV_GPU_UTIL")) == gpus
