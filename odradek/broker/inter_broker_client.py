"""The broker's own client for requests to other brokers: what Kafka's NetworkClient is
inside the broker, under its ControllerChannelManager, ReplicaFetcherThread and
BrokerToControllerChannelManager. It is not a client for users.

`BrokerConnection` is one TCP connection to one broker. It opens with ApiVersions (KIP-511)
and keeps the broker's ranges, so that each request goes out in the highest version both
sides know. Requests are pipelined: a response is matched to the oldest request in flight,
since a Kafka broker answers a connection's requests in order, and a correlation id that
does not match closes the connection. A request that gets no answer within its timeout
closes the connection too: a broker that does not answer one request (a paused process, a
lost network) will not answer the ones queued behind it.

`InterBrokerClient` keeps one connection per broker id, opened on first use and opened
again, after Kafka's exponential reconnect backoff, when a send finds it closed.

Each purpose should own its client, as in Kafka (the controller's channel, each replica
fetcher, the channel to the controller): a broker answers a connection's requests one at
a time, so a follower's long-polling Fetch would hold up a LeaderAndIsr queued behind it.

Failures callers can back off and retry from are DisconnectedError (the connection is
closed, broke or could not be made) and its subclasses RequestTimeoutError and
AuthenticationFailedError. A request the peer does not support raises the protocol's
UnsupportedVersionError before anything is sent. Every request must have a response (no
Produce with acks=0).

Security (InterBrokerSecurity, odradek/broker/inter_broker_security.py): over an SSL or
SASL_SSL inter-broker listener the connection is TLS from the start; over SASL_PLAINTEXT or
SASL_SSL it authenticates after ApiVersions, as Kafka's SaslClientAuthenticator does:
SaslHandshake v1, then SaslAuthenticate rounds until the mechanism's client is done, all
within the connection setup timeout. Without security, nothing of this happens.

Re-authentication (KIP-368): a broker whose SaslAuthenticate answer gives the session a
lifetime closes the connection at its first request after the session ended. The connection
re-authenticates in place, between requests, as Kafka's client does: from a time drawn in
85-95% of the lifetime, the next request first waits for a new SaslHandshake and
SaslAuthenticate exchange (requests already in flight are answered before the broker reads
the handshake: a broker answers a connection's requests in order), so after that time only
the handshake goes out on the old session. Closing and reopening the connection instead
would be simpler to write but would fail the requests in flight (a follower's long-polling
Fetch) every session. The lifetime is counted from when we sent the last
SaslAuthenticate, before the broker started counting, so our end of the session is never
later than the broker's. A connection left idle past that end is not re-authenticated (the
handshake would come too late): it counts as closed, and InterBrokerClient opens a new one
without a backoff, since nothing failed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import odradek
from odradek.protocol.api import API_VERSIONS
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError, UnsupportedVersionError
from odradek.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameReader,
    decode_response,
    encode_request,
)
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from odradek.protocol.primitives import INT32
from odradek.security.sasl import SaslAuthenticationError

if TYPE_CHECKING:
    from odradek.broker.inter_broker_security import InterBrokerSecurity

log = logging.getLogger(__name__)

CLIENT_SOFTWARE_NAME = "odradek-broker"
DEFAULT_CLIENT_ID = "odradek-broker"
# Kafka's defaults: request.timeout.ms (controller.socket.timeout.ms and
# replica.socket.timeout.ms are 30 s as well), socket.connection.setup.timeout.ms,
# reconnect.backoff.ms and reconnect.backoff.max.ms.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CONNECTION_SETUP_TIMEOUT_MS = 10_000
DEFAULT_RECONNECT_BACKOFF_MS = 50
DEFAULT_RECONNECT_BACKOFF_MAX_MS = 1_000
RECONNECT_BACKOFF_JITTER = 0.2  # Kafka's CommonClientConfigs.RECONNECT_BACKOFF_JITTER
# KIP-368, Kafka's SaslClientAuthenticator.ReauthInfo: re-authenticate after 85% of the
# session's lifetime plus up to 10% jitter (many connections do not all re-authenticate at
# once), leaving at least 5% for the handshake to reach the broker in time.
REAUTH_WINDOW = (0.85, 0.95)
SASL_HANDSHAKE_VERSION = 1  # v0 sends the tokens unframed: not supported
MAX_SASL_ROUNDS = 10  # no mechanism we know takes more than 2; a peer that goes on is broken

VersionRanges = Mapping[int, tuple[int, int]]  # API key -> (min, max) version, inclusive


class DisconnectedError(ConnectionError):
    """The connection to a broker is closed, broke, or could not be made: back off and try
    again (Kafka's DisconnectException; "the broker may not be available")."""


class RequestTimeoutError(DisconnectedError, TimeoutError):
    """No connection or no answer within the request's timeout. A request sent and left
    unanswered closes its connection, so this is a DisconnectedError as well as a
    TimeoutError."""


class AuthenticationFailedError(DisconnectedError):
    """SASL authentication (or re-authentication) failed: the broker answered
    SASL_AUTHENTICATION_FAILED (its message is `error_message`), or it could not prove
    itself to our client (a SCRAM ServerSignature that does not match). The connection is
    closed; InterBrokerClient backs off before the next attempt as after any failed
    connection (Kafka's SaslAuthenticationException)."""

    def __init__(self, message: str, error_message: str | None = None) -> None:
        super().__init__(message)
        self.error_message = error_message


@dataclass(frozen=True, slots=True)
class RequestBuilder:
    """A request whose body depends on the version chosen (Kafka's AbstractRequest.Builder).
    Fetch, for one, names the follower in ReplicaId up to v14 and in ReplicaState from
    v15, so a replica fetcher builds its request once the version is known."""

    api_key: int
    build: Callable[[int], Message]
    max_version: int | None = None  # the highest version the builder can fill in


def choose_version(api_key: int, peer: VersionRanges, max_version: int | None = None) -> int:
    """The highest version of an API that both this codec and the peer support, at most
    `max_version`. Raises UnsupportedVersionError when there is none."""
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown API key {api_key}")
    peer_range = peer.get(api_key)
    if peer_range is None:
        raise UnsupportedVersionError(f"the broker does not support {spec.name}")
    # An unstable latest version is still being designed: never sent, as in Kafka's clients.
    ours = spec.max_version - 1 if spec.latest_version_unstable else spec.max_version
    if max_version is not None:
        ours = min(ours, max_version)
    low, high = max(spec.min_version, peer_range[0]), min(ours, peer_range[1])
    if low > high:
        raise UnsupportedVersionError(
            f"no version of {spec.name} that both sides support: ours are "
            f"{spec.min_version}-{ours}, the broker's {peer_range[0]}-{peer_range[1]}")
    return high


def check_version(api_key: int, version: int, peer: VersionRanges) -> None:
    """Raises UnsupportedVersionError unless both this codec and the peer know `version`."""
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown API key {api_key}")
    peer_range = peer.get(api_key)
    if not spec.is_valid(version) or peer_range is None or not (
            peer_range[0] <= version <= peer_range[1]):
        theirs = f"{peer_range[0]}-{peer_range[1]}" if peer_range else "none"
        raise UnsupportedVersionError(
            f"{spec.name} v{version} is not supported: ours are "
            f"{spec.min_version}-{spec.max_version}, the broker's {theirs}")


def reconnect_backoff_ms(failures: int, rng: random.Random,
                         initial_ms: int = DEFAULT_RECONNECT_BACKOFF_MS,
                         max_ms: int = DEFAULT_RECONNECT_BACKOFF_MAX_MS) -> float:
    """How long to wait before connecting again after `failures` disconnections in a row
    (0 after a connection that worked): Kafka's ExponentialBackoff, doubling from
    reconnect.backoff.ms up to reconnect.backoff.max.ms, with 20% jitter either way."""
    base = min(initial_ms * 2.0 ** min(failures, 32), max(max_ms, initial_ms))
    return base * rng.uniform(1 - RECONNECT_BACKOFF_JITTER, 1 + RECONNECT_BACKOFF_JITTER)


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    future: asyncio.Future[bytearray]


class BrokerConnection:
    """One connection to one broker, used once: after it closes, make a new one."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connection_setup_timeout_ms: int = DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        security: InterBrokerSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.max_frame_size = max_frame_size
        self.security = security
        self.api_versions: dict[int, tuple[int, int]] = {}  # the broker's, from ApiVersions
        self.closed_at: float | None = None  # loop time when it closed, for the backoff
        # SASL: the session's lifetime as the broker last gave it (0: it does not end), how
        # many times it was re-authenticated, and (loop times) when the next request must
        # first re-authenticate and when the session ends, by our conservative clock.
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        self._reauth_at: float | None = None
        self._session_end: float | None = None
        self._reauthenticating: asyncio.Task[None] | None = None
        self.session_ended = False  # closed (or to close) because its SASL session ended
        self._transport: asyncio.Transport | None = None
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._correlation_id = 0
        self._ready = False
        self._closing_reason: str | None = None  # set once: why the connection closed
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        """Open, past the ApiVersions (and SASL) handshake, and not past the end of its SASL
        session."""
        return self._ready and self._closing_reason is None and not self._session_over()

    def _session_over(self) -> bool:
        """The SASL session ended without re-authentication (the connection sat idle through
        the re-authentication window): no request may go out on it any more."""
        return (self._session_end is not None and self._reauthenticating is None
                and self._loop is not None and self._loop.time() >= self._session_end)

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived."""
        return len(self._in_flight)

    # ---- connecting ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Opens the connection and exchanges ApiVersions, within the connection setup
        timeout. Raises DisconnectedError when the broker cannot be reached or answers
        nothing (or nothing sensible) in time."""
        if self._transport is not None or self._closing_reason is not None:
            raise RuntimeError(f"{self!r} is used once: make a new one to connect again")
        loop = self._loop = asyncio.get_running_loop()
        self._lost = loop.create_future()
        timeout_s = self.connection_setup_timeout_ms / 1000
        security = self.security
        stage = "ApiVersions"
        try:
            async with asyncio.timeout(timeout_s):
                if security is not None and security.ssl_context is not None:
                    # The TLS handshake is part of connecting. server_hostname is always the
                    # host, for SNI (Java sends it too); the context's check_hostname, which
                    # InterBrokerSecurity ties to ssl.endpoint.identification.algorithm,
                    # decides whether the certificate must name it.
                    stage = "TLS handshake or ApiVersions"
                    transport, _ = await loop.create_connection(
                        lambda: _ClientProtocol(self), self.host, self.port,
                        ssl=security.ssl_context, server_hostname=self.host)
                else:
                    transport, _ = await loop.create_connection(
                        lambda: _ClientProtocol(self), self.host, self.port)
                self._transport = transport
                sock = transport.get_extra_info("socket")
                if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await self._exchange_api_versions()
                if security is not None and security.sasl_mechanism is not None:
                    stage = "SASL"
                    await self._authenticate(security)
        except TimeoutError:
            # A paused broker still accepts connections (the kernel does), but never answers.
            self._close(f"no {stage} answer within {self.connection_setup_timeout_ms} ms")
            raise DisconnectedError(
                f"cannot connect to {self.host}:{self.port}: no answer within "
                f"{self.connection_setup_timeout_ms} ms") from None
        except DisconnectedError:
            self._close("the handshake failed")
            raise
        except (OSError, ProtocolError) as e:
            self._close(f"cannot connect: {e}")
            raise DisconnectedError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        except BaseException:  # cancelled: leave nothing open
            self._close("connecting was cancelled")
            raise
        self._ready = True
        log.debug("connected to %s:%d", self.host, self.port)

    async def _exchange_api_versions(self) -> None:
        request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                     client_software_version=odradek.__version__)
        version = API_SPECS[API_VERSIONS].max_version
        response = await self._exchange(request, version)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # KIP-511: the broker does not know our version and sent its ranges: retry with
            # the highest one both know (below v3, without the software name and version).
            peer = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            version = choose_version(API_VERSIONS, peer)
            retry = request if version >= 3 else ApiVersionsRequest()
            response = await self._exchange(retry, version)
        if response.error_code != ErrorCode.NONE:
            code = response.error_code
            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
            raise DisconnectedError(
                f"{self.host}:{self.port} refused ApiVersions v{version}: {name}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version)
                             for k in response.api_keys}

    async def _exchange(self, request: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
        frame = await self._send_frame(request, version)
        _, response = decode_response(frame, API_VERSIONS, version)
        return cast(ApiVersionsResponse, response)

    # ---- SASL ---------------------------------------------------------------------------

    async def _authenticate(self, security: InterBrokerSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate rounds (KIP-152), on a new connection or,
        to re-authenticate, on one with no other request allowed out meanwhile. Raises
        DisconnectedError (AuthenticationFailedError when the credentials are refused or
        the broker cannot prove itself); the caller closes the connection."""
        from odradek.security.sasl.client import create_sasl_client  # SCRAM: loaded here

        mechanism = security.sasl_mechanism
        assert mechanism is not None and security.username is not None
        assert security.password is not None
        where = f"{self.host}:{self.port}"
        if self.api_versions.get(ApiKey.SASL_HANDSHAKE, (0, -1))[1] < SASL_HANDSHAKE_VERSION:
            raise DisconnectedError(
                f"{where} does not support SaslHandshake v1: it cannot authenticate a client "
                "(is it a SASL listener of a broker older than Kafka 1.0?)")
        try:
            version = choose_version(ApiKey.SASL_AUTHENTICATE, self.api_versions, 2)
        except UnsupportedVersionError as e:
            raise DisconnectedError(f"{where} cannot authenticate: {e}") from None
        frame = await self._send_frame(SaslHandshakeRequest(mechanism=mechanism),
                                       SASL_HANDSHAKE_VERSION, authenticating=True)
        _, decoded = decode_response(frame, ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION)
        handshake = cast(SaslHandshakeResponse, decoded)
        if handshake.error_code != ErrorCode.NONE:
            enabled = ", ".join(handshake.mechanisms) or "none"
            raise DisconnectedError(
                f"{where} refused SASL mechanism {mechanism} "
                f"({_error_name(handshake.error_code)}): the mechanisms it enables are "
                f"{enabled}")
        loop = asyncio.get_running_loop()
        try:
            client = create_sasl_client(mechanism, security.username, security.password)
            token: bytes | None = client.initial_response()
            for _ in range(MAX_SASL_ROUNDS):
                assert token is not None
                sent_at = loop.time()  # before the broker starts counting the session
                frame = await self._send_frame(SaslAuthenticateRequest(auth_bytes=token),
                                               version, authenticating=True)
                _, decoded = decode_response(frame, ApiKey.SASL_AUTHENTICATE, version)
                response = cast(SaslAuthenticateResponse, decoded)
                if response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
                    raise AuthenticationFailedError(
                        f"authentication to {where} with SASL/{mechanism} failed: "
                        f"{response.error_message}", response.error_message)
                if response.error_code != ErrorCode.NONE:
                    raise DisconnectedError(
                        f"{where} answered SaslAuthenticate with "
                        f"{_error_name(response.error_code)}: {response.error_message}")
                token = client.evaluate_challenge(bytes(response.auth_bytes))
                if token is None:
                    self._start_session(sent_at, response.session_lifetime_ms)
                    return
        except SaslAuthenticationError as e:  # our client's verdict on the broker
            raise AuthenticationFailedError(
                f"authentication to {where} with SASL/{mechanism} failed: {e}") from e
        raise AuthenticationFailedError(
            f"authentication to {where} with SASL/{mechanism} did not complete in "
            f"{MAX_SASL_ROUNDS} rounds")

    def _start_session(self, sent_at: float, lifetime_ms: int) -> None:
        self.session_lifetime_ms = max(0, lifetime_ms)
        if lifetime_ms <= 0:  # the session does not end (v0 has no lifetime either)
            self._reauth_at = self._session_end = None
            return
        self._session_end = sent_at + lifetime_ms / 1000
        self._reauth_at = sent_at + lifetime_ms * random.uniform(*REAUTH_WINDOW) / 1000

    def _must_reauthenticate(self) -> bool:
        """A request may not go out now: the connection is re-authenticating, or is due to."""
        return self._reauthenticating is not None or (
            self._reauth_at is not None and self._loop is not None
            and self._loop.time() >= self._reauth_at)

    async def _reauthenticated(self) -> None:
        """Waits for the re-authentication every request now waits for, starting it if need
        be. Raises DisconnectedError (the connection is then closed)."""
        task = self._reauthenticating
        if task is None:
            if self._session_over():
                self.session_ended = True
                self._close("the SASL session ended before a request needed re-authentication")
                raise self._disconnected()
            task = self._reauthenticating = asyncio.get_running_loop().create_task(
                self._reauthenticate())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        # Shielded: one sender's timeout or cancellation must not stop the exchange that
        # the connection's other senders are waiting for.
        await asyncio.shield(task)

    async def _reauthenticate(self) -> None:
        assert self.security is not None
        try:
            async with asyncio.timeout(self.connection_setup_timeout_ms / 1000):
                await self._authenticate(self.security)
        except TimeoutError:
            self._close(f"no SASL re-authentication answer within "
                        f"{self.connection_setup_timeout_ms} ms")
            raise self._disconnected() from None
        except DisconnectedError as e:
            self._close(f"re-authentication failed: {e}")
            raise
        except ProtocolError as e:
            self._close(f"re-authentication failed: {e}")
            raise DisconnectedError(f"re-authentication to {self.host}:{self.port} "
                                    f"failed: {e}") from e
        finally:
            self._reauthenticating = None
        self.reauthentications += 1
        log.debug("re-authenticated to %s:%d; the session lasts %d ms", self.host, self.port,
                  self.session_lifetime_ms)

    # ---- requests -----------------------------------------------------------------------

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The version a request of this API goes out in: the highest both sides know."""
        return choose_version(api_key, self.api_versions, max_version)

    async def send(self, request: Message | RequestBuilder, api_version: int | None = None,
                   *, timeout_ms: int | None = None) -> Message:
        """Sends a request and returns the decoded response body.

        `api_version` None picks the highest version both sides support. Raises
        UnsupportedVersionError (nothing sent) when the broker does not support the API or
        the version; DisconnectedError when the connection is closed or closes before the
        answer; RequestTimeoutError, closing the connection, when no answer comes within
        `timeout_ms` (default request_timeout_ms). A cancelled send leaves the connection
        open: its response is dropped when it comes.
        """
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        return await self._send(request, api_version, deadline, timeout_ms)

    async def _send(self, request: Message | RequestBuilder, api_version: int | None,
                    deadline: float, timeout_ms: int) -> Message:
        """send() by loop time `deadline`; `timeout_ms` is what the caller asked for."""
        if self._closing_reason is None and self._session_over():
            self.session_ended = True
            self._close("the SASL session ended without re-authentication")
        if not self.connected:
            raise self._disconnected()
        api_key, body, version = self._prepare(request, api_version)
        if asyncio.get_running_loop().time() >= deadline:  # spent connecting: do not send
            raise RequestTimeoutError(f"{API_SPECS[api_key].name} to {self.host}:{self.port}: "
                                      f"no time left of {timeout_ms} ms")
        try:
            async with asyncio.timeout_at(deadline) as timeout:
                frame = await self._send_frame(body, version)
        except TimeoutError:
            if not timeout.expired():
                raise  # not ours: a failure raised by the request itself
            name = API_SPECS[api_key].name
            self._close(f"{name} v{version} got no answer within {timeout_ms} ms")
            raise RequestTimeoutError(
                f"{name} v{version} to {self.host}:{self.port} got no answer within "
                f"{timeout_ms} ms; the connection is closed") from None
        _, response = decode_response(frame, api_key, version)
        return response

    def _prepare(self, request: Message | RequestBuilder,
                 api_version: int | None) -> tuple[int, Message, int]:
        if isinstance(request, RequestBuilder):
            api_key, max_version = request.api_key, request.max_version
        else:
            api_key = getattr(type(request), "API_KEY", -1)
            max_version = None
            spec = API_SPECS.get(api_key)
            if spec is None or type(request) is not spec.request_class:
                raise TypeError(f"{type(request).__name__} is not a request")
        if api_version is None:
            version = choose_version(api_key, self.api_versions, max_version)
        else:
            check_version(api_key, api_version, self.api_versions)
            version = api_version
        body = request.build(version) if isinstance(request, RequestBuilder) else request
        return api_key, body, version

    async def _send_frame(self, body: Message, version: int, *,
                          authenticating: bool = False) -> bytearray:
        """Writes one request and waits for its response frame (no timeout of its own).
        Unless `authenticating` (the SASL exchange's own requests), a request due to wait
        for re-authentication waits for it."""
        while True:
            if not self._can_write.is_set():  # the broker is not reading: hold new requests
                await self._can_write.wait()
            elif not authenticating and self._closing_reason is None and (
                    self._must_reauthenticate()):
                await self._reauthenticated()
            else:
                break
        transport = self._transport
        if transport is None or self._closing_reason is not None:
            raise self._disconnected()
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF  # wraps as Kafka's
        correlation_id = self._correlation_id
        frame = encode_request(body, version, correlation_id, self.client_id)
        future: asyncio.Future[bytearray] = asyncio.get_running_loop().create_future()
        # No await between registering and writing: requests are on the wire in the order
        # of the queue, which is the order the broker answers them in.
        self._in_flight.append(_InFlight(correlation_id, future))
        transport.write(frame)
        return await future

    # ---- responses, from the protocol -------------------------------------------------------

    def _frames_received(self, frames: list[bytearray]) -> None:
        for frame in frames:
            if not self._in_flight:
                self._close("a response came with no request in flight", error=True)
                return
            entry = self._in_flight.popleft()
            got = INT32.unpack_from(frame, 0)[0] if len(frame) >= 4 else None
            if got != entry.correlation_id:
                self._in_flight.appendleft(entry)  # failed with the rest below
                self._close(f"correlation id mismatch: expected {entry.correlation_id}, "
                            f"got {got}", error=True)
                return
            if not entry.future.done():  # done: its sender was cancelled or timed out
                entry.future.set_result(frame)

    def _connection_lost(self, exc: Exception | None) -> None:
        self._close(f"connection lost: {exc}" if exc else "closed by the broker")
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    # ---- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; every request in flight fails with DisconnectedError."""
        self._close("closed locally")

    async def wait_closed(self) -> None:
        """Returns once the socket is closed."""
        if self._lost is not None and self._transport is not None:
            await asyncio.shield(self._lost)

    def _close(self, reason: str, error: bool = False) -> None:
        if self._closing_reason is not None:
            return
        self._closing_reason = reason
        self.closed_at = self._loop.time() if self._loop is not None else 0.0
        if error:
            log.error("closing the connection to %s:%d: %s", self.host, self.port, reason)
        else:
            log.debug("closing the connection to %s:%d: %s", self.host, self.port, reason)
        in_flight, self._in_flight = self._in_flight, collections.deque()
        for entry in in_flight:
            if not entry.future.done():
                entry.future.set_exception(self._disconnected())
        self._can_write.set()  # wake senders waiting to write: they find their future failed
        if self._transport is not None:
            # abort, not close: close would wait to flush what a paused broker never reads.
            self._transport.abort()
        elif self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def _disconnected(self) -> DisconnectedError:
        reason = self._closing_reason or "not connected"
        return DisconnectedError(f"connection to {self.host}:{self.port} is closed: {reason}")


def _error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


class _ClientProtocol(asyncio.BufferedProtocol):
    """The transport's callbacks, read into a FrameReader: a large Fetch response is read
    straight into a buffer of its own."""

    def __init__(self, connection: BrokerConnection) -> None:
        self._connection = connection
        self._reader = FrameReader(connection.max_frame_size)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._reader.buffer_updated(nbytes)
        except ProtocolError as e:  # a size beyond max_frame_size: the stream is lost
            self._connection._close(str(e), error=True)
            return
        self._connection._frames_received(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection._connection_lost(exc)

    def pause_writing(self) -> None:
        self._connection._can_write.clear()

    def resume_writing(self) -> None:
        self._connection._can_write.set()


# ---- the connections of one purpose, by broker id -----------------------------------------


@dataclass(slots=True)
class _Node:
    host: str
    port: int
    connection: BrokerConnection | None = None
    connecting: asyncio.Task[BrokerConnection] | None = None
    failures: int = 0  # disconnections since the last connection that worked
    next_attempt: float = 0.0  # loop time before which no new connection is tried


class InterBrokerClient:
    """Connections to brokers by id, opened on first use and opened again after a backoff
    when they close. `send` never hangs: every wait in it (the backoff, connecting, the
    answer) is bounded by its timeout. `security` (TLS, SASL) applies to every connection:
    a broker builds it once from its inter-broker listener (inter_broker_security)."""

    def __init__(
        self,
        endpoints: Mapping[int, tuple[str, int]] | None = None,
        *,
        client_id: str = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connection_setup_timeout_ms: int = DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
        reconnect_backoff_ms: int = DEFAULT_RECONNECT_BACKOFF_MS,
        reconnect_backoff_max_ms: int = DEFAULT_RECONNECT_BACKOFF_MAX_MS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        rng: random.Random | None = None,
        security: InterBrokerSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        self.security = security  # TLS and SASL of every connection; None: PLAINTEXT
        self.request_timeout_ms = request_timeout_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_frame_size = max_frame_size
        self._rng = rng or random.Random()
        self._nodes: dict[int, _Node] = {}
        self._closed = False
        self.update_endpoints(endpoints or {})

    @property
    def endpoints(self) -> dict[int, tuple[str, int]]:
        return {broker_id: (n.host, n.port) for broker_id, n in self._nodes.items()}

    def update_endpoints(self, endpoints: Mapping[int, tuple[str, int]]) -> None:
        """Sets the brokers this client talks to, replacing the previous set. A broker that
        moved or left has its connection closed (requests in flight on it fail)."""
        for broker_id, node in list(self._nodes.items()):
            if endpoints.get(broker_id) != (node.host, node.port):
                del self._nodes[broker_id]
                if node.connection is not None:
                    node.connection.close()
        for broker_id, (host, port) in endpoints.items():
            if broker_id not in self._nodes:
                self._nodes[broker_id] = _Node(host, port)

    def is_connected(self, broker_id: int) -> bool:
        node = self._nodes.get(broker_id)
        return node is not None and node.connection is not None and node.connection.connected

    async def send(self, broker_id: int, request: Message | RequestBuilder,
                   api_version: int | None = None, *, timeout_ms: int | None = None) -> Message:
        """Sends a request to a broker, connecting first if need be; `timeout_ms` (default
        request_timeout_ms) bounds the whole call. Raises what BrokerConnection.send
        raises, and DisconnectedError when the broker is unknown or cannot be reached."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        connection = await self._connection(broker_id, deadline)
        return await connection._send(request, api_version, deadline, timeout_ms)

    async def connection(self, broker_id: int, timeout_ms: int | None = None
                         ) -> BrokerConnection:
        """The open connection to a broker, made now if need be (after the backoff the last
        disconnection calls for) within `timeout_ms` (default request_timeout_ms): for its
        `api_versions`, or to pipeline requests on it."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return await self._connection(
            broker_id, asyncio.get_running_loop().time() + timeout_ms / 1000)

    async def _connection(self, broker_id: int, deadline: float) -> BrokerConnection:
        if self._closed:
            raise DisconnectedError("the inter-broker client is closed")
        node = self._nodes.get(broker_id)
        if node is None:
            raise DisconnectedError(f"no endpoint known for broker {broker_id}")
        connection = node.connection
        if connection is not None and connection.connected:
            return connection
        if connection is not None:
            if connection.session_ended or connection.closed_at is None:
                # Its SASL session ended while it sat idle: nothing failed, no backoff.
                connection.session_ended = True
                connection._close("the SASL session ended without re-authentication")
            else:  # it closed: back off from when it did
                self._failed(node, connection.closed_at)
            node.connection = None
        if node.connecting is None:
            task = asyncio.get_running_loop().create_task(self._connect(broker_id, node))
            # Its failure reaches every waiter; with no waiter left, it is retrieved here.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            node.connecting = task
        task = node.connecting
        loop = asyncio.get_running_loop()
        # asyncio.wait neither cancels the shared attempt at our timeout nor turns its
        # cancellation (at close) into ours.
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
        if not done:
            raise RequestTimeoutError(
                f"no connection to broker {broker_id} at {node.host}:{node.port} in time")
        if task.cancelled():
            raise DisconnectedError("the inter-broker client is closed")
        return task.result()

    async def _connect(self, broker_id: int, node: _Node) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        try:
            delay = node.next_attempt - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            connection = BrokerConnection(
                node.host, node.port, client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                connection_setup_timeout_ms=self.connection_setup_timeout_ms,
                max_frame_size=self.max_frame_size, security=self.security)
            try:
                await connection.connect()
            except DisconnectedError as e:
                self._failed(node, loop.time())
                log.info("cannot connect to broker %d at %s:%d (attempt %d): %s",
                         broker_id, node.host, node.port, node.failures, e)
                raise
            if self._nodes.get(broker_id) is not node or self._closed:
                connection.close()  # it moved, left, or we closed while connecting
                raise DisconnectedError(f"broker {broker_id} is no longer at "
                                        f"{node.host}:{node.port}")
            node.connection, node.failures = connection, 0
            return connection
        finally:
            node.connecting = None

    def _failed(self, node: _Node, when: float) -> None:
        backoff_ms = reconnect_backoff_ms(node.failures, self._rng, self.reconnect_backoff_ms,
                                          self.reconnect_backoff_max_ms)
        node.next_attempt = when + backoff_ms / 1000
        node.failures += 1

    async def close(self) -> None:
        """Closes every connection (requests in flight fail with DisconnectedError) and
        stops connection attempts; later sends raise DisconnectedError."""
        self._closed = True
        tasks = []
        connections = []
        for node in self._nodes.values():
            if node.connecting is not None:
                node.connecting.cancel()
                tasks.append(node.connecting)
            if node.connection is not None:
                node.connection.close()
                connections.append(node.connection)
        if tasks:
            await asyncio.wait(tasks)
        for connection in connections:
            await connection.wait_closed()
