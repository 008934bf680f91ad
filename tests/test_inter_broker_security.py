"""The broker's own client over TLS and SASL (odradek/broker/inter_broker_client.py with
InterBrokerSecurity): against a real broker process with SSL, SASL_PLAINTEXT and SASL_SSL
listeners, the security built from Kafka's settings by inter_broker_security() connects and
gets answers; wrong passwords, unknown mechanisms, untrusted or misnamed certificates are
refused; a 1.5 s SASL session is re-authenticated in place (KIP-368) without the broker
ever closing it. Loopback peers that are not brokers show the handshake's edge cases."""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast

import pytest
from support.broker import BrokerProcess
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore

from odradek.broker.inter_broker_client import (
    AuthenticationFailedError,
    BrokerConnection,
    DisconnectedError,
    InterBrokerClient,
)
from odradek.broker.inter_broker_security import InterBrokerSecurity, inter_broker_security
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import FrameDecoder, decode_request, encode_response
from odradek.protocol.message import Message
from odradek.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from odradek.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
)
from odradek.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from odradek.protocol.messages.metadata_request import MetadataRequest
from odradek.protocol.messages.metadata_response import MetadataResponse
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from odradek.security.sasl.scram import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramSaslServer,
    credential_from_password,
    salted_password,
)
from odradek.security.ssl_factory import client_ssl_context
from odradek.server.config import BrokerConfig
from odradek.storage.errors import InvalidConfigError

HOST = "127.0.0.1"
TEST_TIMEOUT_S = 20
USER, PASSWORD = "broker", "broker-secret"
REAUTH_MS = 1500  # the SHORT listener's sessions
GENERIC = ("Authentication failed during authentication due to invalid credentials with SASL "
           "mechanism {}")
SESSION_EXPIRED = "SASL session expired"  # what the broker logs when it closes one
T = TypeVar("T")

pytestmark = pytest.mark.timeout(120)


def run(test: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner() as runner:
        return runner.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))


def jaas(module: str, **options: str) -> str:
    return f"org.apache.kafka.common.security.{module} required " + " ".join(
        f'{k}="{v}"' for k, v in options.items()) + ";"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority("Odradek Test CA")
    return {
        "ca": str(write_pem_truststore(d / "ca.pem", ca)),
        # SANs localhost and 127.0.0.1: the name we connect to
        "server": str(write_pem_keystore(d / "server.pem", ca.issue("localhost"))),
        # a certificate of the right CA for another host
        "elsewhere": str(write_pem_keystore(d / "elsewhere.pem", ca.issue(
            "elsewhere.example.com", dns_names=("elsewhere.example.com",), ip_addresses=()))),
        "other_ca": str(write_pem_truststore(d / "other-ca.pem",
                                             CertificateAuthority("Another CA"))),
    }


def settings(tls: dict[str, str]) -> dict[str, str]:
    """The broker's settings, which are also what inter_broker_security() reads."""
    values = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,ELSEWHERE://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SHORT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,ELSEWHERE:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "SHORT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": tls["server"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": tls["ca"],
        "listener.name.elsewhere.ssl.keystore.location": tls["elsewhere"],
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.short.connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "50",
    }
    plain = jaas("plain.PlainLoginModule", username=USER, password=PASSWORD,
                 user_broker=PASSWORD, user_alice="alice-secret")
    scram = jaas("scram.ScramLoginModule", username=USER, password=PASSWORD)
    for listener in ("sasl_plaintext", "sasl_ssl", "short"):
        values[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            values[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = scram
    return values


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, tls: dict[str, str]
           ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("inter-broker-security"),
                            settings(tls)).start()
    run(lambda: add_scram_user(process))
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


async def add_scram_user(broker: BrokerProcess) -> None:
    """The broker's own SCRAM credentials, as kafka-configs adds them (a salted password)."""
    connection = BrokerConnection(HOST, broker.port)
    await connection.connect()
    try:
        upsertions = []
        for mechanism, spec in SCRAM_MECHANISMS.items():
            salt = b"inter-broker-salt-" + mechanism.encode()
            upsertions.append(ScramCredentialUpsertion(
                name=USER, mechanism=spec.type, iterations=4096, salt=salt,
                salted_password=salted_password(mechanism, PASSWORD, salt, 4096)))
        response = cast(AlterUserScramCredentialsResponse, await connection.send(
            AlterUserScramCredentialsRequest(upsertions=upsertions)))
        assert all(r.error_code == ErrorCode.NONE for r in response.results), response
    finally:
        connection.close()


def config_for(tls: dict[str, str], listener: str, mechanism: str | None = None,
               **overrides: str) -> BrokerConfig:
    """The broker's settings with `listener` as its inter-broker listener."""
    values = {**settings(tls), "inter.broker.listener.name": listener, **overrides}
    if mechanism is not None:
        values["sasl.mechanism.inter.broker.protocol"] = mechanism
    return BrokerConfig.from_properties(values)


async def metadata(connection: BrokerConnection | InterBrokerClient) -> MetadataResponse:
    request = MetadataRequest(topics=[])
    if isinstance(connection, InterBrokerClient):
        return cast(MetadataResponse, await connection.send(1, request))
    return cast(MetadataResponse, await connection.send(request))


def session_expired_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_lines if SESSION_EXPIRED in line]


# ---- every kind of listener, with the security built from the settings -----------------------


@pytest.mark.parametrize("listener,mechanism", [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
])
def test_connects_and_gets_answers(broker: BrokerProcess, tls: dict[str, str], listener: str,
                                   mechanism: str | None) -> None:
    security = inter_broker_security(config_for(tls, listener, mechanism))
    assert security is not None and security.security_protocol == listener
    assert security.sasl_mechanism == mechanism
    assert (security.ssl_context is not None) == listener.endswith("SSL")
    port = broker.ports[listener]

    async def test() -> None:
        connection = BrokerConnection(HOST, port, security=security)
        await connection.connect()
        try:
            assert connection.connected
            tls_object = connection._transport.get_extra_info("ssl_object")  # type: ignore
            assert (tls_object is not None) == listener.endswith("SSL")
            response = await metadata(connection)
            assert [b.node_id for b in response.brokers] == [1]
            # pipelined requests after the handshake
            answers = await asyncio.gather(*(metadata(connection) for _ in range(5)))
            assert all(a.brokers for a in answers)
            assert connection.session_lifetime_ms == 0  # no connections.max.reauth.ms here
        finally:
            connection.close()
            await connection.wait_closed()
        client = InterBrokerClient({1: (HOST, port)}, security=security)
        try:
            assert (await metadata(client)).brokers
        finally:
            await client.close()

    run(test)


def test_without_sasl_the_sasl_listener_serves_nothing(broker: BrokerProcess) -> None:
    # What the SASL tests above got past: Metadata before authentication closes.
    async def test() -> None:
        connection = BrokerConnection(HOST, broker.ports["SASL_PLAINTEXT"])
        await connection.connect()
        with pytest.raises(DisconnectedError):
            await metadata(connection)

    run(test)


# ---- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("listener,mechanism,message", [
    ("SASL_PLAINTEXT", "PLAIN", "Authentication failed: Invalid username or password"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", GENERIC.format("SCRAM-SHA-256")),
    ("SASL_SSL", "SCRAM-SHA-512", GENERIC.format("SCRAM-SHA-512")),
])
def test_a_wrong_password_fails_with_the_brokers_message(
        broker: BrokerProcess, tls: dict[str, str], listener: str, mechanism: str,
        message: str) -> None:
    good = inter_broker_security(config_for(tls, listener, mechanism))
    assert good is not None
    security = InterBrokerSecurity(good.ssl_context, good.check_hostname, mechanism, USER,
                                   "not-the-password")

    async def test() -> None:
        connection = BrokerConnection(HOST, broker.ports[listener], security=security)
        with pytest.raises(AuthenticationFailedError) as excinfo:
            await connection.connect()
        assert isinstance(excinfo.value, DisconnectedError)
        assert excinfo.value.error_message == message
        assert message in str(excinfo.value)
        assert not connection.connected

    run(test)


def test_an_authentication_failure_backs_off_like_any_failed_connect(
        broker: BrokerProcess) -> None:
    security = InterBrokerSecurity(sasl_mechanism="PLAIN", username=USER, password="wrong")

    async def test() -> None:
        client = InterBrokerClient({1: (HOST, broker.ports["SASL_PLAINTEXT"])},
                                   security=security, reconnect_backoff_ms=400,
                                   reconnect_backoff_max_ms=400)
        try:
            with pytest.raises(AuthenticationFailedError, match="Invalid username"):
                await metadata(client)
            started = time.monotonic()
            with pytest.raises(AuthenticationFailedError, match="Invalid username"):
                await metadata(client)
            assert time.monotonic() - started >= 0.4 * 0.8  # the backoff, less its jitter
        finally:
            await client.close()

    run(test)


def test_a_mechanism_the_listener_lacks_is_refused_with_the_ones_it_has(
        broker: BrokerProcess) -> None:
    token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJicm9rZXIifQ."
    security = InterBrokerSecurity(sasl_mechanism="OAUTHBEARER", username="",
                                   password=token)

    async def test() -> None:
        connection = BrokerConnection(HOST, broker.ports["SASL_PLAINTEXT"], security=security)
        with pytest.raises(DisconnectedError) as excinfo:
            await connection.connect()
        assert not isinstance(excinfo.value, AuthenticationFailedError)
        assert re.search(r"refused SASL mechanism OAUTHBEARER \(UNSUPPORTED_SASL_MECHANISM\): "
                         r"the mechanisms it enables are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
                         str(excinfo.value)), excinfo.value

    run(test)


def test_sasl_against_a_listener_without_sasl_is_refused(broker: BrokerProcess) -> None:
    security = InterBrokerSecurity(sasl_mechanism="PLAIN", username=USER, password=PASSWORD)

    async def test() -> None:
        connection = BrokerConnection(HOST, broker.port, security=security)
        with pytest.raises(DisconnectedError, match="refused SASL mechanism PLAIN"):
            await connection.connect()

    run(test)


# ---- certificates --------------------------------------------------------------------------


def test_hostname_verification_on_and_off(broker: BrokerProcess, tls: dict[str, str]) -> None:
    # SSL's certificate names 127.0.0.1; ELSEWHERE's only elsewhere.example.com.
    checked = inter_broker_security(config_for(tls, "ELSEWHERE"))
    unchecked = inter_broker_security(config_for(
        tls, "ELSEWHERE", **{"listener.name.elsewhere.ssl.endpoint.identification.algorithm":
                             ""}))
    assert checked is not None and checked.check_hostname
    assert checked.ssl_context is not None and checked.ssl_context.check_hostname
    assert unchecked is not None and not unchecked.check_hostname
    assert unchecked.ssl_context is not None and not unchecked.ssl_context.check_hostname
    assert unchecked.ssl_context.verify_mode == ssl.CERT_REQUIRED  # the chain still is

    async def test() -> None:
        right_name = BrokerConnection(HOST, broker.ports["SSL"], security=checked)
        await right_name.connect()  # the same CA and checks, a certificate naming the host
        assert (await metadata(right_name)).brokers
        right_name.close()
        wrong_name = BrokerConnection(HOST, broker.ports["ELSEWHERE"], security=checked)
        with pytest.raises(DisconnectedError, match=r"IP address mismatch|certificate verify"):
            await wrong_name.connect()
        not_checked = BrokerConnection(HOST, broker.ports["ELSEWHERE"], security=unchecked)
        await not_checked.connect()
        assert (await metadata(not_checked)).brokers
        not_checked.close()

    run(test)


def test_an_untrusted_certificate_and_a_plaintext_port_are_refused(
        broker: BrokerProcess, tls: dict[str, str]) -> None:
    stranger = InterBrokerSecurity(client_ssl_context({
        "ssl.truststore.type": "PEM", "ssl.truststore.location": tls["other_ca"]}))
    trusting = inter_broker_security(config_for(tls, "SSL"))

    async def test() -> None:
        connection = BrokerConnection(HOST, broker.ports["SSL"], security=stranger)
        with pytest.raises(DisconnectedError, match="certificate verify failed"):
            await connection.connect()
        started = time.monotonic()
        connection = BrokerConnection(HOST, broker.port, security=trusting,
                                      connection_setup_timeout_ms=3000)
        with pytest.raises(DisconnectedError):
            await connection.connect()
        assert time.monotonic() - started < 5

    run(test)


# ---- re-authentication (KIP-368) -------------------------------------------------------------


def short_security(mechanism: str) -> InterBrokerSecurity:
    return InterBrokerSecurity(sasl_mechanism=mechanism, username=USER, password=PASSWORD)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_a_short_session_is_re_authenticated_in_place(broker: BrokerProcess,
                                                       mechanism: str) -> None:
    before = len(session_expired_lines(broker))

    async def test() -> None:
        connection = BrokerConnection(HOST, broker.ports["SHORT"],
                                      security=short_security(mechanism))
        await connection.connect()
        assert connection.session_lifetime_ms == REAUTH_MS
        loop = asyncio.get_running_loop()
        end = loop.time() + 4.0
        answered = 0
        try:
            while loop.time() < end:
                # Three at a time: some are in flight when re-authentication begins.
                answers = await asyncio.gather(*(metadata(connection) for _ in range(3)))
                assert all(a.brokers for a in answers)
                answered += 3
                await asyncio.sleep(0.05)
            assert connection.connected
            assert connection.reauthentications >= 2  # 4 s of 1.5 s sessions
            assert connection.session_lifetime_ms == REAUTH_MS
        finally:
            connection.close()
        assert answered >= 30

    run(test)
    time.sleep(0.2)  # the broker's log is read by a thread
    assert len(session_expired_lines(broker)) == before, session_expired_lines(broker)


def test_a_session_that_ended_while_idle_is_not_used(broker: BrokerProcess) -> None:
    before = len(session_expired_lines(broker))
    security = short_security("SCRAM-SHA-512")

    async def test() -> None:
        # Alone, a connection whose session ended refuses to send rather than be closed.
        connection = BrokerConnection(HOST, broker.ports["SHORT"], security=security)
        await connection.connect()
        assert (await metadata(connection)).brokers
        await asyncio.sleep(REAUTH_MS / 1000 + 0.1)
        assert not connection.connected
        with pytest.raises(DisconnectedError, match="SASL session ended"):
            await metadata(connection)
        assert connection.session_ended
        # InterBrokerClient opens a new connection at once: nothing failed.
        client = InterBrokerClient({1: (HOST, broker.ports["SHORT"])}, security=security,
                                   reconnect_backoff_ms=5000, reconnect_backoff_max_ms=5000)
        try:
            assert (await metadata(client)).brokers
            first = await client.connection(1)
            await asyncio.sleep(REAUTH_MS / 1000 + 0.1)
            started = time.monotonic()
            assert (await metadata(client)).brokers
            assert time.monotonic() - started < 2  # no 5 s backoff
            assert await client.connection(1) is not first
            assert first.session_ended and not first.connected
        finally:
            await client.close()

    run(test)
    time.sleep(0.2)
    assert len(session_expired_lines(broker)) == before, session_expired_lines(broker)


# ---- peers that are not brokers --------------------------------------------------------------


class _SaslPeer:
    """A loopback peer that answers ApiVersions with `ranges`, then SASL requests as the
    test says: `handshake` and `authenticate` return the response, or None for none."""

    def __init__(self, ranges: list[ApiVersion],
                 handshake: Callable[[], Message | None] | None = None,
                 authenticate: Callable[[bytes], Message | None] | None = None,
                 metadata_delays: list[float] | None = None) -> None:
        self.ranges = ranges
        self.metadata_delays = metadata_delays or []  # seconds before answering each
        self.handshake = handshake or (lambda: SaslHandshakeResponse(mechanisms=["PLAIN"]))
        self.authenticate = authenticate or (lambda _token: SaslAuthenticateResponse())
        self.seen: list[int] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                request = decode_request(frame)
                key, version = request.header.request_api_key, request.api_version
                self.seen.append(key)
                response: Message | None
                if key == ApiKey.API_VERSIONS:
                    response, version = ApiVersionsResponse(api_keys=self.ranges), 0
                elif key == ApiKey.SASL_HANDSHAKE:
                    response = self.handshake()
                elif key == ApiKey.SASL_AUTHENTICATE:
                    body = cast(SaslAuthenticateRequest, request.body)
                    response = self.authenticate(bytes(body.auth_bytes))
                else:
                    if self.metadata_delays:  # a slow request holds up those behind it
                        await asyncio.sleep(self.metadata_delays.pop(0))
                    response = MetadataResponse()
                if response is not None:
                    writer.write(encode_response(response, version,
                                                 request.header.correlation_id))
        writer.close()


def _ranges(handshake_max: int | None = 1) -> list[ApiVersion]:
    ranges = [ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=3),
              ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12),
              ApiVersion(api_key=ApiKey.SASL_AUTHENTICATE, min_version=0, max_version=2)]
    if handshake_max is not None:
        ranges.append(ApiVersion(api_key=ApiKey.SASL_HANDSHAKE, min_version=0,
                                 max_version=handshake_max))
    return ranges


async def _connect_to(peer: _SaslPeer, security: InterBrokerSecurity,
                      **settings: Any) -> BrokerConnection:
    server = await asyncio.start_server(peer.serve, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        connection = BrokerConnection(HOST, port, security=security, **settings)
        await connection.connect()
        return connection
    finally:
        server.close()


SCRAM = InterBrokerSecurity(sasl_mechanism="SCRAM-SHA-256", username=USER, password=PASSWORD)
PLAIN = InterBrokerSecurity(sasl_mechanism="PLAIN", username=USER, password=PASSWORD)


@pytest.mark.parametrize("handshake_max", [None, 0])
def test_a_peer_without_sasl_handshake_v1_is_refused(handshake_max: int | None) -> None:
    async def test() -> None:
        peer = _SaslPeer(_ranges(handshake_max))
        with pytest.raises(DisconnectedError, match="does not support SaslHandshake v1"):
            await _connect_to(peer, PLAIN)
        assert peer.seen == [ApiKey.API_VERSIONS]  # no credentials sent

    run(test)


def test_a_handshake_error_names_the_enabled_mechanisms() -> None:
    async def test() -> None:
        peer = _SaslPeer(_ranges(), handshake=lambda: SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=["SCRAM-SHA-512"]))
        with pytest.raises(DisconnectedError,
                           match=r"refused SASL mechanism PLAIN \(UNSUPPORTED_SASL_MECHANISM\)"
                                 r": the mechanisms it enables are SCRAM-SHA-512"):
            await _connect_to(peer, PLAIN)
        assert ApiKey.SASL_AUTHENTICATE not in peer.seen

    run(test)


@pytest.mark.parametrize("silent", ["handshake", "authenticate"])
def test_the_handshake_is_bounded_by_the_connection_setup_timeout(silent: str) -> None:
    async def test() -> None:
        peer = _SaslPeer(_ranges(), **{silent: lambda *_: None})
        started = time.monotonic()
        with pytest.raises(DisconnectedError, match="no answer within 300 ms"):
            await _connect_to(peer, PLAIN, connection_setup_timeout_ms=300)
        assert time.monotonic() - started < 3

    run(test)


def test_a_peer_that_cannot_prove_it_knows_the_password_fails_the_login() -> None:
    # The peer holds the StoredKey (enough to accept our proof) but not the ServerKey.
    real = credential_from_password("SCRAM-SHA-256", PASSWORD, b"salt", 4096)
    forged = ScramCredential(real.salt, real.stored_key, b"\x00" * 32, real.iterations)
    server = ScramSaslServer("SCRAM-SHA-256", lambda _u, _m: forged)

    async def test() -> None:
        peer = _SaslPeer(_ranges(), authenticate=lambda token: SaslAuthenticateResponse(
            auth_bytes=server.evaluate_response(token)))
        with pytest.raises(AuthenticationFailedError, match="Invalid server signature"):
            await _connect_to(peer, SCRAM)
        assert server.is_complete()  # the peer was fooled; we were not
        assert peer.seen.count(ApiKey.METADATA) == 0

    run(test)


def test_a_peer_that_plays_back_our_nonce_fails_the_login() -> None:
    def authenticate(token: bytes) -> SaslAuthenticateResponse:
        nonce = token.decode().rpartition("r=")[2]
        return SaslAuthenticateResponse(auth_bytes=f"r={nonce},s=c2FsdA==,i=4096".encode())

    async def test() -> None:
        peer = _SaslPeer(_ranges(), authenticate=authenticate)
        with pytest.raises(AuthenticationFailedError, match="Invalid server nonce"):
            await _connect_to(peer, SCRAM)
        assert peer.seen.count(ApiKey.SASL_AUTHENTICATE) == 1  # no proof sent

    run(test)


def test_re_authentication_holds_new_requests_until_it_is_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Re-authenticate 10% into a 5 s session: no waiting on the clock's luck.
    monkeypatch.setattr("odradek.broker.inter_broker_client.REAUTH_WINDOW", (0.1, 0.1))

    async def test() -> None:
        peer = _SaslPeer(_ranges(), authenticate=lambda _token: SaslAuthenticateResponse(
            session_lifetime_ms=5000), metadata_delays=[0.8])
        connection = await _connect_to(peer, PLAIN)
        try:
            # Sent before the re-authentication time, answered after it.
            in_flight = asyncio.create_task(metadata(connection))
            await asyncio.sleep(0.6)  # past the re-authentication time, well before the end
            assert connection.in_flight == 1
            await asyncio.gather(*(metadata(connection) for _ in range(4)), in_flight)
            assert connection.reauthentications == 1
        finally:
            connection.close()
        handshake, authenticate = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE
        assert peer.seen == [ApiKey.API_VERSIONS, handshake, authenticate, ApiKey.METADATA,
                             handshake, authenticate, *[ApiKey.METADATA] * 4]

    run(test)


def test_a_failed_re_authentication_fails_the_waiting_requests_and_closes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("odradek.broker.inter_broker_client.REAUTH_WINDOW", (0.1, 0.1))
    answers = iter([
        SaslAuthenticateResponse(session_lifetime_ms=5000),
        SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                 error_message="the password changed"),
    ])

    async def test() -> None:
        peer = _SaslPeer(_ranges(), authenticate=lambda _token: next(answers))
        connection = await _connect_to(peer, PLAIN)
        await asyncio.sleep(0.6)
        results = await asyncio.gather(*(metadata(connection) for _ in range(3)),
                                       return_exceptions=True)
        assert all(isinstance(r, AuthenticationFailedError) for r in results), results
        assert cast(AuthenticationFailedError, results[0]).error_message == (
            "the password changed")
        assert not connection.connected and not connection.session_ended
        assert ApiKey.METADATA not in peer.seen

    run(test)


# ---- the settings ----------------------------------------------------------------------------


def test_plaintext_has_no_security(tls: dict[str, str]) -> None:
    assert inter_broker_security(config_for(tls, "PLAINTEXT")) is None


def test_the_credentials_are_the_listeners_jaas_username_and_password(
        tls: dict[str, str]) -> None:
    security = inter_broker_security(config_for(tls, "SASL_SSL", "SCRAM-SHA-512"))
    assert security is not None
    assert (security.sasl_mechanism, security.username, security.password) == (
        "SCRAM-SHA-512", USER, PASSWORD)
    assert security.check_hostname and security.ssl_context is not None
    assert PASSWORD not in repr(security)


@pytest.mark.parametrize("overrides,key,message", [
    ({}, "sasl.mechanism.inter.broker.protocol", "GSSAPI"),  # Kafka's default
    ({"sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"},
     "sasl.mechanism.inter.broker.protocol", "OAUTHBEARER cannot be used between brokers"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
      "sasl.enabled.mechanisms": "PLAIN"},
     "sasl.mechanism.inter.broker.protocol", "must be included in sasl.enabled.mechanisms"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_ssl.plain.sasl.jaas.config":
          jaas("plain.PlainLoginModule", username=USER, user_broker=PASSWORD)},
     "listener.name.sasl_ssl.plain.sasl.jaas.config", "has no password option"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_ssl.plain.sasl.jaas.config": "not a login module"},
     "listener.name.sasl_ssl.plain.sasl.jaas.config", "control flag"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_ssl.ssl.truststore.location": "/nonexistent/ca.pem"},
     "listener.name.sasl_ssl.ssl.truststore.location", "/nonexistent/ca.pem"),
])
def test_what_is_missing_is_named(tls: dict[str, str], overrides: dict[str, str], key: str,
                                  message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as excinfo:
        inter_broker_security(config_for(tls, "SASL_SSL", **overrides))
    assert excinfo.value.key == key


def test_a_missing_jaas_line_is_named(tls: dict[str, str]) -> None:
    values = {k: v for k, v in settings(tls).items()
              if k != "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"}
    values.update({"inter.broker.listener.name": "SASL_SSL",
                   "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"})
    with pytest.raises(InvalidConfigError, match="is not set") as excinfo:
        inter_broker_security(BrokerConfig.from_properties(values))
    assert excinfo.value.key == "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"


def test_inter_broker_security_checks_itself(tls: dict[str, str]) -> None:
    context = client_ssl_context({"ssl.truststore.type": "PEM",
                                  "ssl.truststore.location": tls["ca"]})
    assert context.check_hostname
    with pytest.raises(ValueError, match="must agree"):
        InterBrokerSecurity(context, check_hostname=False)
    with pytest.raises(ValueError, match="username and a password"):
        InterBrokerSecurity(sasl_mechanism="PLAIN", username=USER)
    with pytest.raises(ValueError, match="GSSAPI"):
        InterBrokerSecurity(sasl_mechanism="GSSAPI", username=USER, password=PASSWORD)
    assert InterBrokerSecurity(context).security_protocol == "SSL"
    assert PLAIN.security_protocol == "SASL_PLAINTEXT"


def test_a_client_of_plaintext_is_unchanged() -> None:
    assert BrokerConnection(HOST, 1).security is None
    assert InterBrokerClient().security is None
