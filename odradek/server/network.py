"""The socket server: asyncio listeners and Kafka connections.

Each connection reads size-prefixed frames and answers them one at a time, in order, as
Kafka's SocketServer does (it mutes a channel while its request is being handled):
pipelined requests wait in the connection's queue, and the socket stops being read while
that queue is long. A request whose API or version we do not serve, or whose body does
not decode, closes that connection alone, as Kafka does; an ApiVersions request of an
unknown version is answered with UNSUPPORTED_VERSION and our ranges (KIP-511).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, cast

from odradek.protocol.api import API_VERSIONS
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.framing import FrameReader, Request, decode_request_header
from odradek.protocol.message import Message
from odradek.protocol.messages.request_header import RequestHeader
from odradek.server.response import FileRegion, Part, encode_response_parts

log = logging.getLogger(__name__)

_MAX_QUEUED_FRAMES = 16  # stop reading a connection whose client pipelines this far ahead
_STOP_GRACE_S = 10.0  # how long stop() lets in-flight requests finish


class CloseConnection(Exception):
    """Raised by a handler to close the connection instead of answering."""


@dataclass(slots=True)
class RequestContext:
    """Who sent a request, and on which listener."""

    connection_id: int
    client_host: str
    client_port: int
    listener_name: str
    header: RequestHeader

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""


class RequestHandler(Protocol):
    def supports(self, api_key: int, api_version: int) -> bool:
        """Whether this API and version is served; others close the connection."""
        ...

    def unsupported_api_versions(self) -> Message:
        """The ApiVersions response (v0) to an ApiVersions request of an unknown version."""
        ...

    def handle(self, request: Request, context: RequestContext) -> Awaitable[Message | None]:
        """The response to `request`, or None when none is sent (Produce with acks=0)."""
        ...


@dataclass(frozen=True, slots=True)
class BoundListener:
    name: str
    host: str
    port: int  # the port actually bound (a configured 0 picks a free one)


class SocketServer:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        max_frame_size: int,
        connections_max_idle_ms: int,
    ) -> None:
        self.handler = handler
        self.max_frame_size = max_frame_size
        self.idle_timeout_s = connections_max_idle_ms / 1000
        self._servers: list[asyncio.Server] = []
        self.listeners: list[BoundListener] = []
        self.connections: set[KafkaConnection] = set()
        self._ids = itertools.count(1)

    async def start(self, listeners: list[tuple[str, str, int]]) -> list[BoundListener]:
        """Binds each (name, host, port); an empty host means every interface."""
        loop = asyncio.get_running_loop()
        for name, host, port in listeners:
            server = await loop.create_server(
                lambda name=name: KafkaConnection(self, name), host or None, port,
                reuse_address=True, backlog=1024,
            )
            self._servers.append(server)
            bound_port = server.sockets[0].getsockname()[1]
            self.listeners.append(BoundListener(name, host, bound_port))
            log.info("listening on %s://%s:%d", name, host or "0.0.0.0", bound_port)
        return self.listeners

    async def stop(self) -> None:
        """Stops accepting, lets each connection finish the request it is handling, then
        closes them all."""
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.stop_after_current()
        deadline = time.monotonic() + _STOP_GRACE_S
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        for server in self._servers:
            await server.wait_closed()

    def next_connection_id(self) -> int:
        return next(self._ids)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: SocketServer, listener_name: str) -> None:
        self.server = server
        self.listener_name = listener_name
        self.id = server.next_connection_id()
        self.reader = FrameReader(server.max_frame_size)
        self.frames: collections.deque[bytearray] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.peer = ("", 0)
        self.last_active = time.monotonic()
        self._frame_arrived: asyncio.Event = asyncio.Event()
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._stopping = False
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    # ---- asyncio.BufferedProtocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        self.server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._serve())
        self._arm_idle_timer(self.server.idle_timeout_s)

    def get_buffer(self, sizehint: int) -> memoryview:
        # The socket is read straight into the frame's buffer: no copy of large requests.
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self.frames.extend(self.reader.buffer_updated(nbytes))
        except ProtocolError as e:
            log.warning("closing connection %d from %s:%d: %s", self.id, *self.peer, e)
            self.abort()
            return
        if self.frames:
            self._frame_arrived.set()
            if len(self.frames) >= _MAX_QUEUED_FRAMES and self.transport is not None:
                self.transport.pause_reading()
                self._reading_paused = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._task is not None and not self._busy:
            self._task.cancel()
        self._stopping = True
        self._frame_arrived.set()
        self._can_write.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- lifecycle --------------------------------------------------------------------

    def stop_after_current(self) -> None:
        self._stopping = True
        self._frame_arrived.set()
        if not self._busy:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _arm_idle_timer(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(max(delay, 0.001), self._check_idle)

    def _check_idle(self) -> None:
        # connections.max.idle.ms: Kafka closes connections with no traffic for that long.
        idle = time.monotonic() - self.last_active
        if idle >= self.server.idle_timeout_s and not self._busy and not self.frames:
            log.debug("closing idle connection %d from %s:%d", self.id, *self.peer)
            self.close()
        else:
            self._arm_idle_timer(self.server.idle_timeout_s - idle)

    # ---- requests ---------------------------------------------------------------------

    async def _serve(self) -> None:
        try:
            while not self._stopping:
                if not self.frames:
                    self._frame_arrived.clear()
                    await self._frame_arrived.wait()
                    continue
                frame = self.frames.popleft()
                if self._reading_paused and len(self.frames) < _MAX_QUEUED_FRAMES // 2:
                    assert self.transport is not None
                    self.transport.resume_reading()
                    self._reading_paused = False
                self._busy = True
                try:
                    parts = await self._process(frame)
                    if parts:
                        await self._write(parts)
                finally:
                    self._busy = False
                    self.last_active = time.monotonic()
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError) as e:
            log.debug("connection %d from %s:%d: %s", self.id, *self.peer, e)
        except Exception:
            log.exception("closing connection %d from %s:%d after an unexpected error",
                          self.id, *self.peer)
        self.close()

    async def _process(self, frame: bytearray) -> list[Part] | None:
        handler = self.server.handler
        try:
            header, api, pos = decode_request_header(frame)
        except ProtocolError as e:
            return self._refuse(f"unreadable request header: {e}")
        version = header.request_api_version
        if not handler.supports(api.api_key, version):
            if api.api_key == API_VERSIONS:
                return encode_response_parts(
                    api, handler.unsupported_api_versions(), 0, header.correlation_id
                )
            return self._refuse(f"{api.name} v{version} is not supported")
        try:
            # Bytes after the body are ignored, as Kafka's parser does: librdkafka's
            # Metadata v12 for all topics carries three of them.
            body, _ = api.request_class.decode_from(memoryview(frame), pos, version)
        except ProtocolError as e:
            log.debug("malformed request frame: %s", bytes(frame[:512]).hex())
            return self._refuse(f"malformed {api.name} v{version} request: {e}")
        context = RequestContext(self.id, self.peer[0], self.peer[1], self.listener_name, header)
        try:
            response = await handler.handle(Request(header, api, body), context)
        except CloseConnection as e:
            return self._refuse(str(e))
        if response is None:
            return None
        return encode_response_parts(api, response, version, header.correlation_id)

    def _refuse(self, why: str) -> list[Part] | None:
        # Kafka cannot answer a request it cannot parse: it closes the connection.
        log.warning("closing connection %d from %s:%d: %s", self.id, *self.peer, why)
        self._stopping = True
        self.abort()
        return None  # nothing to send

    async def _write(self, parts: list[Part]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for part in parts:
            if isinstance(part, bytes):
                transport.write(part)
            else:
                await _send_region(transport, part)
        if not self._can_write.is_set():
            await self._can_write.wait()


class _RegionFile:
    """The file object loop.sendfile wants, over a file descriptor we do not own: it
    seeks and reads with pread, so concurrent sends never share a file position."""

    def __init__(self, fd: int, position: int) -> None:
        self._fd = fd
        self._position = position

    def fileno(self) -> int:
        return self._fd

    def seek(self, position: int) -> int:
        self._position = position
        return position

    def readinto(self, buffer: memoryview) -> int:
        data = os.pread(self._fd, len(buffer), self._position)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)




async def _send_region(transport: asyncio.Transport, region: FileRegion) -> None:
    loop = asyncio.get_running_loop()
    if isinstance(loop, asyncio.BaseEventLoop):
        file = _RegionFile(region.fileno(), region.position)
        await loop.sendfile(transport, file, region.position, region.length)  # type: ignore[arg-type]
        return
    # uvloop has no loop.sendfile. When nothing is queued ahead, os.sendfile sends what the
    # socket takes at once (the socket is non-blocking); only the rest is copied.
    sent = 0
    sock = transport.get_extra_info("socket")
    if sock is not None and transport.get_write_buffer_size() == 0:
        with contextlib.suppress(BlockingIOError):
            while sent < region.length:
                n = os.sendfile(sock.fileno(), region.fileno(), region.position + sent,
                                region.length - sent)
                if n == 0:
                    break
                sent += n
    if sent < region.length:
        transport.write(os.pread(region.fileno(), region.length - sent, region.position + sent))
