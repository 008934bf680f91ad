"""Hostile and broken clients on the TLS and SASL listeners (issue 17).

One broker process with an SSL listener, a SASL_PLAINTEXT and a SASL_SSL one (PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER, Kafka's settings) and a PLAINTEXT one for the checks.
Raw sockets send it what no correct client sends: random bytes and truncated or stalled
TLS handshakes, garbage frames, frames announcing 100 MiB, unknown mechanisms, mutated
PLAIN, SCRAM and OAUTHBEARER tokens, bare v0 tokens of any size, every API before
authentication, re-authentication as someone else. Whatever they send:

- the broker answers nothing but ApiVersions, SaslHandshake and SaslAuthenticate before a
  client is authenticated, and closes the connection of anything else unanswered;
- well-behaved clients on the same listeners keep producing with bounded latency;
- the broker stays up, logs no traceback, and nothing the fuzzers sent was written.

The inputs come from random generators seeded from SEED (ODRADEK_FUZZ_SEED overrides it), one
per test, so a run is reproducible and a failure names the case that caused it. The whole
module is bounded in time (MODULE_BUDGET_S), and every read has a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import random
import re
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from support.broker import BrokerProcess
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore

from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from odradek.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from odradek.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from odradek.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from odradek.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from odradek.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from odradek.protocol.records import build_record_batch

SEED = int(os.environ.get("ODRADEK_FUZZ_SEED", "20240917"))
MODULE_BUDGET_S = 55.0  # the whole module, broker start and stop included
IO_TIMEOUT = 5.0  # how long the broker may take to answer or close a connection
TIMEOUT = 30
PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
OAUTH_USER = "carol"
REAUTH_MS = 2500  # SASL_PLAINTEXT sessions last this long (KIP-368)
MAX_RECEIVE = 512 * 1024  # sasl.server.max.receive.size, Kafka's default
FAILED_AUTH_DELAY_MS = 20
SASL_LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL"]
PRE_AUTH_APIS = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}

# Broker bugs this module found, by the last line of the traceback they log (none open).
KNOWN_BUG_TRACEBACKS: dict[str, str] = {}

_STARTED: list[float] = []  # when the module's broker started: its time budget begins

pytestmark = pytest.mark.timeout(45)  # no single test may hang the module


def rng_for(name: str) -> random.Random:
    """Each test's own generator: its inputs do not depend on which tests ran before."""
    return random.Random(f"{SEED}:{name}")


def jaas(module: str, **options: str) -> str:
    values = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"org.apache.kafka.common.security.{module} required {values};"


# ---- the broker -------------------------------------------------------------------------


class JwksServer:
    """An identity provider's JWKS over http, for the OAUTH listener (signed JWTs, KIP-768):
    its key signs tokens; `delay` makes it slow; `fetches` counts what the broker fetched."""

    KEY_ID = "idp-1"

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(ECAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": self.KEY_ID, "use": "sig",
                                     "alg": "ES256"}]}).encode()
        self.delay = 0.0
        self.fetches = 0
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                idp.fetches += 1
                time.sleep(idp.delay)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"

    def token(self, subject: str = "erin", kid: str = KEY_ID, lifetime_s: int = 600) -> str:
        now = int(time.time())
        return jwt.encode({"sub": subject, "iat": now, "exp": now + lifetime_s}, self.key,
                          algorithm="ES256", headers={"kid": kid})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class Env:
    broker: BrokerProcess
    ca: str
    canary: str  # a topic nobody may write: its end offsets stay 0
    probe_topic: str  # where the well-behaved clients write
    created: str  # a topic a hostile CreateTopics would create
    auto_created: str  # a topic a hostile Metadata would auto-create
    api_ranges: dict[int, tuple[int, int]]  # what the broker serves, from ApiVersions
    idp: JwksServer  # the OAUTH listener's identity provider

    def port(self, listener: str) -> int:
        return self.broker.ports[listener]

    def tls_for(self, listener: str) -> ssl.SSLContext | None:
        if listener in ("TLS", "SASL_SSL"):
            return ssl.create_default_context(cafile=self.ca)
        return None

    def settings(self, how: str) -> dict[str, str]:
        """librdkafka settings of a well-behaved client."""
        tls = {"ssl.ca.location": self.ca}
        ways = {
            "TLS": {"security.protocol": "SSL", **tls},
            "SASL_SSL": {"security.protocol": "SASL_SSL", **tls, "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD},
            "SASL_PLAINTEXT": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": "alice", "sasl.password": "alice-secret"},
            "PLAINTEXT": {},
        }
        return {"bootstrap.servers": self.broker.address(how), **ways[how]}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _STARTED[:] = [time.monotonic()]
    d = tmp_path_factory.mktemp("fuzz-tls")
    ca = CertificateAuthority("Odradek Fuzz CA")
    ca_path = str(write_pem_truststore(d / "ca.pem", ca))
    server = str(write_pem_keystore(d / "server.pem", ca.issue("localhost")))
    plain = jaas("plain.PlainLoginModule", **{f"user_{u}": p for u, p in PLAIN_USERS.items()})
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,TLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,TLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": server,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca_path,
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": str(FAILED_AUTH_DELAY_MS),
        "num.partitions": "2",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = jaas(
                "scram.ScramLoginModule")
        settings[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = jaas(
            "oauthbearer.OAuthBearerLoginModule")
    idp = JwksServer()
    settings["listeners"] += ",OAUTH://127.0.0.1:0"
    settings["listener.security.protocol.map"] += ",OAUTH:SASL_PLAINTEXT"
    settings.update({
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.jaas.config": jaas(
            "oauthbearer.OAuthBearerLoginModule"),
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": idp.url,
    })
    broker = BrokerProcess(tmp_path_factory.mktemp("fuzz"), settings).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(m, 4096),
                                             SCRAM_PASSWORD.encode())
                for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]).values():
            f.result(TIMEOUT)
        suffix = uuid.uuid4().hex[:6]
        canary, probe_topic = f"canary-{suffix}", f"probe-{suffix}"
        for f in admin.create_topics([NewTopic(canary, 2, 1), NewTopic(probe_topic, 2, 1)]
                                     ).values():
            f.result(TIMEOUT)
        with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), 5) as s:
            s.settimeout(IO_TIMEOUT)
            s.sendall(encode_request(ApiVersionsRequest(), 0, 1, "fuzz"))
            size = struct.unpack(">i", _recv_exactly(s, 4))[0]
            _, versions = decode_response(_recv_exactly(s, size), ApiKey.API_VERSIONS, 0)
        assert isinstance(versions, ApiVersionsResponse) and versions.error_code == 0
        ranges = {v.api_key: (v.min_version, v.max_version) for v in versions.api_keys}
        yield Env(broker, ca_path, canary, probe_topic, f"fuzz-created-{suffix}",
                  f"fuzz-auto-{suffix}", ranges, idp)
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.stop()
        idp.close()
    if os.environ.get("ODRADEK_FUZZ_LOG"):  # where to keep the broker's log, to read it
        Path(os.environ["ODRADEK_FUZZ_LOG"]).write_text(broker.log_text())
    unexpected = unexpected_tracebacks(broker.log_text())
    assert not unexpected, broker.log_text()[-20000:]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def tracebacks(log: str) -> list[str]:
    """The exception line ending each traceback in the broker's log."""
    found = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                j += 1
            found.append(lines[j] if j < len(lines) else "<truncated>")
    return found


def unexpected_tracebacks(log: str) -> list[str]:
    return [t for t in tracebacks(log) if not any(t.startswith(k) for k in KNOWN_BUG_TRACEBACKS)]


def broker_alive(env: Env) -> None:
    assert env.broker.process is not None and env.broker.process.poll() is None, (
        "the broker died:\n" + env.broker.log_text()[-5000:])


def vm_hwm_kib(env: Env) -> int:
    """The broker's peak resident memory (VmHWM)."""
    assert env.broker.process is not None
    status = Path(f"/proc/{env.broker.process.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


def wait_for_log(env: Env, text: str, timeout: float = IO_TIMEOUT) -> None:
    """The broker logs `text` (its log is read by a thread: give it time)."""
    deadline = time.monotonic() + timeout
    while text not in env.broker.log_text():
        assert time.monotonic() < deadline, f"the broker never logged {text!r}"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _bounded(env: Env) -> Iterator[None]:
    """Each test starts within the module's budget and leaves the broker alive."""
    assert time.monotonic() - _STARTED[0] < MODULE_BUDGET_S, "the module ran out of time"
    yield
    broker_alive(env)


# ---- raw connections --------------------------------------------------------------------


class Wire:
    """A raw Kafka connection (TCP, or TLS over it) that remembers what it asked."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.sent: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._next_id = 1 << 20  # hand-made frames use smaller correlation ids

    @classmethod
    async def open(cls, env: Env, listener: str) -> Wire:
        tls = env.tls_for(listener)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", env.port(listener), ssl=tls,
            server_hostname="localhost" if tls else None, limit=1 << 22), IO_TIMEOUT)
        return cls(reader, writer)

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.abort()

    def abort(self) -> None:
        self.writer.transport.abort()

    async def send(self, data: bytes) -> None:
        """Sends bytes; a broker that already closed the connection is not an error."""
        with contextlib.suppress(OSError, RuntimeError):
            self.writer.write(data)
            await asyncio.wait_for(self.writer.drain(), IO_TIMEOUT)

    async def request(self, body: Message, version: int) -> int:
        while self._next_id in self.sent:  # taken by a hand-made frame
            self._next_id += 1
        correlation_id = self._next_id
        self._next_id += 1
        self.sent[correlation_id] = (body.API_KEY, version)  # type: ignore[attr-defined]
        await self.send(encode_request(body, version, correlation_id, "odradek-fuzz"))
        return correlation_id

    async def frame(self, timeout: float = IO_TIMEOUT) -> bytes | None:
        """The next size-prefixed frame, or None once the broker closed the connection."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
            (size,) = struct.unpack(">i", head)
            return await asyncio.wait_for(self.reader.readexactly(size), timeout)
        except asyncio.IncompleteReadError as e:
            assert not e.partial, f"the broker closed mid-frame after {e.partial[:32].hex()}"
            return None
        except OSError:  # reset, or TLS torn down
            return None

    async def response(self, timeout: float = IO_TIMEOUT) -> tuple[int, Any] | None:
        """The next response and the API it answers, or None once closed."""
        frame = await self.frame(timeout)
        if frame is None:
            return None
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id in self.sent, f"an answer to nothing we sent: {frame[:32].hex()}"
        api_key, version = self.sent.pop(correlation_id)
        spec = API_SPECS.get(api_key)
        if api_key == ApiKey.API_VERSIONS and spec and not (
                spec.min_version <= version <= spec.max_version):
            # KIP-511: an ApiVersions of a version the broker does not know is answered in
            # v0, with UNSUPPORTED_VERSION and the versions it serves.
            _, body = decode_response(frame, api_key, 0)
            assert body.error_code == ErrorCode.UNSUPPORTED_VERSION, body
        else:
            _, body = decode_response(frame, api_key, version)
        return api_key, body

    async def expect(self, response_type: type, timeout: float = IO_TIMEOUT) -> Any:
        got = await self.response(timeout)
        assert got is not None, f"closed instead of answering with a {response_type.__name__}"
        assert isinstance(got[1], response_type), got
        return got[1]

    async def closed_unanswered(self, what: str, timeout: float = IO_TIMEOUT) -> None:
        """The broker closes the connection without sending another byte."""
        data = b""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: the connection is still open after {timeout} s")
            try:
                chunk = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        assert data == b"", f"{what}: the broker answered {data[:64].hex()}"

    async def not_served(self, what: str, quiet: float = IO_TIMEOUT) -> None:
        """A client that is not authenticated: a Metadata request is never answered, and
        closes the connection (whatever comes first for earlier requests must be SASL's).
        A connection left silent for `quiet` s (the broker waits for the rest of a frame
        begun earlier) served nothing either."""
        await self.request(MetadataRequest(topics=None), 1)
        while True:
            try:
                got = await self.response(quiet)
            except TimeoutError:
                return
            if got is None:
                return
            assert got[0] in PRE_AUTH_APIS, f"{what}: served {got} before authentication"


async def run_cases(cases: list[tuple[str, Callable[[], Awaitable[None]]]],
                    concurrency: int = 24, timeout: float = 20) -> list[str]:
    """Runs the cases concurrently; the failures, each named by its case."""
    gate = asyncio.Semaphore(concurrency)
    failures: list[str] = []

    async def one(name: str, case: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            try:
                await asyncio.wait_for(case(), timeout)
            except Exception as e:  # every failure, by its case's name
                failures.append(f"{name}: {type(e).__name__}: {e}"[:600])

    await asyncio.gather(*(one(name, case) for name, case in cases))
    return failures


def check(cases: list[tuple[str, Callable[[], Awaitable[None]]]], concurrency: int = 24,
          probe: tuple[Env, str] | None = None) -> None:
    """Runs the cases; with `probe` (env, listener), a well-behaved client produces on that
    listener meanwhile, and its p99 acknowledgement latency stays under 2 s."""
    if probe is None:
        failures = asyncio.run(run_cases(cases, concurrency))
    else:
        env, listener = probe
        with LatencyProbe(env.settings(listener), env.probe_topic) as timed:
            start = time.monotonic()
            failures = asyncio.run(run_cases(cases, concurrency))
            end = time.monotonic()
        assert not timed.errors, timed.errors
        p99, n = timed.p99(start, end)
        assert p99 < 2.0, f"p99 produce latency {p99:.3f} s over {n} records meanwhile"
    assert not failures, f"{len(failures)} of {len(cases)} cases failed (seed {SEED}):\n" + (
        "\n".join(failures[:15]))


def other(listener: str) -> str:
    """The other SASL listener, for a well-behaved client while one is fuzzed."""
    return "SASL_SSL" if listener == "SASL_PLAINTEXT" else "SASL_PLAINTEXT"


# ---- SASL, client side ------------------------------------------------------------------


async def handshake(wire: Wire, mechanism: str, version: int = 1) -> SaslHandshakeResponse:
    await wire.request(SaslHandshakeRequest(mechanism=mechanism), version)
    response = await wire.expect(SaslHandshakeResponse)
    assert response.error_code == 0, response
    return response


async def authenticate(wire: Wire, token: bytes, version: int = 1) -> SaslAuthenticateResponse:
    await wire.request(SaslAuthenticateRequest(auth_bytes=token), version)
    response: SaslAuthenticateResponse = await wire.expect(SaslAuthenticateResponse)
    return response


async def raw_token(wire: Wire, token: bytes) -> bytes | None:
    """A bare token of the v0 flow; the broker's bare answer, None when it closed."""
    await wire.send(struct.pack(">i", len(token)) + token)
    return await wire.frame()


async def plain_login(wire: Wire, user: str = "alice") -> SaslAuthenticateResponse:
    await handshake(wire, "PLAIN")
    response = await authenticate(wire, plain_token(user, PLAIN_USERS[user]), 2)
    assert response.error_code == 0, response
    return response


async def served(wire: Wire) -> None:
    await wire.request(MetadataRequest(topics=None), 1)
    got = await wire.response()
    assert got is not None and got[0] == ApiKey.METADATA, "an authenticated client not served"


def plain_token(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def plain_valid(token: bytes) -> bool:
    """RFC 4616 as Kafka's PlainSaslServer reads it: [authzid] NUL user NUL password."""
    parts = token.decode("utf-8", errors="replace").split("\0")
    if len(parts) != 3:
        return False
    authzid, user, password = parts
    return bool(user and password and PLAIN_USERS.get(user) == password
                and authzid in ("", user))


_SALTED: dict[tuple[str, bytes, int], bytes] = {}


class ScramClient:
    """RFC 5802's client side, so that the fuzzers can mutate real messages."""

    def __init__(self, mechanism: str, user: str = SCRAM_USER, password: str = SCRAM_PASSWORD,
                 nonce: str | None = None) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.user, self.password = user, password
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n={user},r={self.nonce}"
        self.first = ("n,," + self.first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        attributes = dict(a.split("=", 1) for a in server_first.decode().split(","))
        salt, iterations = base64.b64decode(attributes["s"]), int(attributes["i"])
        assert attributes["r"].startswith(self.nonce), server_first
        key = (self.hash, salt, iterations)
        if key not in _SALTED:
            _SALTED[key] = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt,
                                               iterations)
        client_key = hmac.digest(_SALTED[key], b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={attributes['r']}"
        auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def unsecured_jws(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def oauth_message(token: str, authzid: str = "", extensions: str = "") -> bytes:
    """RFC 7628's client initial response (extensions: "key=value\x01" pairs)."""
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def oauth_token(user: str = OAUTH_USER, lifetime_s: float = 3600) -> str:
    now = time.time()
    return unsecured_jws({"sub": user, "iat": now, "exp": now + lifetime_s})


def oauth_reference(message: bytes) -> str:
    """What OAUTHBEARER makes of a client's first message, run in this process: "challenge"
    (an invalid token: RFC 7628's error challenge), "failed", or "authenticated". The
    mechanism itself is fuzzed in tests/test_security_sasl_fuzz.py; here the broker must
    do over the wire what its mechanism says."""
    from odradek.security.sasl import SaslAuthenticationError
    from odradek.security.sasl.oauthbearer import OAuthBearerSaslServer, UnsecuredJwsValidator

    server = OAuthBearerSaslServer(UnsecuredJwsValidator(lambda: time.time_ns() // 10**6))
    try:
        challenge = server.evaluate_response(message)
    except SaslAuthenticationError:
        return "failed"
    return "authenticated" if server.is_complete() and not challenge else "challenge"


# ---- mutations --------------------------------------------------------------------------


def mutate(rng: random.Random, data: bytes, fields: Sequence[bytes] = ()) -> tuple[str, bytes]:
    """A damaged copy of a message, different from it: flipped bytes, cut, repeated or
    inflated attributes, bytes that are not UTF-8, or noise. `fields` are attributes of
    the message to repeat (e.g. b",r=...")."""
    kinds = ["flip", "truncate", "insert", "non-utf8", "huge", "repeat", "noise", "swap"]
    kind = rng.choice(kinds)
    out = data
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if out:
                i = rng.randrange(len(out))
                out[i] ^= rng.randint(1, 255)
        out = bytes(out)
    elif kind == "truncate":
        out = data[: rng.randrange(len(data))] if data else b""
    elif kind == "insert":
        i = rng.randint(0, len(data))
        out = data[:i] + rng.choice([b",", b"=", b"\0", b"\x01", b",x=y", b",,", b"=2C",
                                     b"=3D", b",m=z"]) + data[i:]
    elif kind == "non-utf8":
        i = rng.randint(0, len(data))
        out = data[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80",
                                     b"\x80"]) + data[i:]
    elif kind == "huge":
        i = rng.randint(0, len(data))
        filler = rng.choice([b"A", b"=", b",", b"\0", b"9"]) * rng.choice(
            [4096, 65536, 300 * 1024, MAX_RECEIVE - 4096])
        out = data[:i] + filler + data[i:]
    elif kind == "repeat" and fields:
        extra = rng.choice(fields)
        i = rng.choice([len(data), data.find(b",") + 1 if b"," in data else 0])
        out = data[:i] + extra * rng.randint(1, 3) + data[i:]
    elif kind == "swap":
        parts = data.split(b",")
        rng.shuffle(parts)
        out = b",".join(parts)
    else:
        out = rng.randbytes(rng.randint(0, 512))
    if out == data:
        out = data + b"\xff"
    return kind, out


# ---- a well-behaved client, timed --------------------------------------------------------


class LatencyProbe:
    """A confluent-kafka producer that keeps producing (one record per `interval`) while
    hostile clients do their worst, and times each acknowledgement (acks=all)."""

    def __init__(self, settings: dict[str, str], topic: str, interval: float = 0.02) -> None:
        self.settings, self.topic, self.interval = settings, topic, interval
        self.samples: list[tuple[float, float]] = []  # (sent at, ack latency)
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        assert self._ready.wait(TIMEOUT), f"the probe never got an ack: {self.errors}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)

    def _run(self) -> None:
        producer = Producer({**self.settings, "acks": "all", "linger.ms": 0,
                             "message.timeout.ms": 20000,
                             "error_cb": lambda e: self.errors.append(f"error_cb: {e}")})
        n = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            value = b"probe-%d-%d" % (id(self), n)

            def acked(err: Any, _msg: Any, sent: float = sent, value: bytes = value) -> None:
                if err is not None:
                    self.errors.append(str(err))
                    return
                with self._lock:
                    self.samples.append((sent, time.monotonic() - sent))
                    self.acked.append(value)
                self._ready.set()

            producer.produce(self.topic, value, partition=n % 2, on_delivery=acked)
            n += 1
            while (left := sent + self.interval - time.monotonic()) > 0:
                producer.poll(left)
        producer.flush(TIMEOUT)

    def p99(self, since: float = 0.0, until: float = float("inf")) -> tuple[float, int]:
        with self._lock:
            latencies = sorted(lat for at, lat in self.samples if since <= at <= until)
        assert latencies, "no record was acknowledged in the window"
        return latencies[int(0.99 * (len(latencies) - 1))], len(latencies)


def read_back(settings: dict[str, str], topic: str, expected: set[bytes]) -> set[bytes]:
    """What a consumer reads of `expected` from the topic's start."""
    consumer = Consumer({**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while not expected <= got and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.add(m.value())
    finally:
        consumer.close()
    return got & expected


def end_offsets(env: Env, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": env.broker.bootstrap, "group.id": "offsets"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                for p in range(2)]
    finally:
        consumer.close()


# ---- TLS ----------------------------------------------------------------------------------


def client_hello() -> bytes:
    """A real TLS ClientHello (TLS 1.2 and 1.3), as the first flight of a handshake."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"  # a handshake record
    return hello


async def tcp(env: Env, listener: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", env.port(listener)),
                                  IO_TIMEOUT)


async def read_until_closed(reader: asyncio.StreamReader, timeout: float = IO_TIMEOUT,
                            hold: bool = False) -> bytes:
    """All the broker sends until it closes; AssertionError if it does not in time, unless
    `hold` (the broker may keep waiting: then what it sent so far)."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 and hold:
            return data
        assert left > 0, f"still open after {timeout} s, having sent {data[:32].hex()}"
        try:
            chunk = await asyncio.wait_for(reader.read(65536), left)
        except TimeoutError:
            continue
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk


def no_kafka_answer(data: bytes, what: str) -> None:
    """What a TLS port sends a client that never completed the handshake: TLS records
    (a handshake, or an alert), never a Kafka frame."""
    assert data[:1] in (b"", b"\x15", b"\x16"), f"{what}: the broker sent {data[:32].hex()}"


def rst(writer: asyncio.StreamWriter) -> None:
    """Closes with a reset, as a client that crashed."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def test_tls_port_survives_hostile_handshakes_while_a_client_keeps_producing(env: Env) -> None:
    rng = rng_for("tls")
    hello = client_hello()
    api_versions = encode_request(ApiVersionsRequest(), 0, 7, "plaintext-on-tls")
    held: list[asyncio.StreamWriter] = []
    cases: list[tuple[str, Callable[[], Awaitable[None]]]] = []

    async def random_bytes(data: bytes) -> None:
        """Noise: OpenSSL fails the handshake, or waits for the rest of a record it began
        (then the client gives up). Either way no Kafka byte comes back."""
        reader, writer = await tcp(env, "TLS")
        writer.write(data)
        no_kafka_answer(await read_until_closed(reader, 1.0, hold=True),
                        f"random {data[:16].hex()}")
        rst(writer)

    async def truncated_hello(cut: int, hold: bool) -> None:
        _, writer = await tcp(env, "TLS")
        writer.write(hello[:cut])
        await writer.drain()
        if hold:
            held.append(writer)  # silence, to the end of the storm
        else:
            rst(writer)

    async def hello_then_silence() -> None:
        reader, writer = await tcp(env, "TLS")
        writer.write(hello)
        first = await asyncio.wait_for(reader.readexactly(1), IO_TIMEOUT)
        assert first == b"\x16", f"the broker answered a ClientHello with {first.hex()}"
        held.append(writer)

    async def plaintext_kafka() -> None:
        reader, writer = await tcp(env, "TLS")
        writer.write(api_versions)
        no_kafka_answer(await read_until_closed(reader), "plaintext ApiVersions on TLS")
        writer.close()

    async def thousands_then_close(data: bytes) -> None:
        _, writer = await tcp(env, "TLS")
        writer.write(data)
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def handshake_then_garbage(data: bytes) -> None:
        async with await Wire.open(env, "TLS") as wire:
            await wire.send(data)
            await wire.closed_unanswered(f"garbage {data[:16].hex()} over TLS")

    for i in range(40):
        data = rng.randbytes(rng.randint(1, 4096))
        if i % 4 == 0:  # a TLS handshake record's header first: OpenSSL reads on
            data = b"\x16\x03\x01" + data
        cases.append((f"random-{i}", lambda d=data: random_bytes(d)))
    for i in range(40):
        cut = rng.randint(1, len(hello) - 1)
        cases.append((f"truncated-{i}@{cut}", lambda c=cut, h=i % 2 == 0: truncated_hello(c, h)))
    cases += [(f"hello-silence-{i}", hello_then_silence) for i in range(20)]
    cases += [(f"plaintext-{i}", plaintext_kafka) for i in range(10)]
    for i in range(20):
        data = rng.randbytes(rng.randint(2000, 64000))
        cases.append((f"thousands-{i}", lambda d=data: thousands_then_close(d)))
    for i in range(10):
        garbage = struct.pack(">i", rng.choice([-1, 7, 200 * 1024 * 1024])) + rng.randbytes(
            rng.randint(0, 300))
        cases.append((f"tls-garbage-{i}", lambda g=garbage: handshake_then_garbage(g)))
    rng.shuffle(cases)

    async def abandon_at_once(count: int) -> None:
        """`count` connections open at once, each sends all or part of a ClientHello and is
        dropped mid-handshake: half reset, half left open until the storm ends."""
        async def one(i: int) -> None:
            _, writer = await tcp(env, "TLS")
            writer.write(hello if i % 3 else hello[: len(hello) // 2])
            await writer.drain()
            if i % 2:
                rst(writer)
            else:
                held.append(writer)
        results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors[:3]

    async def storm() -> list[str]:
        failures = await run_cases(cases, concurrency=40)
        await abandon_at_once(200)
        await asyncio.sleep(1.0)  # the abandoned handshakes stay pending meanwhile
        for writer in held:
            rst(writer)
        return failures

    settings = env.settings("TLS")
    with LatencyProbe(settings, env.probe_topic) as probe:
        time.sleep(0.3)
        start = time.monotonic()
        failures = asyncio.run(storm())
        end = time.monotonic()
        time.sleep(0.3)
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures[:15])
    assert not probe.errors, probe.errors
    p99, n = probe.p99(start, end)
    assert n >= 10, f"only {n} records were produced during the {end - start:.1f} s storm"
    print(f"TLS storm: {len(cases) + 200} hostile connections in {end - start:.2f} s; p99 "
          f"produce latency {p99 * 1000:.0f} ms over {n} records")
    assert p99 < 2.0, f"p99 produce latency {p99:.3f} s over {n} records during the storm"
    assert read_back(settings, env.probe_topic, set(probe.acked)) == set(probe.acked)
    broker_alive(env)


# ---- SASL: before the handshake ----------------------------------------------------------


def garbage_frames(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """Bytes a broken client sends first: noise, frames of noise, plausible headers with
    noise after them, lying sizes, and damaged copies of the requests it may send."""
    keys = [*API_SPECS, -1, 88, 1000, 32767, -32768]
    valid = [encode_request(ApiVersionsRequest(client_software_name="x",
                                               client_software_version="1"), 3, 1, "c"),
             encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1, "c"),
             encode_request(SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), 2, 1, "c")]
    out: list[tuple[str, bytes]] = []
    for _ in range(count):
        kind = rng.choice(["noise", "frame", "header", "lying-size", "damaged", "empty"])
        if kind == "noise":
            data = rng.randbytes(rng.randint(1, 2048))
        elif kind == "frame":
            body = rng.randbytes(rng.randint(0, 1024))
            data = struct.pack(">i", len(body)) + body
        elif kind == "header":
            body = struct.pack(">hhi", rng.choice(keys), rng.randint(-3, 20),
                               rng.randint(-2**31, 2**31 - 1)) + rng.randbytes(rng.randint(0, 64))
            data = struct.pack(">i", len(body)) + body
        elif kind == "lying-size":
            data = struct.pack(">i", rng.choice([-1, -2**31, MAX_RECEIVE + 1, 2**31 - 1])) + (
                rng.randbytes(rng.randint(0, 256)))
        elif kind == "damaged":
            _, body = mutate(rng, rng.choice(valid)[4:])
            data = struct.pack(">i", len(body)) + body
        else:
            data = struct.pack(">i", 0)
        out.append((kind, data))
    return out


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_garbage_before_the_handshake_is_never_served(env: Env, listener: str) -> None:
    rng = rng_for(f"garbage-{listener}")

    async def case(kind: str, data: bytes) -> None:
        async with await Wire.open(env, listener) as wire:
            if len(data) >= 12:
                # What the frame asks, for the answers we may see: only ApiVersions and
                # SaslHandshake may be answered before authentication.
                key, version, correlation_id = struct.unpack(">hhi", data[4:12])
                wire.sent[correlation_id] = (key, version)
            await wire.send(data)
            what = f"{kind} {data[:24].hex()}"
            key = data[4:6]
            if kind in ("lying-size", "empty") or (kind == "header" and key not in (
                    b"\0\x11", b"\0\x12")):
                await wire.closed_unanswered(what)  # nothing to answer: closed at once
            else:
                await wire.not_served(what, quiet=1.0)

    cases = [(f"{listener}-{i}-{kind}", lambda k=kind, d=data: case(k, d))
             for i, (kind, data) in enumerate(garbage_frames(rng, 150))]
    check(cases, probe=(env, other(listener)))


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_a_frame_announcing_100_mib_is_cut_without_allocating_it(env: Env,
                                                                listener: str) -> None:
    before = vm_hwm_kib(env)

    async def announce(size: int, after_handshake: bool) -> None:
        async with await Wire.open(env, listener) as wire:
            if after_handshake:
                await handshake(wire, "PLAIN")
            await wire.send(struct.pack(">i", size) + b"\0" * 65536)
            await wire.closed_unanswered(f"a frame of {size} bytes")

    async def at_the_limit(pad: int) -> None:
        """A SaslHandshake of exactly sasl.server.max.receive.size is read (the bytes after
        its body are ignored, as Kafka does); one byte more closes the connection."""
        async with await Wire.open(env, listener) as wire:
            request = encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1, "c")
            body = request[4:] + b"\0" * (MAX_RECEIVE - len(request) + 4 + pad)
            wire.sent[1] = (ApiKey.SASL_HANDSHAKE, 1)
            await wire.send(struct.pack(">i", len(body)) + body)
            if pad:
                await wire.closed_unanswered("a frame one byte over the limit")
            else:
                assert (await wire.expect(SaslHandshakeResponse)).error_code == 0

    check([(f"100MiB-{i}", lambda i=i: announce(100 * 1024 * 1024, i % 2 == 1))
           for i in range(8)]
          + [("2GiB", lambda: announce(2**31 - 1, False)),
             ("limit+1", lambda: announce(MAX_RECEIVE + 1, False)),
             ("exactly-limit", lambda: at_the_limit(0)), ("limit+1-real", lambda: at_the_limit(1))])
    grown = vm_hwm_kib(env) - before
    assert grown < 48 * 1024, f"the broker's peak memory grew by {grown} KiB"
    wait_for_log(env, "frame of 104857600 bytes is larger than the limit of 524288 bytes")


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_handshakes_with_random_mechanism_names_are_refused(env: Env, listener: str) -> None:
    rng = rng_for(f"mechanisms-{listener}")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_ .,;:/\\\0\n\t"
    names = ["", "plain", "Plain", " PLAIN", "PLAIN ", "PLAIN\0", "SCRAM-SHA-1", "SCRAM-SHA-384",
             "GSSAPI", "OAUTHBEARER\n", "SCRAM-SHA-256,PLAIN", "scram-sha-512", "ANONYMOUS",
             "EXTERNAL", "DIGEST-MD5", "\u00e9PLAIN", "PLA\u0130N", "x" * 32767, "\U0001F600"]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
              for _ in range(60)]
    names = [n for n in names if n not in MECHANISMS]

    async def case(name: str, version: int, api_versions_first: bool) -> None:
        async with await Wire.open(env, listener) as wire:
            if api_versions_first:
                await wire.request(ApiVersionsRequest(), 0)
                assert (await wire.expect(ApiVersionsResponse)).error_code == 0
            await wire.request(SaslHandshakeRequest(mechanism=name), version)
            response = await wire.expect(SaslHandshakeResponse)
            assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM, response
            assert response.mechanisms == MECHANISMS, response
            await wire.not_served(f"mechanism {name[:40]!r}")

    cases = []
    for name in names:
        for version in (0, 1):
            first = rng.random() < 0.5
            cases.append((f"{listener}-{name[:30]!r}-v{version}",
                          lambda n=name, v=version, f=first: case(n, v, f)))
    check(cases)


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_sasl_authenticate_before_the_handshake_closes_unanswered(env: Env,
                                                                  listener: str) -> None:
    rng = rng_for(f"authenticate-first-{listener}")
    tokens = [plain_token("alice", "alice-secret"), ScramClient("SCRAM-SHA-256").first,
              oauth_message(oauth_token()), b"", rng.randbytes(300)]

    async def case(token: bytes, version: int, api_versions_first: bool) -> None:
        async with await Wire.open(env, listener) as wire:
            if api_versions_first:
                await wire.request(ApiVersionsRequest(), 0)
                assert (await wire.expect(ApiVersionsResponse)).error_code == 0
            await wire.request(SaslAuthenticateRequest(auth_bytes=token), version)
            await wire.closed_unanswered("SaslAuthenticate before SaslHandshake")

    check([(f"{listener}-{i}-v{v}-{first}", lambda t=t, v=v, f=first: case(t, v, f))
           for i, t in enumerate(tokens) for v in (0, 1, 2) for first in (False, True)])


# ---- SASL: mechanisms --------------------------------------------------------------------


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_random_and_mutated_plain_tokens(env: Env, listener: str) -> None:
    rng = rng_for(f"plain-{listener}")
    valid = [plain_token("alice", "alice-secret"), plain_token("admin", "admin-secret", "admin")]
    tokens: list[tuple[str, bytes]] = [("valid", t) for t in valid]
    tokens += [("known", t) for t in (
        b"", b"\0", b"\0\0", b"alice", b"\0alice\0", b"\0\0alice-secret",
        plain_token("alice", "admin-secret"), plain_token("alice", "alice-secret", "admin"),
        plain_token("nobody", "x"), plain_token("alice", "alice-secret") + b"\0",
        plain_token("alice", "alice-secret") + b"\0extra",
        plain_token("alice", "alice-secret" + "\0" * 3), plain_token("ALICE", "alice-secret"),
        plain_token("alice", "alice-secreT"), plain_token("alice", "alice-secret ")
        , "\0alice\0alice-secret".encode("utf-16"), b"\0alice\0alice-secret\xff",
        b"\0" + b"a" * (MAX_RECEIVE - 4096) + b"\0x")]
    for _ in range(70):
        kind, token = mutate(rng, rng.choice(valid), [b"\0alice", b"\0admin-secret"])
        tokens.append((kind, token))

    async def case(token: bytes, flow: int) -> None:
        ok = plain_valid(token)
        async with await Wire.open(env, listener) as wire:
            await handshake(wire, "PLAIN", 0 if flow == 0 else 1)
            if flow == 0:  # the legacy flow: bare tokens
                answer = await raw_token(wire, token)
                if ok:
                    assert answer == b"", f"a valid token was answered {answer!r}"
                else:
                    assert answer is None, f"an invalid token was answered {answer!r}"
                    return
            else:
                response = await authenticate(wire, token, flow)
                if not ok:
                    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
                    await wire.closed_unanswered("after a failed authentication")
                    return
                assert response.error_code == 0, response
            await served(wire)

    check([(f"{listener}-{i}-{kind}-flow{flow}-{token[:24]!r}",
            lambda t=token, f=flow: case(t, f))
           for i, (kind, token) in enumerate(tokens) for flow in (0, 1, 2)
           if flow or i % 2 == 0])


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_random_and_mutated_scram_messages(env: Env, listener: str) -> None:
    rng = rng_for(f"scram-{listener}")

    async def exchange(mechanism: str, version: int) -> tuple[Wire, ScramClient, bytes]:
        """Up to the server-first message of a real exchange."""
        wire = await Wire.open(env, listener)
        client = ScramClient(mechanism)
        await handshake(wire, mechanism, 0 if version < 0 else 1)
        if version < 0:
            server_first = await raw_token(wire, client.first)
        else:
            response = await authenticate(wire, client.first, version)
            assert response.error_code == 0, response
            server_first = bytes(response.auth_bytes)
        assert server_first and server_first.startswith(b"r=" + client.nonce.encode())
        return wire, client, server_first

    async def correct(mechanism: str, version: int) -> None:
        wire, client, server_first = await exchange(mechanism, version)
        async with wire:
            final = client.final(server_first)
            if version < 0:
                answer = await raw_token(wire, final)
                assert answer is not None and answer.startswith(b"v="), answer
            else:
                response = await authenticate(wire, final, version)
                assert response.error_code == 0 and bytes(response.auth_bytes).startswith(
                    b"v="), response
            await wire.request(MetadataRequest(topics=None), 1)
            got = await wire.response()
            assert got is not None and got[0] == ApiKey.METADATA

    async def mutated_final(mechanism: str, version: int, seed: int) -> None:
        wire, client, server_first = await exchange(mechanism, version)
        async with wire:
            final = client.final(server_first)
            nonce = server_first.split(b",")[0]
            proof = final[final.index(b",p="):]
            _, bad = mutate(random.Random(seed), final, [b"," + nonce, proof, b",c=biws",
                                                         b",x=" + b"y" * 1000])
            if version < 0:
                assert await raw_token(wire, bad) is None, f"{bad[:60]!r} was answered"
                return
            response = await authenticate(wire, bad, version)
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, (bad, response)
            await wire.closed_unanswered("after a failed authentication")

    async def mutated_first(mechanism: str, version: int, seed: int) -> None:
        r = random.Random(seed)
        client = ScramClient(mechanism, nonce=base64.b64encode(r.randbytes(18)).decode())
        _, bad = mutate(r, client.first, [b",n=bob", b",r=" + client.nonce.encode(),
                                          b",tokenauth=true", b",m=x", b"a=alice,"])
        async with await Wire.open(env, listener) as wire:
            await handshake(wire, mechanism, 0 if version < 0 else 1)
            if version < 0:
                answer = await raw_token(wire, bad)
            else:
                response = await authenticate(wire, bad, version)
                if response.error_code != 0:
                    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                    await wire.closed_unanswered("after a failed authentication")
                    return
                answer = bytes(response.auth_bytes)
            if answer is None:
                return  # refused: the legacy flow closes without an answer
            assert answer.startswith(b"r="), f"{bad[:60]!r} was answered {answer[:60]!r}"
            # Still mid-exchange: nothing is served; or finish it with bob's proof over
            # the damaged first message, which passes only if it still named bob.
            if r.random() < 0.5:
                await wire.not_served(f"mid-SCRAM after {bad[:40]!r}")
                return
            final = ScramClient(mechanism, nonce=answer[2:].split(b",")[0].decode())
            final.first_bare = bad.decode("utf-8", "replace").split(",", 2)[-1]
            forged = final.final(answer)
            if version < 0:
                outcome = await raw_token(wire, forged)
                ok = outcome is not None
                assert outcome is None or outcome.startswith(b"v="), outcome
            else:
                response = await authenticate(wire, forged, version)
                assert response.error_code in (0, ErrorCode.SASL_AUTHENTICATION_FAILED)
                ok = response.error_code == 0
            if ok:
                # A harmless change (an unknown extension, an authzid of bob...): the proof
                # over what was sent is bob's, so bob is in.
                assert b"n=bob," in bad, f"{bad[:80]!r} authenticated"
                await served(wire)
            else:
                await wire.closed_unanswered("after a failed authentication")

    mechanisms = list(SCRAM_HASHES)
    cases: list[tuple[str, Callable[[], Awaitable[None]]]] = []
    for version in (-1, 0, 1, 2):  # -1: the legacy flow of bare tokens
        for mechanism in mechanisms:
            cases.append((f"{listener}-{mechanism}-v{version}-correct",
                          lambda m=mechanism, v=version: correct(m, v)))
    for _ in range(60):
        m, v, s = rng.choice(mechanisms), rng.choice((-1, 0, 1, 2)), rng.getrandbits(32)
        cases.append((f"{listener}-{m}-v{v}-final-{s}", lambda m=m, v=v, s=s: mutated_final(
            m, v, s)))
        m, v, s = rng.choice(mechanisms), rng.choice((-1, 0, 1, 2)), rng.getrandbits(32)
        cases.append((f"{listener}-{m}-v{v}-first-{s}", lambda m=m, v=v, s=s: mutated_first(
            m, v, s)))
    check(cases)


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_random_and_mutated_oauthbearer_tokens(env: Env, listener: str) -> None:
    rng = rng_for(f"oauth-{listener}")
    valid = oauth_message(oauth_token())
    now = time.time()
    known = [
        oauth_message(unsecured_jws({"sub": OAUTH_USER, "exp": now - 10})),  # expired
        oauth_message(unsecured_jws({"exp": now + 60})),  # no principal
        oauth_message(unsecured_jws({"sub": OAUTH_USER})),  # no expiry
        oauth_message(unsecured_jws({"sub": OAUTH_USER, "exp": now + 60}, {"alg": "HS256"})),
        oauth_message(oauth_token() + "c2ln"),  # a signature
        oauth_message(oauth_token(), authzid="mallory"),
        oauth_message("a.b.c"), oauth_message(".."), b"n,,\x01\x01", b"\x01",
        b"n,,\x01auth=Basic YWxpY2U6c2VjcmV0\x01\x01",
        oauth_message(unsecured_jws({"sub": OAUTH_USER, "exp": "soon"})),
        oauth_message(unsecured_jws({"sub": OAUTH_USER, "exp": 1e400})),
        oauth_message(unsecured_jws({"sub": [OAUTH_USER], "exp": now + 60})),
        oauth_message(oauth_token() + "=" * 100000),
    ]
    messages = [("valid", valid)] + [("known", m) for m in known]
    for _ in range(60):
        messages.append(mutate(rng, valid, [b"\x01x=y", b"\x01auth=Bearer a.b.", b"\x01"]))

    async def case(message: bytes) -> None:
        expected = oauth_reference(message)
        async with await Wire.open(env, listener) as wire:
            await handshake(wire, "OAUTHBEARER")
            response = await authenticate(wire, message, 2)
            if response.error_code == 0 and response.auth_bytes:
                # RFC 7628's error challenge: the client answers %x01 and fails.
                assert expected == "challenge", (expected, response)
                challenge = json.loads(bytes(response.auth_bytes))
                assert challenge["status"] in ("invalid_token", "insufficient_scope")
                response = await authenticate(wire, b"\x01", 2)
                assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
                await wire.closed_unanswered("after the %x01 that ends a failed exchange")
            elif response.error_code != 0:
                assert expected == "failed", (expected, response)
                assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
                await wire.closed_unanswered("after a failed authentication")
            else:
                assert expected == "authenticated", (expected, response)
                await served(wire)

    check([(f"{listener}-{i}-{kind}-{m[:30]!r}", lambda m=m: case(m))
           for i, (kind, m) in enumerate(messages)])


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_legacy_flow_with_bare_tokens_of_random_sizes(env: Env, listener: str) -> None:
    """SaslHandshake v0, then bare size-prefixed tokens: of any size up to the limit they
    fail the mechanism and close the connection unanswered; beyond it they are cut."""
    rng = rng_for(f"v0-{listener}")
    sizes = [0, 1, 3, 4, 5, 255, 4096, 65535, MAX_RECEIVE - 1, MAX_RECEIVE, MAX_RECEIVE + 1,
             MAX_RECEIVE * 2, 100 * 1024 * 1024]
    sizes += [rng.randint(0, 600 * 1024) for _ in range(25)]

    async def case(mechanism: str, size: int, data: bytes) -> None:
        async with await Wire.open(env, listener) as wire:
            await handshake(wire, mechanism, 0)
            await wire.send(data)
            await wire.closed_unanswered(f"a bare {mechanism} token of {size} bytes")

    cases = []
    for i, size in enumerate(sizes):
        mechanism = rng.choice(MECHANISMS)
        # The token (as much of it as a client would send before being cut), then a few
        # more small frames pipelined behind it.
        data = struct.pack(">i", size) + rng.randbytes(min(size, 700 * 1024)) + b"".join(
            struct.pack(">i", n) + rng.randbytes(n) for n in [rng.randint(0, 64)] * (i % 3))
        cases.append((f"{listener}-{mechanism}-{size}",
                      lambda m=mechanism, s=size, d=data: case(m, s, d)))
    check(cases, concurrency=8)


def _jws_parts(token: bytes) -> list[bytes] | None:
    """The decoded sections of a compact JWS, None if it is not one."""
    sections = token.split(b".")
    if len(sections) != 3:
        return None
    try:
        return [base64.urlsafe_b64decode(x + b"=" * (-len(x) % 4)) for x in sections]
    except ValueError:
        return None


def test_random_and_mutated_signed_tokens_on_the_jwks_listener(env: Env) -> None:
    """The OAUTH listener checks signed JWTs against the identity provider's JWKS: only a
    token it signed gets in (a change that decodes to the same bytes, e.g. the unused bits
    of the last base64 character, is the same token)."""
    rng = rng_for("jwks")
    valid = env.idp.token().encode()
    header, payload, _ = valid.split(b".")

    def b64url(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    # Algorithm confusion: HS256 with the identity provider's public key as the secret.
    signing_input = b64url(json.dumps({"alg": "HS256", "kid": JwksServer.KEY_ID}).encode()) + (
        b"." + payload)
    forged_hs256 = signing_input + b"." + b64url(hmac.digest(
        ECAlgorithm.to_jwk(env.idp.key.public_key()).encode(), signing_input, "sha256"))
    stranger = ec.generate_private_key(ec.SECP256R1())
    tokens: list[tuple[str, bytes]] = [
        ("valid", valid),
        ("expired", env.idp.token(lifetime_s=-60).encode()),
        ("unknown-kid", env.idp.token(kid="idp-2").encode()),
        ("alg-none", unsecured_jws({"sub": "erin", "exp": time.time() + 60},
                                   {"alg": "none", "kid": JwksServer.KEY_ID}).encode()),
        ("hs256-with-the-public-key", forged_hs256),
        ("another-key", jwt.encode({"sub": "erin", "iat": int(time.time()),
                                    "exp": int(time.time()) + 600}, stranger, algorithm="ES256",
                                   headers={"kid": JwksServer.KEY_ID}).encode()),
        ("no-signature", header + b"." + payload + b"."),
    ]
    for _ in range(40):
        tokens.append(mutate(rng, valid, [b".", b"=", b"-", b"_"]))

    async def case(token: bytes) -> None:
        async with await Wire.open(env, "OAUTH") as wire:
            await handshake(wire, "OAUTHBEARER")
            response = await authenticate(wire, b"n,,\x01auth=Bearer " + token + b"\x01\x01", 2)
            if response.error_code == 0 and not response.auth_bytes:
                assert _jws_parts(token) == _jws_parts(valid), f"{token[:80]!r} got in"
                await served(wire)
                return
            if response.error_code == 0:  # the error challenge, then %x01
                assert json.loads(bytes(response.auth_bytes))["status"] == "invalid_token"
                response = await authenticate(wire, b"\x01", 2)
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
            await wire.closed_unanswered("after a failed authentication")

    check([(f"jwks-{i}-{kind}-{token[:30]!r}", lambda t=token: case(t))
           for i, (kind, token) in enumerate(tokens)], concurrency=8)


# ---- every API before authentication -----------------------------------------------------


def hostile_body(env: Env, api_key: int) -> Message:
    """A request for `api_key` that would change something if it were served."""
    canary = env.canary
    batch = build_record_batch([(b"k", b"intruder")])
    bodies: dict[int, Message] = {
        ApiKey.PRODUCE: ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
            name=canary, partition_data=[PartitionProduceData(index=0, records=batch)])]),
        ApiKey.METADATA: MetadataRequest(topics=[MetadataRequestTopic(name=env.auto_created)],
                                         allow_auto_topic_creation=True),
        ApiKey.CREATE_TOPICS: CreateTopicsRequest(topics=[CreatableTopic(
            name=env.created, num_partitions=1, replication_factor=1)]),
        ApiKey.DELETE_TOPICS: DeleteTopicsRequest(topic_names=[canary], topics=[
            DeleteTopicState(name=canary)], timeout_ms=5000),
        ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest(topics=[CreatePartitionsTopic(
            name=canary, count=5, assignments=None)], timeout_ms=5000),
        ApiKey.DELETE_RECORDS: DeleteRecordsRequest(topics=[DeleteRecordsTopic(
            name=canary, partitions=[DeleteRecordsPartition(partition_index=0, offset=-1)])]),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest(resources=[
            AlterConfigsResource(resource_type=2, resource_name=canary, configs=[
                AlterableConfig(name="retention.ms", config_operation=0, value="1")])]),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AlterUserScramCredentialsRequest(
            deletions=[ScramCredentialDeletion(name=SCRAM_USER, mechanism=1)],
            upsertions=[ScramCredentialUpsertion(name="mallory", mechanism=2, iterations=4096,
                                                 salt=b"salt", salted_password=b"x" * 64)]),
        ApiKey.CREATE_ACLS: CreateAclsRequest(creations=[AclCreation(
            resource_type=2, resource_name=canary, resource_pattern_type=3,
            principal="User:mallory", host="*", operation=2, permission_type=3)]),
    }
    return bodies.get(api_key) or API_SPECS[api_key].request_class()


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_every_other_api_before_authentication_closes_unanswered(env: Env,
                                                                 listener: str) -> None:
    rng = rng_for(f"apis-{listener}")
    keys = [k for k in sorted(API_SPECS) if k not in PRE_AUTH_APIS]
    stages = ["fresh", "after-api-versions", "after-handshake", "mid-scram", "mid-oauth-error"]

    async def case(api_key: int, version: int, stage: str, mechanism: str) -> None:
        async with await Wire.open(env, listener) as wire:
            if stage == "after-api-versions":
                await wire.request(ApiVersionsRequest(), 0)
                await wire.expect(ApiVersionsResponse)
            elif stage == "after-handshake":
                await handshake(wire, mechanism, 1)
            elif stage == "mid-scram":
                await handshake(wire, "SCRAM-SHA-512", 1)
                response = await authenticate(wire, ScramClient("SCRAM-SHA-512").first)
                assert response.error_code == 0
            elif stage == "mid-oauth-error":
                await handshake(wire, "OAUTHBEARER", 1)
                response = await authenticate(wire, oauth_message("a.b.c"))
                assert response.error_code == 0 and response.auth_bytes
            body = hostile_body(env, api_key)
            try:
                data = encode_request(body, version, 99, "intruder")
            except Exception:  # a body this version cannot carry
                data = encode_request(API_SPECS[api_key].request_class(), version, 99, "x")
            await wire.send(data)
            await wire.closed_unanswered(f"{API_SPECS[api_key].name} v{version} ({stage})")

    cases = []
    for api_key in keys:
        low, high = env.api_ranges.get(api_key, (API_SPECS[api_key].min_version,
                                                 API_SPECS[api_key].max_version))
        for stage in stages:
            if stage in ("fresh", "after-handshake") or rng.random() < 0.3:
                version = high if stage == "fresh" else rng.randint(low, high)
                mechanism = rng.choice(MECHANISMS)
                cases.append((f"{listener}-{API_SPECS[api_key].name}-v{version}-{stage}",
                              lambda k=api_key, v=version, s=stage, m=mechanism:
                              case(k, v, s, m)))
    check(cases, concurrency=32, probe=(env, other(listener)))
    assert end_offsets(env, env.canary) == [0, 0]


# ---- re-authentication -------------------------------------------------------------------


def test_reauthentication_cannot_change_mechanism_or_principal(env: Env) -> None:
    """SASL_PLAINTEXT sessions have a lifetime (connections.max.reauth.ms), so a
    SaslHandshake on an authenticated connection begins a re-authentication (KIP-368): it
    must keep the mechanism and the principal, and serves nothing until it is done."""

    async def other_mechanism(mechanism: str) -> None:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            assert (await plain_login(wire)).session_lifetime_ms == REAUTH_MS
            await served(wire)
            await wire.request(SaslHandshakeRequest(mechanism=mechanism), 1)
            # Kafka answers the handshake, then fails the first token; closing at once is
            # as safe. Either way nothing more is served.
            response = await wire.response()
            if response is None:
                return
            assert isinstance(response[1], SaslHandshakeResponse), response
            first = (ScramClient(mechanism).first if mechanism.startswith("SCRAM")
                     else oauth_message(oauth_token("alice")))
            await wire.request(SaslAuthenticateRequest(auth_bytes=first), 2)
            got = await wire.response()
            if got is not None:
                assert got[1].error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, got
            await wire.not_served(f"re-authentication with {mechanism}")

    async def other_user(user: str, password: str) -> None:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            await plain_login(wire)
            await handshake(wire, "PLAIN")
            response = await authenticate(wire, plain_token(user, password), 2)
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
            await wire.closed_unanswered(f"re-authentication as {user}")

    async def same_user_twice() -> None:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            await plain_login(wire)
            await plain_login(wire)  # a re-authentication as alice again
            await served(wire)
            # Within a second of the last one: answered ILLEGAL_SASL_STATE, as Kafka does.
            await wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            response = await wire.expect(SaslHandshakeResponse)
            assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE, response
            await served(wire)

    async def requests_while_reauthenticating() -> None:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            await plain_login(wire)
            await handshake(wire, "PLAIN")
            await wire.request(hostile_body(env, ApiKey.PRODUCE), 9)
            await wire.closed_unanswered("Produce in the middle of a re-authentication")

    async def no_lifetime(listener: str) -> None:
        """Without a session lifetime (SASL_SSL here) there is no re-authentication: the
        SASL requests are answered ILLEGAL_SASL_STATE and the session stays as it was."""
        async with await Wire.open(env, listener) as wire:
            assert (await plain_login(wire)).session_lifetime_ms == 0
            await wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            response = await wire.expect(SaslHandshakeResponse)
            assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE, response
            await wire.request(SaslAuthenticateRequest(
                auth_bytes=plain_token("admin", "admin-secret")), 2)
            response = await wire.expect(SaslAuthenticateResponse)
            assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE, response
            await served(wire)

    check([(f"mechanism-{m}", lambda m=m: other_mechanism(m)) for m in MECHANISMS[1:]]
          + [("user-admin", lambda: other_user("admin", "admin-secret")),
             ("user-alice-wrong-password", lambda: other_user("alice", "guess")),
             ("user-unknown", lambda: other_user("mallory", "x")),
             ("same-user-twice", same_user_twice),
             ("produce-while-reauthenticating", requests_while_reauthenticating),
             ("no-lifetime", lambda: no_lifetime("SASL_SSL"))])
    assert end_offsets(env, env.canary) == [0, 0]


def test_reauthentication_after_the_session_expired_is_accepted(env: Env) -> None:
    async def late() -> None:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            await plain_login(wire)
            await asyncio.sleep(REAUTH_MS / 1000 + 0.3)
            await plain_login(wire)
            await served(wire)

    asyncio.run(late())


# ---- broker bugs this module found (fixed) ------------------------------------------


def test_oauthbearer_token_with_deeply_nested_json_is_refused_without_a_traceback(
        env: Env) -> None:
    claims = ('{"sub":"carol","exp":' + "[" * 5000 + "]" * 5000 + "}").encode()
    token = (base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=") + b"."
             + base64.urlsafe_b64encode(claims).rstrip(b"=") + b".").decode()
    before = len(tracebacks(env.broker.log_text()))

    async def nested() -> bytes:
        async with await Wire.open(env, "SASL_PLAINTEXT") as wire:
            await handshake(wire, "OAUTHBEARER")
            response = await authenticate(wire, oauth_message(token), 2)
            assert response.error_code == 0, response  # the invalid_token challenge
            return bytes(response.auth_bytes)

    challenge = asyncio.run(nested())
    time.sleep(0.2)
    assert len(tracebacks(env.broker.log_text())) == before, "the broker logged a traceback"
    assert json.loads(challenge) == {"status": "invalid_token"}


def test_tokens_with_unknown_key_ids_do_not_stall_other_clients(env: Env) -> None:
    rng = rng_for("jwks-stall")
    env.idp.delay = 1.5  # a slow identity provider

    async def hostile(kid: str) -> None:
        async with await Wire.open(env, "OAUTH") as wire:
            await handshake(wire, "OAUTHBEARER")
            await authenticate(wire, oauth_message(env.idp.token(kid=kid)), 2)

    try:
        with LatencyProbe(env.settings("SASL_SSL"), env.probe_topic) as probe:
            # Unknown key ids keep arriving for twice as long as the identity provider takes
            # to answer, so the window covers the refreshes they start.
            start = time.monotonic()
            sent = 0
            while sent < 2 or time.monotonic() - start < 2 * env.idp.delay:
                asyncio.run(hostile(f"kid-{rng.getrandbits(64):x}"))
                sent += 1
            end = time.monotonic()
    finally:
        env.idp.delay = 0.0
    assert not probe.errors, probe.errors
    p99, n = probe.p99(start, end)
    assert n >= 10, f"only {n} records were produced in the {end - start:.1f} s window"
    assert p99 < 1.0, f"p99 produce latency {p99:.3f} s over {n} records while 2 clients " \
                      f"sent tokens with unknown key ids"


# ---- after all that ----------------------------------------------------------------------


def test_the_broker_is_unharmed(env: Env) -> None:
    """Last: the broker is up, logged no traceback, still authenticates and serves
    well-behaved clients on every listener, and nothing the fuzzers sent was written."""
    broker_alive(env)
    unexpected = unexpected_tracebacks(env.broker.log_text())
    assert not unexpected, unexpected
    admin = AdminClient(env.settings("SASL_SSL"))  # an authenticated admin
    topics = admin.list_topics(timeout=TIMEOUT).topics
    assert env.canary in topics and len(topics[env.canary].partitions) == 2
    assert env.created not in topics and env.auto_created not in topics
    resource = ConfigResource(ConfigResource.Type.TOPIC, env.canary)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == "604800000"
    described = admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER].result(TIMEOUT)
    assert len(described.scram_credential_infos) == 2
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials(["mallory"])["mallory"].result(TIMEOUT)
    consumer = Consumer({**env.settings("SASL_SSL"), "group.id": "fuzz-check"})
    try:
        assert [consumer.get_watermark_offsets(TopicPartition(env.canary, p), TIMEOUT)
                for p in range(2)] == [(0, 0), (0, 0)]
    finally:
        consumer.close()
    topic = env.probe_topic
    for how in ("SASL_PLAINTEXT", "SASL_SSL", "TLS"):
        producer = Producer({**env.settings(how), "acks": "all"})
        values = {b"after-%s-%d" % (how.encode(), i) for i in range(5)}
        for i, value in enumerate(sorted(values)):
            producer.produce(topic, value, partition=i % 2)
        assert producer.flush(TIMEOUT) == 0
        assert read_back(env.settings(how), topic, values) == values
    elapsed = time.monotonic() - _STARTED[0]
    assert elapsed < MODULE_BUDGET_S, f"the module took {elapsed:.1f} s"
