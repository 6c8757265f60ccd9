"""One metrics pipeline: the trainer computes each report once, and its sinks show that one record.

    make test-unit PYTEST_ARGS=tests/unit/test_metrics_sinks.py

The JSON line and the Prometheus exposition of the same report must carry the same samples/s and MFU
(before, the exporter computed its own over another window). The /metrics server drops a client that
sends nothing (issue 18: 500 half-open connections kept 500 threads) and listens where it is told.
"""
from __future__ import annotations

import argparse
import json
import socket
import time
import types
import urllib.request
from collections.abc import Iterator

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from trainer import metrics_server, prometheus
from trainer.distributed import Placement
from trainer.metrics import MetricsReporter, RankTotals


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def exporter(monkeypatch) -> Iterator[prometheus.TrainingExporter]:
    """This process's /metrics on 127.0.0.1, as local rank 0 of a 2-rank job serves it."""
    monkeypatch.setattr(metrics_server, "REQUEST_DEADLINE_S", 0.5)  # the deadline, shortened for the test
    monkeypatch.setattr(prometheus, "_exporter", None)
    prometheus.serve("127.0.0.1", free_port(), Placement(rank=0, local_rank=0, world_size=2))
    yield prometheus._exporter
    prometheus._exporter.server.close()


def scrape(exporter: prometheus.TrainingExporter) -> dict[str, float]:
    host, port = exporter.server.server_address[:2]
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("trainer_")}


def test_the_json_line_and_the_exposition_show_the_same_report(exporter, tmp_path):
    args = argparse.Namespace(max_steps=100, batch_size=8, grad_accum=2, seq_len=64, tensorboard_dir=None,
                              metrics_file=tmp_path / "metrics.jsonl")
    reporter = MetricsReporter(args, placement=Placement(rank=0, local_rank=0, world_size=2),
                               device=torch.device("cpu"), flops_per_sample=10**9, peak=1e12)
    reporter.restart_clock(step=0)
    time.sleep(0.05)  # a window of measurable length
    at_step_4 = types.SimpleNamespace(step=4, stream=types.SimpleNamespace(epoch=0))  # what report reads
    reporter.report(at_step_4, 1e-3, RankTotals(loss_sum=10.0, memory_per_rank=[2**20, 2**21],
                                                data_wait_seconds=(0.001, 0.002)))
    reporter.close()

    (record,) = [json.loads(line) for line in args.metrics_file.read_text().splitlines()]
    exposed = scrape(exporter)
    assert record["loss"] == 2.5 and exposed["trainer_loss"] == 2.5
    # The slowest rank's wait over the window's wall time: at most 0.002 s of at least 0.05 s.
    assert exposed["trainer_data_wait_ratio"] == record["data_wait_share"] and 0 < record["data_wait_share"] < 0.05
    assert f"data wait {100 * record['data_wait_share']:.0f}%" in reporter.progress_line(record)
    assert exposed["trainer_samples_per_second"] == record["samples_per_sec"] > 0
    assert exposed["trainer_tokens_per_second"] == record["tokens_per_sec"] == record["samples_per_sec"] * 64
    assert exposed["trainer_mfu_ratio"] == record["mfu"] == pytest.approx(record["samples_per_sec"] * 1e9 / 2e12)


def test_a_client_that_sends_nothing_is_dropped_at_the_deadline(exporter, capfd):
    with socket.create_connection(exporter.server.server_address[:2], timeout=10) as silent:
        started = time.monotonic()
        assert silent.recv(1024) == b""  # the server closed it
        assert time.monotonic() - started < 5
    assert "trainer_world_size" in scrape(exporter)  # and it still serves
    assert capfd.readouterr().err == ""  # no traceback of the timeout in the trainer's output


def test_it_listens_on_the_address_it_is_given(exporter):
    assert exporter.server.server_address[0] == "127.0.0.1"
    assert metrics_server.LISTEN_BACKLOG >= 128  # the listen queue, larger than socketserver's 5
