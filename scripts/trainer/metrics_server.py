"""A /metrics server that no client can make expensive: the trainer's (trainer/prometheus.py) and the GPU
exporter's (gpu_exporter.py).

The standard library's threading server gives every connection a thread until it closes, and its
timeout is per read: a client that sends one byte every few seconds holds its thread for ever, and 420
of them filled a `--pids-limit 400` container so that the user's shell could no longer fork. Here:
  * one thread runs an asyncio loop that reads every request; a connection costs memory, not a thread;
  * each connection has a total deadline, REQUEST_DEADLINE_S from accept to the last byte of the
    answer, however slowly it trickles in or reads out; then it is closed, silently;
  * the exposition is made by at most HANDLER_THREADS threads (NVML or a large registry may block),
    so scrapes queue instead of adding threads;
  * at most MAX_CONNECTIONS are open at once; one more is closed at once, so file descriptors are bounded;
  * a request head larger than MAX_REQUEST_BYTES is refused.
The answer is prometheus_client's own WSGI app (content negotiation, gzip, `name[]` filters), one
request per connection.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import io
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

REQUEST_DEADLINE_S = 10.0  # a scrape sends its request at once; Prometheus's own default scrape timeout is 10 s
HANDLER_THREADS = 2  # threads that make expositions; scrapes beyond them wait their turn within their deadline
MAX_CONNECTIONS = 1000  # open at once: far more than the scrapers and health checks of one node
MAX_REQUEST_BYTES = 16384  # request line and headers; a scrape's are a few hundred bytes
LISTEN_BACKLOG = 128  # socketserver's default of 5 refuses a burst of scrapers and health checks
REASONS = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
           500: "Internal Server Error"}


class MetricsServer:
    """Serves the WSGI APP on ADDRESS:PORT from a daemon thread; the port is bound before __init__ returns,
    so a taken port raises OSError in the caller."""

    def __init__(self, app: Callable[..., Any], address: str, port: int) -> None:
        self.app = app
        self.socket = listening_socket(address, port)
        self.handlers = concurrent.futures.ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="metrics-handler")
        self.open_connections = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.run, name="metrics-server", daemon=True)
        self.thread.start()

    @property
    def server_address(self) -> tuple[str, int]:
        """(host, port) it listens on, as socketserver names it."""
        return self.socket.getsockname()[:2]

    @property
    def port(self) -> int:
        return self.server_address[1]

    def run(self) -> None:
        server = self.loop.run_until_complete(asyncio.start_server(self.connection, sock=self.socket,
                                                                   limit=MAX_REQUEST_BYTES))
        self.loop.run_forever()
        server.close()

    def close(self) -> None:
        """Stops serving (the trainer never needs to: its daemon thread ends with the process)."""
        asyncio.run_coroutine_threadsafe(self.end_connections(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.socket.close()
        self.handlers.shutdown(wait=False)

    async def end_connections(self) -> None:
        connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self.open_connections += 1
        try:
            await asyncio.wait_for(self.answer(reader, writer), REQUEST_DEADLINE_S)
        except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client that is slow, hung up or sent junk is no fault of ours: no traceback in our output
        finally:
            self.open_connections -= 1
            writer.transport.abort()  # closes at once, without waiting for a client that does not read

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return await self.respond(writer, 431, [], b"")
        environ = wsgi_environ(head)
        if environ is None:
            return await self.respond(writer, 400, [], b"")
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            return await self.respond(writer, 405, [("Allow", "GET, HEAD")], b"")
        try:
            status, headers, body = await self.loop.run_in_executor(self.handlers, self.call_app, environ)
        except Exception:  # a collector that failed: the scrape fails, the server and the trainer go on
            status, headers, body = 500, [], b""
        await self.respond(writer, status, headers, b"" if environ["REQUEST_METHOD"] == "HEAD" else body)

    def call_app(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        started: list[Any] = []
        body = b"".join(self.app(environ, lambda status, headers, exc_info=None: started.extend([status, headers])))
        return int(started[0].split()[0]), list(started[1]), body

    @staticmethod
    async def respond(writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        headers = [(name, value) for name, value in headers if name.lower() not in ("content-length", "connection")]
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}", *(f"{name}: {value}" for name, value in headers),
                 f"Content-Length: {len(body)}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1") + body)
        await writer.drain()


def listening_socket(address: str, port: int) -> socket.socket:
    """A TCP socket listening on ADDRESS:PORT; raises the OSError of bind (EADDRINUSE, EADDRNOTAVAIL) as it is.

    Not socket.create_server, which rewrites the error's text ("while attempting to bind on ...")."""
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted trainer gets its port back
        listener.bind((address, port))
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def wsgi_environ(head: bytes) -> dict[str, Any] | None:
    """The WSGI environ of an HTTP request head (request line and headers), or None when it is no HTTP."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    method, target, protocol = parts
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": urllib.parse.unquote(path), "QUERY_STRING": query,
        "SERVER_PROTOCOL": protocol, "SERVER_NAME": "metrics", "SERVER_PORT": "0", "SCRIPT_NAME": "",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
    return environ


def serve_registry(registry: Any, address: str, port: int) -> MetricsServer:
    """Serves REGISTRY's exposition at http://ADDRESS:PORT/metrics; raises OSError when it cannot listen."""
    from prometheus_client import make_wsgi_app

    return MetricsServer(make_wsgi_app(registry), address, port)
