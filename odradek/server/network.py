"""The socket server: asyncio listeners and Kafka connections.

Each connection reads size-prefixed frames and answers them one at a time, in order, as
Kafka's SocketServer does (it mutes a channel while its request is being handled):
pipelined requests wait in the connection's queue, and the socket stops being read while
that queue is long. A request whose API or version we do not serve, or whose body does
not decode, closes that connection alone, as Kafka does; an ApiVersions request of an
unknown version is answered with UNSUPPORTED_VERSION and our ranges (KIP-511).

Memory is bounded whatever clients send: a frame's buffer grows with the bytes that
arrive (FrameReader), the bytes held for requests across all connections are capped
(RequestMemoryPool, queued.max.request.bytes), a request that does not arrive in full in
time closes its connection, and memory freed by dropped connections is handed back to
the operating system.

Connections are accepted within Kafka's connection limits (connection_quotas.py): each
listening socket's acceptor takes one connection at a time, refuses it when its address
has max.connections.per.ip, and otherwise waits, before it takes the next, until the
listener is under max.connections and its creation rate, so that clients wait in the
listen backlog as Kafka's do; a TLS handshake is bounded in time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from odradek.metrics.stats import RequestMetrics
from odradek.protocol.api import API_VERSIONS
from odradek.protocol.api_keys import ApiKey, ApiSpec
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.framing import FrameReader, Request, decode_request_header
from odradek.protocol.message import Message
from odradek.protocol.messages.request_header import RequestHeader
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.security.ssl_principal import NoMatchingRule, ssl_principal_name
from odradek.server.allocator import release_free_memory
from odradek.server.authenticator import Outcome, SaslServerAuthenticator, SaslState
from odradek.server.channel_builder import ListenerSecurity
from odradek.server.connection_quotas import (
    ConnectionLimits,
    ConnectionQuotas,
    TooManyConnections,
    ip_key,
)
from odradek.server.quota_manager import RequestTimer
from odradek.server.response import FileRegion, Part, encode_response_parts

log = logging.getLogger(__name__)

_MAX_QUEUED_FRAMES = 16  # stop reading a connection whose client pipelines this far ahead
_STOP_GRACE_S = 10.0  # how long stop() lets in-flight requests finish
# Memory of dropped connections (partial frames, scratch buffers) handed back to the
# operating system once this much has been freed, a second after the last of a burst.
_TRIM_AFTER_BYTES = 16 * 1024 * 1024
_TRIM_DELAY_S = 1.0
_SWEEP_INTERVAL_S = 1.0  # at most this between checks for stalled requests
_LOG_INTERVAL_S = 10.0  # at most one "connections wait for memory" line per this
_BACKLOG = 1024  # a listening socket's: where connections wait while the limits hold them
# A TLS handshake must end within min(connections.max.idle.ms, this), or its connection
# closes and frees its place in the connection limits. Kafka bounds a handshake only by
# connections.max.idle.ms of silence (10 minutes by default): that long, a client that
# stalls holds a slot of max.connections(.per.ip). A healthy handshake is a few round
# trips, and Kafka's own clients give up on one after socket.connection.setup.timeout.ms
# (10 s by default), so a handshake still going after that serves nobody.
_MAX_SSL_HANDSHAKE_S = 10.0
_ACCEPT_RETRY_S = 1.0  # after accept() failed (no descriptor left): asyncio's servers' too
# Why a connection's socket is not read (a connection may be paused for both).
_QUEUE_FULL = "queue"
_MEMORY_FULL = "memory"
_THROTTLED = "throttled"  # a client over its quota (KIP-219): not read for the throttle time
# The versions from which a client throttles itself on the throttle_time_ms of a response
# (KIP-219): the broker answers at once, then mutes the connection; to older versions the
# broker holds the response back for the throttle time instead.
_CLIENT_THROTTLES_FROM = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 8}
_INT = struct.Struct("i")

try:
    from fcntl import ioctl
    from termios import FIONREAD
except ImportError:  # not Unix: no hint, frames' buffers grow by steps alone
    ioctl = None  # type: ignore[assignment]
    FIONREAD = 0


def _bytes_waiting(fd: int) -> int:
    """How many bytes wait in a socket's receive queue (FIONREAD): bytes that have arrived,
    so a frame's buffer may be sized for them."""
    if ioctl is None or fd < 0:
        return 0
    try:
        return int(_INT.unpack(ioctl(fd, FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


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
    principal: KafkaPrincipal = ANONYMOUS
    frame_size: int = 0  # the request's size in bytes
    # Set by a handler for a client over its quota: the connection is not served for
    # this long (KIP-219).
    throttle_ms: int = 0
    started_ns: int = 0  # time.perf_counter_ns() when its frame was taken up
    # Set by a handler when request quotas are in force (KIP-124): told the time the
    # response took to encode.
    timer: RequestTimer | None = None
    # The request's name in the metrics when not its API's (Kafka's FetchConsumer and
    # FetchFollower), set by its handler.
    metric_name: str | None = None

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


class RequestMemoryPool:
    """queued.max.request.bytes: the bytes held for requests across all connections, both
    partial (the buffer a frame larger than a connection's scratch grows into as it
    arrives) and whole (read, waiting for or in its handler).

    A connection reserves each step of a frame's buffer before it reads on (Kafka's
    SocketServer allocates from its MemoryPool the same way, but the whole frame at once);
    when the step does not fit, the connection stops reading (pause_reading) and waits,
    in arrival order, until it does. Requests that fit the scratch need no reservation and
    keep flowing, one at a time per connection while the pool is full, so that clients
    with small requests are served meanwhile. Whole requests drain as they are handled;
    partial ones as they complete, close, or time out (socket.request.receive.timeout.ms).
    So that this never deadlocks, when the waiting connections hold every partial frame
    and no whole request is left to drain, the first in line reads on past the cap until
    its frame is whole: a request larger than the cap is admitted too, one at a time, as
    Kafka's non-strict pool admits one allocation past its size.
    """

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity if capacity is not None and capacity > 0 else None
        self.held = 0  # bytes held for requests, partial and whole
        self.whole = 0  # of which: requests read in full
        self.freed = 0  # bytes given up by dropped connections since the last trim
        # Connections waiting for memory, in arrival order: (bytes they wait for, bytes
        # of partial frame they hold meanwhile).
        self.waiting: dict[KafkaConnection, tuple[int, int]] = {}
        self.waiting_held = 0
        self.exempt: KafkaConnection | None = None  # reading on past the cap
        self.waits = 0  # how many times a connection waited for memory (a metric)
        self._logged_at = -_LOG_INTERVAL_S  # when connections last started waiting, logged
        self._logged = False  # whether the present wait was logged

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.held >= self.capacity

    def reserve(self, connection: KafkaConnection, nbytes: int) -> bool:
        """Takes `nbytes` for the next step of the connection's frame, if they fit (and
        nobody waits ahead of it); False: call wait()."""
        capacity = self.capacity
        if (capacity is None or connection is self.exempt
                or (not self.waiting and self.held + nbytes <= capacity)):
            self.held += nbytes
            return True
        return False

    def wait(self, connection: KafkaConnection, nbytes: int, holding: int) -> None:
        """The connection stops reading until `nbytes` are reserved for it."""
        now = time.monotonic()
        if not self.waiting and now - self._logged_at >= _LOG_INTERVAL_S:
            # At most one line per interval: near the cap, waits may come and go often.
            log.info("requests hold %d bytes of queued.max.request.bytes=%s: connections "
                     "reading large requests wait for memory", self.held, self.capacity)
            self._logged_at, self._logged = now, True
        self.waiting[connection] = (nbytes, holding)
        self.waiting_held += holding
        self.waits += 1
        connection.pause_reading_for(_MEMORY_FULL)
        self._wake()

    def released(self) -> None:
        """Call after the bytes held went down."""
        if self.waiting:
            self._wake()

    def forget(self, connection: KafkaConnection) -> None:
        """A connection closed (its bytes already given back)."""
        waited = self.waiting.pop(connection, None)
        if waited is not None:
            self.waiting_held -= waited[1]
        if self.exempt is connection:
            self.exempt = None
        self.released()

    def frame_completed(self, connection: KafkaConnection) -> None:
        if self.exempt is connection:
            self.exempt = None  # what it read is whole now: it drains as it is handled
            self.released()

    def _wake(self) -> None:
        capacity = self.capacity
        assert capacity is not None
        while self.waiting:
            connection = next(iter(self.waiting))
            nbytes, holding = self.waiting[connection]
            if self.held + nbytes > capacity:
                # Nothing will free memory for it (every partial frame waits, no whole
                # request is left to handle): it reads on past the cap. The receive timeout
                # drops it if its client has stalled, and then the next one goes on.
                if self.exempt is not None or self.held > self.waiting_held:
                    return
                self.exempt = connection
            del self.waiting[connection]
            self.waiting_held -= holding
            self.held += nbytes
            connection.memory_reserved(nbytes)
        if self._logged:
            self._logged = False
            log.info("requests hold %d bytes: connections read again", self.held)


class SocketServer:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        max_frame_size: int,
        connections_max_idle_ms: int,
        queued_max_request_bytes: int | None = None,
        request_receive_timeout_ms: int | None = None,
        connection_quotas: ConnectionQuotas | None = None,
        request_metrics: RequestMetrics | None = None,
    ) -> None:
        self.handler = handler
        # Kafka's RequestMetrics: each request counted and timed (None: not measured).
        self.request_metrics = request_metrics
        self.max_frame_size = max_frame_size
        self.idle_timeout_s = connections_max_idle_ms / 1000
        self.pool = RequestMemoryPool(queued_max_request_bytes)
        # socket.request.receive.timeout.ms: how long a request may take to arrive in full.
        self.receive_timeout_s = (None if request_receive_timeout_ms is None
                                  else request_receive_timeout_ms / 1000)
        # max.connections(.per.ip), max.connection.creation.rate: counted as connections are
        # accepted and closed; acceptors wait on _slots_changed, replaced at each change.
        self.quotas = connection_quotas or ConnectionQuotas()
        self.ssl_handshake_timeout_s = min(self.idle_timeout_s, _MAX_SSL_HANDSHAKE_S)
        self._slots_changed = asyncio.Event()
        self._limits_requested = self.quotas.limits
        self._limits_version = 0
        self._listening: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._setting_up: set[asyncio.Task[None]] = set()  # accepted, not yet served
        self._updates: set[asyncio.Task[None]] = set()
        self.listeners: list[BoundListener] = []
        self.security: dict[str, ListenerSecurity] = {}
        self.connections: set[KafkaConnection] = set()
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None
        self._trim: asyncio.TimerHandle | None = None
        self._stopping = False

    async def start(self, listeners: list[tuple[str, str, int]],
                    security: Mapping[str, ListenerSecurity] | None = None
                    ) -> list[BoundListener]:
        """Binds each (name, host, port); an empty host means every interface. `security`
        gives the TLS and SASL of listeners that have them (by name)."""
        loop = asyncio.get_running_loop()
        self.security.update(security or {})
        for name, _, _ in listeners:  # all counted before any accepts: the inter-broker
            self.quotas.add_listener(name)  # listener is exempt only beside others
        for name, host, port in listeners:
            sockets = await _listen(host, port)
            for sock in sockets:
                self._listening.append(sock)
                self._acceptors.append(loop.create_task(self._accept(sock, name),
                                                        name=f"acceptor-{name}"))
            bound_port = sockets[0].getsockname()[1]
            self.listeners.append(BoundListener(name, host, bound_port))
            log.info("listening on %s://%s:%d", name, host or "0.0.0.0", bound_port)
        if self.receive_timeout_s is not None and self._sweeper is None:
            self._sweeper = loop.create_task(self._drop_stalled_requests())
        return self.listeners

    async def stop(self) -> None:
        """Stops accepting, lets each connection finish the request it is handling, then
        closes them all."""
        self._stopping = True
        accepting = [*self._acceptors, *self._setting_up, *self._updates]
        for task in accepting:
            task.cancel()
        # Before anything awaits: a connection must not go on to its next request.
        for connection in list(self.connections):
            connection.stop_after_current()
        await asyncio.gather(*accepting, return_exceptions=True)
        for sock in self._listening:
            sock.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._trim is not None:
            self._trim.cancel()
        deadline = time.monotonic() + _STOP_GRACE_S
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()

    def next_connection_id(self) -> int:
        return next(self._ids)

    # ---- accepting, within the connection limits ----------------------------------------

    async def _accept(self, sock: socket.socket, listener: str) -> None:
        """A listening socket's acceptor, as Kafka's Acceptor: it takes one connection at a
        time and holds it, unread, until the connection limits let it in or refuse it;
        meanwhile the next connections wait in the socket's listen backlog, and are served
        once a slot frees. (asyncio's Server accepts all that comes and can stop only by
        closing; holding accepted connections instead would count none of them during
        its TLS handshake and keep a descriptor per waiting client. sock_accept and
        connect_accepted_socket leave the waiting to the kernel, as Kafka does.)"""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except ConnectionAbortedError:
                continue  # reset by its client before it was accepted
            except OSError as e:  # out of descriptors or memory: try again a little later
                log.error("listener %s cannot accept connections: %s", listener, e)
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            conn.setblocking(False)
            try:
                await self._wait_for_slot(listener)
            except BaseException:
                conn.close()
                raise
            ip = ip_key(address[0]) or str(address[0])
            try:
                self.quotas.inc(listener, ip)
            except TooManyConnections as e:
                log.info("Rejected connection from /%s on listener %s: the address already "
                         "has the configured maximum of %d connections "
                         "(max.connections.per.ip or its overrides)", ip, listener, e.limit)
                conn.close()
                continue
            task = loop.create_task(self._set_up(conn, listener, ip))
            self._setting_up.add(task)
            task.add_done_callback(self._setting_up.discard)
            self._close_excess()

    async def _wait_for_slot(self, listener: str) -> None:
        """Kafka's waitForConnectionSlot: the creation rates' throttle time passes, and the
        listener is under its limits, checked again as connections close or limits change."""
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        deadline = loop.time() + quotas.record_connection(listener) / 1000
        while (remaining := deadline - loop.time()) > 0 or not quotas.slot_available(listener):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slots_changed.wait(),
                                       remaining if remaining > 0 else None)

    async def _set_up(self, conn: socket.socket, listener: str, ip: str) -> None:
        """A connection let in and counted: its transport, after its TLS handshake (within
        ssl_handshake_timeout_s) on a TLS listener, served by a KafkaConnection. It gives
        its slot back when it closes, or here when it fails before."""
        security = self.security.get(listener)
        connection = KafkaConnection(self, listener, security)
        connection.quota_ip = ip
        tls: dict[str, Any] = {}
        if security is not None and security.ssl_context is not None:
            tls = {"ssl": security.ssl_context,
                   "ssl_handshake_timeout": self.ssl_handshake_timeout_s}
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: connection, conn, **tls)
        except Exception as e:  # the handshake failed, or took too long (aborted)
            log.log(logging.INFO if isinstance(e, ConnectionAbortedError) else logging.DEBUG,
                    "closing connection from %s on listener %s before it is served: %s",
                    ip, listener, e)
        finally:
            if connection.transport is None:  # never made: no connection_lost will come
                connection.release_slot()

    def connection_released(self, listener: str, ip: str) -> None:
        """A counted connection closed: acceptors waiting for a slot look again."""
        self.quotas.dec(listener, ip)
        self._wake_acceptors()

    def _wake_acceptors(self) -> None:
        self._slots_changed.set()
        self._slots_changed = asyncio.Event()

    def _close_excess(self) -> None:
        """Past max.connections (the exempt inter-broker listener took a connection in, or
        the limit was lowered), the least recently used connections of the other
        listeners close, as Kafka's processors close theirs (maxConnectionsExceeded)."""
        quotas = self.quotas
        excess = quotas.excess()
        if excess == 0:
            return
        counted = [c for c in self.connections if c.quota_ip is not None]
        excess -= sum(c.closing for c in counted)  # they give their slots back soon
        candidates = [c for c in counted
                      if not c.closing and not quotas.protected(c.listener_name)]
        for connection in heapq.nsmallest(excess, candidates, key=lambda c: c.last_active):
            log.info("closing connection %d from %s:%d on listener %s, the least recently "
                     "used: the broker has more than max.connections=%d", connection.id,
                     *connection.peer, connection.listener_name,
                     quotas.limits.max_connections)
            connection.close()

    async def set_connection_limits(self, limits: ConnectionLimits) -> None:
        """Puts connection limits in force, at start-up and as the settings change; the
        overrides' host names are resolved first (as Kafka's InetAddress.getByName)."""
        self._limits_requested = limits
        self._limits_version += 1
        version = self._limits_version
        resolved = {host: await _resolve(host) for host in limits.hostnames()}
        if version != self._limits_version:
            return  # newer limits came while resolving
        for host in self.quotas.configure(limits, resolved):
            log.warning("max.connections.per.ip.overrides: %s does not resolve, so its "
                        "override is left out", host)
        self._wake_acceptors()
        self._close_excess()

    def update_connection_limits(self, limits: ConnectionLimits) -> None:
        """set_connection_limits, from a dynamic config change (not a coroutine)."""
        if limits == self._limits_requested:
            return
        task = asyncio.get_running_loop().create_task(self.set_connection_limits(limits))
        self._updates.add(task)
        task.add_done_callback(self._updates.discard)

    async def _drop_stalled_requests(self) -> None:
        """A request that has not arrived in full within socket.request.receive.timeout.ms
        closes its connection, which frees what it held."""
        assert self.receive_timeout_s is not None
        timeout = self.receive_timeout_s
        while True:
            await asyncio.sleep(min(_SWEEP_INTERVAL_S, max(timeout / 4, 0.01)))
            oldest = time.monotonic() - timeout
            for connection in [c for c in self.connections
                               if c.partial_since is not None and c.partial_since < oldest]:
                connection.drop_stalled_request(timeout)

    def connection_freed(self, nbytes: int) -> None:
        """A closed connection gave up `nbytes` of buffers. glibc keeps freed memory in its
        heap (odradek/server/allocator.py keeps up to 256 MiB on purpose, so that the
        buffers of steady traffic are reused warm); after a burst of dropped connections,
        hand it back to the operating system, once, a second after the burst."""
        pool = self.pool
        pool.freed += nbytes
        if pool.freed >= _TRIM_AFTER_BYTES and not self._stopping:
            if self._trim is not None:
                self._trim.cancel()
            self._trim = asyncio.get_running_loop().call_later(_TRIM_DELAY_S, self._start_trim)

    def _start_trim(self) -> None:
        self._trim = None
        freed, self.pool.freed = self.pool.freed, 0
        log.debug("handing freed memory back to the OS after %d bytes of dropped connections",
                  freed)
        # In a thread: on a heap of a few hundred MiB, malloc_trim takes ~10 ms.
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(release_free_memory))
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Future[bool]] = set()  # tasks kept alive until they end


async def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for host:port, bound as loop.create_server binds them: one per
    address of the host (every interface when empty), IPv6 ones IPv6-only, SO_REUSEADDR."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # e.g. no IPv6 on this host
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                raise OSError(e.errno, f"error while attempting to bind on address "
                              f"{address!r}: {(e.strerror or '').lower()}") from None
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        if not sockets:
            raise OSError(f"no address to listen on for {host!r}")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def _resolve(host: str) -> str | None:
    """The address Java's InetAddress.getByName gives a host name: the loopback address
    for "", else the first of its addresses, IPv4 ones first; None when it does not
    resolve."""
    if not host:
        return "127.0.0.1"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None,
                                                             type=socket.SOCK_STREAM)
    except OSError:
        return None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0]) if infos else None


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: SocketServer, listener_name: str,
                 security: ListenerSecurity | None = None) -> None:
        self.server = server
        self.listener_name = listener_name
        self.id = server.next_connection_id()
        self.reader = FrameReader(server.max_frame_size)
        self.security = security
        self.tls = security is not None and security.ssl_context is not None
        self.principal = ANONYMOUS
        # SASL listeners: nothing but the handshake is served until the client is
        # authenticated, and requests are no larger than sasl.server.max.receive.size.
        self.authenticator: SaslServerAuthenticator | None = None
        self._raw_sasl = False  # SaslHandshake v0: the next frames are bare tokens
        if security is not None and security.sasl is not None:
            self.authenticator = security.sasl.authenticator()
            if security.sasl.max_receive_size < server.max_frame_size:
                self.reader.max_frame_size = security.sasl.max_receive_size
                self.reader.limit_name = "sasl.server.max.receive.size"
        self.frames: collections.deque[bytearray] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.peer = ("", 0)
        self._fd = -1  # the socket's, for FIONREAD
        self.last_active = time.monotonic()
        # When the partial request being read began arriving (None: no partial request).
        self.partial_since: float | None = None
        self._pool = server.pool
        self._partial_held = 0  # bytes of the partial frame's own buffer (and the next
        # step of it, once reserved), in the pool
        self._frame_arrived: asyncio.Event = asyncio.Event()
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self._paused_for: set[str] = set()  # why the socket is not read
        self._throttle_ms = 0  # the last request's throttle time (client quotas)
        self._throttle_first = False  # hold the response back rather than mute after it
        self._stopping = False
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        # The request being handled, for the request metrics: its API and context.
        self._timed_api: ApiSpec | None = None
        self._timed: RequestContext | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        # The address it is counted from in the connection limits, until it gives its
        # slot back (None: not counted, or given back).
        self.quota_ip: str | None = None

    # ---- asyncio.BufferedProtocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sock is not None:
            self._fd = sock.fileno()
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        security = self.security
        if security is not None and security.principal_mapper is not None:
            # SSL: asyncio calls this once the TLS handshake is done.
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            try:
                self.principal = KafkaPrincipal.user(
                    ssl_principal_name(der, security.principal_mapper))
            except NoMatchingRule as e:  # Kafka fails the authentication
                log.info("closing connection from %s:%d on listener %s: %s", *self.peer,
                         self.listener_name, e)
                transport.abort()
                return
        self.server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._serve())
        self._arm_idle_timer(self.server.idle_timeout_s)

    def get_buffer(self, sizehint: int) -> memoryview:
        # The socket is read straight into the frame's buffer: no copy of large requests.
        buffer = self.reader.get_buffer()
        held = self.reader.held
        if held != self._partial_held:  # the frame's buffer was allocated or grew
            self._pool.held += held - self._partial_held
            self._partial_held = held
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        now = self.last_active = time.monotonic()
        reader = self.reader
        try:
            frames = reader.buffer_updated(nbytes)
        except ProtocolError as e:
            log.warning("closing connection %d from %s:%d: %s", self.id, *self.peer, e)
            self.abort()
            return
        pool = self._pool
        if frames:
            # A frame read into its own buffer moves from partial to whole in the pool; one
            # copied out of the scratch is new memory.
            pool.held -= self._partial_held - reader.held
            self._partial_held = reader.held
            size = sum(map(len, frames))
            pool.held += size
            pool.whole += size
            pool.frame_completed(self)
            self.partial_since = now if reader.buffered else None
            self.frames.extend(frames)
            self._frame_arrived.set()
            if len(self.frames) >= _MAX_QUEUED_FRAMES:
                self.pause_reading_for(_QUEUE_FULL)
        elif self.partial_since is None:
            self.partial_since = now
        if reader.may_allocate:
            # The next read may allocate: size it for what already waits in the socket (a
            # request that streams in gets its buffer in one step), and reserve it first,
            # or wait for memory.
            nbytes = reader.next_allocation(_bytes_waiting(self._fd))
            if nbytes and pool.capacity is not None:
                if pool.reserve(self, nbytes):
                    self._partial_held += nbytes
                else:
                    pool.wait(self, nbytes, self._partial_held)
        elif self.frames and pool.full:
            # At the cap, a connection reads its next request once this one is handled.
            self.pause_reading_for(_QUEUE_FULL)

    def connection_lost(self, exc: Exception | None) -> None:
        self.release_slot()
        self.server.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._task is not None and not self._busy:
            self._task.cancel()
        self._stopping = True
        self._frame_arrived.set()
        self._can_write.set()
        # Give back what this connection held: its partial frame and the frames it will
        # never handle (the one being handled is given back when its handler returns).
        pool = self._pool
        queued = sum(map(len, self.frames))
        self.frames.clear()
        pool.held -= self._partial_held + queued
        pool.whole -= queued
        freed = queued + self.reader.discard()
        self._partial_held = 0
        self.partial_since = None
        pool.forget(self)
        self.server.connection_freed(freed)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- reading ----------------------------------------------------------------------

    def pause_reading_for(self, reason: str) -> None:
        if not self._paused_for and self.transport is not None:
            self.transport.pause_reading()
        self._paused_for.add(reason)

    def resume_reading_for(self, reason: str) -> None:
        if reason not in self._paused_for:
            return
        self._paused_for.discard(reason)
        if reason in (_QUEUE_FULL, _THROTTLED) and self.partial_since is not None:
            # The client was waiting on us, not the other way round: its partial request
            # gets a full receive timeout again.
            self.partial_since = time.monotonic()
        if not self._paused_for and self.transport is not None:
            self.transport.resume_reading()

    def memory_reserved(self, nbytes: int) -> None:
        """The pool reserved the next step of this connection's frame: read on."""
        self._partial_held += nbytes
        self.resume_reading_for(_MEMORY_FULL)

    def drop_stalled_request(self, timeout_s: float) -> None:
        log.info("closing connection %d from %s:%d: %d of the %d bytes of a request arrived "
                 "in %g s (socket.request.receive.timeout.ms)", self.id, *self.peer,
                 self.reader.buffered, self.reader.announced, timeout_s)
        self.abort()

    # ---- lifecycle --------------------------------------------------------------------

    def stop_after_current(self) -> None:
        self._stopping = True
        self._frame_arrived.set()
        if not self._busy:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def release_slot(self) -> None:
        """Gives the connection's place in the connection limits back, once."""
        if self.quota_ip is not None:
            ip, self.quota_ip = self.quota_ip, None
            self.server.connection_released(self.listener_name, ip)

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
                if _QUEUE_FULL in self._paused_for and (
                        len(self.frames) < _MAX_QUEUED_FRAMES // 2 if not self._pool.full
                        else not self.frames):
                    self.resume_reading_for(_QUEUE_FULL)
                self._busy = True
                try:
                    self._throttle_ms = 0
                    parts = await self._process(frame)
                    if self._throttle_ms > 0 and self._throttle_first:
                        await self._throttle(self._throttle_ms)
                    if parts:
                        await self._write(parts)
                    timed = self._timed
                    if timed is not None:
                        self._timed = None
                        metrics = self.server.request_metrics
                        if metrics is not None:
                            api = self._timed_api
                            assert api is not None
                            metrics.record(timed.metric_name or api.name,
                                           timed.header.request_api_version,
                                           time.perf_counter_ns() - timed.started_ns)
                finally:
                    self._busy = False
                    self.last_active = time.monotonic()
                    self._release_whole(len(frame))
                    del frame
                if self._throttle_ms > 0 and not self._throttle_first:
                    await self._throttle(self._throttle_ms)  # the request's memory freed
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError) as e:
            log.debug("connection %d from %s:%d: %s", self.id, *self.peer, e)
        except RuntimeError as e:
            # asyncio's loop.sendfile raises RuntimeError("Transport is closing") when the
            # client hung up mid-response: an expected disconnect, not an error.
            if self.transport is None or not self.transport.is_closing():
                log.exception("closing connection %d from %s:%d after an unexpected error",
                              self.id, *self.peer)
            else:
                log.debug("connection %d from %s:%d closed while answering: %s",
                          self.id, *self.peer, e)
        except Exception:
            log.exception("closing connection %d from %s:%d after an unexpected error",
                          self.id, *self.peer)
        self.close()

    async def _throttle(self, throttle_ms: int) -> None:
        """Kafka's muting of a throttled channel: its socket is not read, and the requests
        already read wait, for the throttle time."""
        self.pause_reading_for(_THROTTLED)
        try:
            await asyncio.sleep(throttle_ms / 1000)
        finally:
            self.resume_reading_for(_THROTTLED)

    def _release_whole(self, nbytes: int) -> None:
        pool = self._pool
        pool.held -= nbytes
        pool.whole -= nbytes
        pool.released()

    async def _process(self, frame: bytearray) -> list[Part] | None:
        started = time.perf_counter_ns()  # request quotas count from here (KIP-124)
        handler = self.server.handler
        authenticator = self.authenticator
        if self._raw_sasl:
            assert authenticator is not None
            return await self._sasl_outcome(authenticator.raw_token(bytes(frame)), None, 0, 0)
        try:
            header, api, pos = decode_request_header(frame)
        except ProtocolError as e:
            return self._refuse(f"unreadable request header: {e}")
        version = header.request_api_version
        if authenticator is not None and not authenticator.complete:
            if not authenticator.allows(api.api_key):
                return self._refuse(authenticator.refusal(api.name))
        elif authenticator is not None:
            # A SaslHandshake re-authenticates, even past the session's end (Kafka tries
            # maybeBeginServerReauthentication first); anything else past it closes.
            if api.api_key == ApiKey.SASL_HANDSHAKE and authenticator.may_reauthenticate():
                log.debug("connection %d from %s:%d re-authenticates", self.id, *self.peer)
            elif authenticator.expired():
                return self._refuse("the SASL session expired (connections.max.reauth.ms or "
                                    "the token's lifetime) without re-authentication")
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
        if authenticator is not None and api.api_key in (
                ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE) and not authenticator.complete:
            if api.api_key == ApiKey.SASL_HANDSHAKE:
                outcome = authenticator.handshake(version, cast(SaslHandshakeRequest, body))
            else:
                outcome = authenticator.authenticate(version,
                                                     cast(SaslAuthenticateRequest, body))
            return await self._sasl_outcome(outcome, api, version, header.correlation_id)
        context = RequestContext(self.id, self.peer[0], self.peer[1], self.listener_name,
                                 header, self.principal, len(frame), started_ns=started)
        self._timed_api, self._timed = api, context
        try:
            response = await handler.handle(Request(header, api, body), context)
        except CloseConnection as e:
            return self._refuse(str(e))
        if context.throttle_ms > 0:
            self._throttle_ms = context.throttle_ms
            self._throttle_first = version < _CLIENT_THROTTLES_FROM.get(api.api_key, 0)
        if response is None:
            return None
        timer = context.timer
        if timer is None:
            return encode_response_parts(api, response, version, header.correlation_id)
        began = time.perf_counter_ns()
        parts = encode_response_parts(api, response, version, header.correlation_id)
        timer.encoded(time.perf_counter_ns() - began)
        return parts

    async def _sasl_outcome(self, outcome: Outcome, api: ApiSpec | None, version: int,
                            correlation_id: int) -> list[Part] | None:
        """Sends a SASL request's answer; once authenticated, the connection serves every
        request, at the full request size. A failure is answered after
        connection.failed.authentication.delay.ms, and the connection closes."""
        authenticator = self.authenticator
        assert authenticator is not None
        parts: list[Part] = []
        if outcome.response is not None:
            assert api is not None
            parts = encode_response_parts(api, outcome.response, version, correlation_id)
        elif outcome.raw is not None:
            parts = [struct.pack(">i", len(outcome.raw)) + outcome.raw]
        if outcome.close:
            log.info("closing connection %d from %s:%d on listener %s: %s", self.id,
                     *self.peer, self.listener_name, outcome.error or "SASL failed")
            assert self.security is not None and self.security.sasl is not None
            await asyncio.sleep(self.security.sasl.failed_authentication_delay_ms / 1000)
            if parts:
                await self._write(parts)
            self._stopping = True
            self.close()
            return None
        self._raw_sasl = authenticator.state is SaslState.RAW_TOKENS
        if authenticator.complete:
            self.principal = authenticator.principal or ANONYMOUS
            self.reader.max_frame_size = self.server.max_frame_size
            self.reader.limit_name = "socket.request.max.bytes"
        return parts

    def _refuse(self, why: str) -> list[Part] | None:
        # Kafka cannot answer a request it cannot parse: it closes the connection.
        log.warning("closing connection %d from %s:%d: %s", self.id, *self.peer, why)
        self._stopping = True
        self.abort()
        return None  # nothing to send

    async def _write(self, parts: list[Part]) -> None:
        transport = self.transport
        if transport is None:
            return
        for part in parts:
            if transport.is_closing():
                return  # the client hung up mid-response: nothing more to send
            if isinstance(part, bytes):
                transport.write(part)
            elif self.tls:  # the bytes must go through TLS: no sendfile
                transport.write(os.pread(part.fileno(), part.length, part.position))
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
