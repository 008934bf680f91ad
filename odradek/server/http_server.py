"""HttpServer: the broker's HTTP listener (http.listeners) and its routes.

Served by aiohttp on the broker's own event loop, beside the Kafka listeners and never on
their path: a request here reads what the broker knows and answers at once.

  /              the web console (odradek/console/, added by the broker as `routes`), or
                 without it a short HTML page linking the others
  /health/live   200 "ok" while the process serves (for a liveness probe)
  /health/ready  200 and a small JSON body when the broker is ready, 503 and the reasons
                 when not (for a readiness probe; what "ready" means is the broker's:
                 odradek/broker/health.py)
  /metrics       the broker's metrics (Prometheus' text format), or 404 without them

Every request is bounded, so that a slow or hostile HTTP client costs the Kafka clients
nothing: a request line and each header at most 4 KiB, at most 32 headers (a longer one is
answered 400 and closed at once); the whole request within the keep-alive timeout of the
connection's start or its previous response (a client that sends half a request line and
stalls is closed then); no request bodies but a console write's JSON (POST, at most
`max_body_size`; 413 and closed otherwise); at most `max_connections`
connections at once (more are answered 503 and closed); an idle keep-alive connection is
closed after the same timeout; a response the client does not read is dropped after
`write_timeout_s`. Only GET and HEAD are routed, and the console's writes (405 for the
others).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from odradek.server.config import HttpListener
from odradek.server.readiness import Readiness

log = logging.getLogger(__name__)


class _ClientErrors(logging.Filter):
    """aiohttp logs a malformed request (too long a line, too many headers, not HTTP) as
    an ERROR with its traceback: a hostile client would fill the broker's log, and it is
    the client's error, answered 400 and closed. One DEBUG line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            log.debug("http: a malformed request, answered %d and closed: %s", exc.code,
                      exc.message)
            return False
        return True


_aiohttp_log = logging.getLogger(f"{__name__}.aiohttp")  # aiohttp's own messages
_aiohttp_log.addFilter(_ClientErrors())

# Accept header -> body, content type
Exposition = Callable[[str | None], Awaitable[tuple[bytes, str]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one HTTP client may take of the broker."""

    max_line_size: int = 4096  # the request line
    max_field_size: int = 4096  # one header
    max_headers: int = 32
    keepalive_timeout_s: float = 10.0  # idle, or a request still arriving, since then
    write_timeout_s: float = 10.0  # for a response the client is slow to read
    max_connections: int = 512
    max_body_size: int = 64 * 1024  # a console write's JSON
    backlog: int = 128


_INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>{name}</title></head>
<body>
<h1>{name}</h1>
<ul>
<li><a href="/health/live">/health/live</a>: 200 while the broker serves</li>
<li><a href="/health/ready">/health/ready</a>: 200 when ready, 503 and why not</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
</ul>
</body></html>
"""

_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
            b"Content-Type: text/plain\r\nContent-Length: 21\r\n\r\ntoo many connections\n")


class _Refused(asyncio.Protocol):
    """A connection beyond the limit: told so, and closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        writer = cast(asyncio.WriteTransport, transport)  # uvloop's too, not a subclass
        writer.write(_REFUSED)
        writer.close()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from its creation to its end (aiohttp
    counts a connection only once it is made, which may be after more were accepted)."""

    def __init__(self, inner: asyncio.Protocol, connections: set[_Counted]) -> None:
        self.inner = inner
        self.connections = connections
        connections.add(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.inner.connection_lost(exc)


class HttpServer:
    """The HTTP listeners of one broker. `readiness` and `metrics` are called on the event
    loop for each request to their routes."""

    def __init__(self, listeners: Sequence[HttpListener], readiness: Callable[[], Readiness],
                 metrics: Exposition | None = None, *, name: str = "Odradek broker",
                 limits: HttpLimits | None = None,
                 routes: Callable[[web.Application], None] | None = None) -> None:
        self.listeners = tuple(listeners)
        self.readiness = readiness
        self.metrics = metrics
        self.routes = routes  # more routes (the console's), "/" among them
        self.name = name
        self.limits = limits or HttpLimits()
        self.bound: list[tuple[str, int]] = []  # (host, port) of each listener, once bound
        self._runner: web.AppRunner | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[_Counted] = set()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._bounded],
                              client_max_size=self.limits.max_body_size)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        if self.routes is not None:
            self.routes(app)
        else:
            app.router.add_get("/", self._index)
        return app

    async def start(self) -> list[tuple[str, int]]:
        """Binds every listener (raises OSError if one cannot be) and serves them."""
        limits = self.limits
        self.bound = []
        # aiohttp's logger for its own errors: ours, so they carry the broker's name; no
        # access log (a probe every few seconds would fill the broker's log).
        self._runner = web.AppRunner(
            self.app(), handle_signals=False, access_log=None, shutdown_timeout=2.0,
            logger=_aiohttp_log,
            keepalive_timeout=limits.keepalive_timeout_s, max_line_size=limits.max_line_size,
            max_field_size=limits.max_field_size, max_headers=limits.max_headers,
            lingering_time=0)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        try:
            for listener in self.listeners:
                server = await loop.create_server(
                    self._protocol, listener.bind_host, listener.port, backlog=limits.backlog)
                self._servers.append(server)
                port = server.sockets[0].getsockname()[1]
                host = listener.host or "0.0.0.0"
                self.bound.append((host, port))
                shown = f"[{host}]" if ":" in host else host
                log.info("http listening on http://%s:%d", shown, port)
        except BaseException:
            await self.stop()
            raise
        return list(self.bound)

    @property
    def connection_count(self) -> int:
        """The HTTP connections open now."""
        return len(self._connections)

    def _protocol(self) -> asyncio.BaseProtocol:
        assert self._runner is not None and self._runner.server is not None
        if len(self._connections) >= self.limits.max_connections:
            return _Refused()
        return _Counted(self._runner.server(), self._connections)

    async def stop(self) -> None:
        """Stops listening, then closes the connections (a request in progress has up to
        the runner's shutdown timeout to finish)."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        for server in servers:  # after the connections (Python 3.12+ waits for them)
            await server.wait_closed()

    # ---- routes ---------------------------------------------------------------------------

    @web.middleware
    async def _bounded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # A body is read only by a POST route (within client_max_size); any other is never
        # read, nor waited for.
        if (request.body_exists and request.method != "POST") or (
                request.content_length or 0) > self.limits.max_body_size:
            response = web.Response(status=413, text="too large a body, or one not asked "
                                                     "for\n")
            response.force_close()
            return response
        return await handler(request)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=_INDEX.format(name=html.escape(self.name)),
                            content_type="text/html")

    async def _live(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        readiness = self.readiness()  # cheap: flags and counters the broker keeps
        return web.Response(status=200 if readiness.ready else 503,
                            text=json.dumps(readiness.to_json()) + "\n",
                            content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if self.metrics is None:
            raise web.HTTPNotFound(text="this broker has no metrics\n")
        # The state is read on the loop, which owns it (partitions, groups, purgatories: a
        # thread could see them half changed), as a Metadata request for every topic
        # does; a large scrape's text is written in a worker thread.
        body, content_type = await self.metrics(request.headers.get("Accept"))
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.content_length = len(body)
        return await self._send(request, response, body)

    async def _send(self, request: web.Request, response: web.StreamResponse,
                    body: bytes) -> web.StreamResponse:
        """Writes a large body within write_timeout_s; a client that does not read it in
        time loses its connection."""
        try:
            async with asyncio.timeout(self.limits.write_timeout_s):
                await response.prepare(request)
                if request.method != "HEAD":
                    await response.write(body)
                await response.write_eof()
        except TimeoutError:
            log.info("http: %s did not read its response within %g s: closed",
                     request.remote, self.limits.write_timeout_s)
            if request.transport is not None:
                request.transport.abort()
        return response
