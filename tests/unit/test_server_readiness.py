"""deploy/jupyterhub/server_readiness.py: the spawner's wait for a user's new server, against real sockets
on this machine's loopback.

    make test-unit PYTEST_ARGS=tests/unit/test_server_readiness.py
"""
from __future__ import annotations

import asyncio

import pytest

from server_readiness import http_status, wait_until_answers
from tests.support.containers import free_port

# The waits below end by the rule under test long before this; a wait that ignored it would hang here.
GUARD_S = 20


async def serve(status_lines: list[bytes], port: int = 0):
    """A server on loopback PORT (0: a free one) answering each request with the next status line (the
    last one repeats); returns the server, its port and the list of paths it was asked for."""
    asked: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readline()
        asked.append(request.split()[1].decode())
        writer.write(status_lines[min(len(asked), len(status_lines)) - 1] + b"\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port)
    return server, server.sockets[0].getsockname()[1], asked


async def running() -> bool:
    return True


def test_nothing_listening_is_no_status():
    assert asyncio.run(http_status("127.0.0.1", free_port(), "/")) is None  # reserved, never listening


def test_a_server_that_starts_late_is_found_once_it_answers_and_the_hubs_path_is_asked():
    async def scenario():
        port = free_port()  # reserved, not listening: connections are refused until the server starts
        waiting = asyncio.create_task(wait_until_answers("127.0.0.1", port, "/user/alice/", GUARD_S, running))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        server, _, asked = await serve([b"HTTP/1.1 302 Found"], port)
        found = await asyncio.wait_for(waiting, GUARD_S)
        server.close()
        return found, asked
    found, asked = asyncio.run(scenario())
    assert found and asked == ["/user/alice/"]


def test_a_5xx_answer_is_not_ready_and_the_next_good_one_is():
    async def scenario():
        server, port, asked = await serve([b"HTTP/1.1 503 Service Unavailable", b"HTTP/1.1 503 Service Unavailable",
                                           b"HTTP/1.1 200 OK"])
        found = await asyncio.wait_for(wait_until_answers("127.0.0.1", port, "/", GUARD_S, running), GUARD_S)
        server.close()
        return found, len(asked)
    assert asyncio.run(scenario()) == (True, 3)


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 404 Not Found", b"HTTP/1.1 403 Forbidden"])
def test_any_answer_below_500_is_ready_as_for_the_hubs_own_check(status_line):
    async def scenario():
        server, port, _ = await serve([status_line])
        found = await asyncio.wait_for(wait_until_answers("127.0.0.1", port, "/", GUARD_S, running), GUARD_S)
        server.close()
        return found
    assert asyncio.run(scenario())


def test_a_container_that_ended_stops_the_wait_at_once():
    async def ended() -> bool:
        return False

    async def scenario():
        server, port, _ = await serve([b"HTTP/1.1 500 Internal Server Error"])
        found = await asyncio.wait_for(wait_until_answers("127.0.0.1", port, "/", 600, ended), GUARD_S)
        server.close()
        return found
    assert asyncio.run(scenario()) is False


def test_the_timeout_ends_a_wait_for_a_server_that_never_answers():
    async def scenario():
        server, port, _ = await serve([b"HTTP/1.1 502 Bad Gateway"])
        found = await asyncio.wait_for(wait_until_answers("127.0.0.1", port, "/", 0.5, running), GUARD_S)
        server.close()
        return found
    assert asyncio.run(scenario()) is False
