"""The /metrics server of the trainer and the GPU exporter (trainer/metrics_server.py) costs no thread per
client and gives each request a total deadline (issue 27, item 7): a client that trickles one byte at a
time is cut off, idle clients cost no threads, and scrapes still get their answer.

    make test-unit PYTEST_ARGS=tests/unit/test_metrics_server.py
"""
from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from trainer import metrics_server

prometheus_client = pytest.importorskip("prometheus_client")

DEADLINE_S = 1.5  # the tests' deadline, instead of 10 s


@pytest.fixture
def server(monkeypatch) -> Iterator[metrics_server.MetricsServer]:
    monkeypatch.setattr(metrics_server, "REQUEST_DEADLINE_S", DEADLINE_S)
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Gauge("answer", "The answer", registry=registry).set(42)
    server = metrics_server.serve_registry(registry, "127.0.0.1", 0)
    yield server
    server.close()


def scrape(server: metrics_server.MetricsServer) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def closed_within(connection: socket.socket, seconds: float) -> bool:
    connection.settimeout(seconds)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:  # closed with a reset: closed all the same
        return True


def test_a_scrape_is_answered_with_the_registrys_exposition(server):
    assert "answer 42.0" in scrape(server)


def test_a_client_that_trickles_its_request_is_cut_off_at_the_total_deadline(server):
    """The old per-read timeout (10 s) never fired for a byte every few seconds: the thread was held for ever."""
    client = socket.create_connection(("127.0.0.1", server.port))
    started = time.monotonic()
    closed = False
    for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
        try:
            client.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        if closed_within(client, 0.2):
            closed = True
            break
    assert closed and DEADLINE_S - 0.1 < time.monotonic() - started < DEADLINE_S + 2


def test_idle_clients_cost_no_threads_and_a_scrape_still_answers(server):
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
    assert "answer 42.0" in scrape(server)
    time.sleep(0.2)
    assert threading.active_count() <= threads_before + metrics_server.HANDLER_THREADS
    assert closed_within(idle[-1], DEADLINE_S + 3)  # dropped at the deadline, not held
    for connection in idle:
        connection.close()


def test_many_scrapes_at_once_use_at_most_the_handler_threads(server):
    threads_before = threading.active_count()
    answers: list[str] = []
    scrapers = [threading.Thread(target=lambda: answers.append(scrape(server))) for _ in range(20)]
    for scraper in scrapers:
        scraper.start()
    for scraper in scrapers:
        scraper.join(10)
    assert len(answers) == 20 and all("answer 42.0" in answer for answer in answers)
    server_threads = [thread for thread in threading.enumerate() if thread.name.startswith("metrics-handler")]
    assert len(server_threads) <= metrics_server.HANDLER_THREADS
    assert threading.active_count() <= threads_before + metrics_server.HANDLER_THREADS


def test_connections_beyond_the_cap_are_closed_at_once(server, monkeypatch):
    monkeypatch.setattr(metrics_server, "MAX_CONNECTIONS", 5)
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(5)]
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", server.port))
    assert closed_within(extra, 1)
    assert not closed_within(held[0], 0.2)
    for connection in [*held, extra]:
        connection.close()


@pytest.mark.parametrize("request_bytes, status", [
    (b"POST /metrics HTTP/1.1\r\n\r\n", b"405"),
    (b"nonsense\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
])
def test_a_request_that_is_no_scrape_gets_a_status_not_a_traceback(server, capsys, request_bytes, status):
    client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    client.sendall(request_bytes)
    assert client.recv(64).split()[1] == status
    assert "Traceback" not in capsys.readouterr().err


def test_a_taken_port_raises_in_the_caller(server):
    with pytest.raises(OSError):
        metrics_server.serve_registry(prometheus_client.CollectorRegistry(), "127.0.0.1", server.port)
