"""Waiting for a user's new server every 0.1 s, before the hub's own wait begins.

JupyterHub waits for a server it spawned with an exponential backoff: one check at a random point of
each window, the windows doubling from 0.2 s up to 5 s. A server that answers 2 s after its container
started is often seen only 4 to 6 s after, and the user looks at "Your server is starting up" for the
difference. The spawner's start (jupyterhub_config.py) returns only once the server answers here, so the
hub's first check succeeds. Standard library only: the unit tests run it against a real socket.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.1
STATE_CHECK_S = 1.0  # how often to ask whether the container still runs (a Docker API call)
REQUEST_TIMEOUT_S = 5.0


async def http_status(host: str, port: int, path: str) -> int | None:
    """The status code of GET PATH at HOST:PORT, or None when nothing answers in time."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), REQUEST_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return None
    finally:
        writer.close()
    fields = status_line.split()
    return int(fields[1]) if len(fields) >= 2 and fields[1].isdigit() else None


async def wait_until_answers(host: str, port: int, path: str, timeout_s: float,
                             still_running: Callable[[], Awaitable[bool]]) -> bool:
    """True once GET PATH answers with a status below 500 (what the hub's own check accepts). False when
    the container ended or TIMEOUT_S passed first: the hub's own wait then reports it, as it would have."""
    deadline = time.monotonic() + timeout_s
    next_state_check = time.monotonic() + STATE_CHECK_S
    while time.monotonic() < deadline:
        status = await http_status(host, port, path)
        if status is not None and status < 500:
            return True
        if time.monotonic() >= next_state_check:
            if not await still_running():
                return False
            next_state_check = time.monotonic() + STATE_CHECK_S
        await asyncio.sleep(POLL_S)
    return False
