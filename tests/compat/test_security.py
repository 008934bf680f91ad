"""TLS and SASL through real clients (issue 17): one broker process with a listener of each
kind, Kafka's own settings (listener.name.<l>.<mechanism>.sasl.jaas.config, ssl.* with PEM
stores), and confluent-kafka, kafka-python and aiokafka producing and consuming over them.
Wrong passwords, unknown users, untrusted certificates and plaintext clients on TLS ports
are refused, and nothing they send is written."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives.asymmetric import rsa
from support.broker import BrokerProcess
from support.certs import (
    CertificateAuthority,
    name,
    write_pem_keystore,
    write_pem_truststore,
)

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

TIMEOUT = 30
PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
REAUTH_MS = 2500  # SASL_PLAINTEXT sessions: clients must re-authenticate this often


def jaas(module: str, **options: str) -> str:
    return f"org.apache.kafka.common.security.{module} required " + " ".join(
        f'{k}="{v}"' for k, v in options.items()) + ";"


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An identity provider's signing key and its JWKS, as a file:// URL."""
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    path = tmp_path_factory.mktemp("oauth") / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": "idp-1", "use": "sig",
                                          "alg": "RS256"}]}))
    return {"key": key, "jwks": path.as_uri()}


def signed_token(oauth: dict[str, Any], subject: str, audience: str = "kafka",
                 lifetime_s: int = 600) -> tuple[str, float]:
    """A JWT signed by the identity provider, and its expiry (for librdkafka's oauth_cb)."""
    import jwt

    now = time.time()
    token = jwt.encode({"sub": subject, "aud": audience, "iss": "https://idp.example",
                        "iat": int(now), "exp": int(now + lifetime_s), "scope": "kafka"},
                       oauth["key"], algorithm="RS256", headers={"kid": "idp-1"})
    return token, now + lifetime_s


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority("Odradek Test CA")
    client = ca.issue(subject=name(CN="carol", OU="clients", O="Odradek"), dns_names=(),
                      ip_addresses=())
    stranger = CertificateAuthority("Unrelated CA").issue(
        subject=name(CN="mallory"), dns_names=(), ip_addresses=())
    return {
        "ca": str(write_pem_truststore(d / "ca.pem", ca)),
        "server": str(write_pem_keystore(d / "server.pem", ca.issue("localhost"))),
        "client_cert": str(_write(d / "client.crt", client.chain_pem())),
        "client_key": str(_write(d / "client.key", client.key_pem())),
        "stranger_cert": str(_write(d / "stranger.crt", stranger.chain_pem())),
        "stranger_key": str(_write(d / "stranger.key", stranger.key_pem())),
        "other_ca": str(write_pem_truststore(d / "other-ca.pem",
                                             CertificateAuthority("Another CA"))),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, tls: dict[str, Any],
           oauth: dict[str, Any]) -> Iterator[BrokerProcess]:
    plain = jaas("plain.PlainLoginModule", **{f"user_{u}": p for u, p in PLAIN_USERS.items()})
    scram = jaas("scram.ScramLoginModule")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,TLS://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,OAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,TLS:SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "OAUTH:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": tls["server"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": tls["ca"],
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules":
            "RULE:^CN=([a-z]+),OU=clients,.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "50",
        "num.partitions": "2",
        # OAUTHBEARER: unsecured tokens (Kafka's default validator) on SASL_SSL; on OAUTH,
        # signed JWTs checked against the identity provider's JWKS.
        "listener.name.sasl_ssl.sasl.enabled.mechanisms":
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
            jaas("oauthbearer.OAuthBearerLoginModule"),
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.jaas.config":
            jaas("oauthbearer.OAuthBearerLoginModule"),
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": oauth["jwks"],
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = scram
    process = BrokerProcess(tmp_path_factory.mktemp("secure"), settings).start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(mechanism, 4096),
                                         SCRAM_PASSWORD.encode())
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]).values():
        f.result(TIMEOUT)
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def client_settings(broker: BrokerProcess, tls: dict[str, Any], how: str) -> dict[str, str]:
    """librdkafka settings for one way in."""
    sasl = {"sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}
    ways: dict[str, dict[str, str]] = {
        "ssl": {"security.protocol": "SSL", "ssl.ca.location": tls["ca"]},
        "mtls": {"security.protocol": "SSL", "ssl.ca.location": tls["ca"],
                 "ssl.certificate.location": tls["client_cert"],
                 "ssl.key.location": tls["client_key"]},
        "sasl_plaintext-plain": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                 "sasl.username": "alice", "sasl.password": "alice-secret"},
        "sasl_plaintext-scram-sha-256": {"security.protocol": "SASL_PLAINTEXT",
                                         "sasl.mechanism": "SCRAM-SHA-256", **sasl},
        "sasl_ssl-scram-sha-512": {"security.protocol": "SASL_SSL", "ssl.ca.location": tls["ca"],
                                   "sasl.mechanism": "SCRAM-SHA-512", **sasl},
        "sasl_ssl-plain": {"security.protocol": "SASL_SSL", "ssl.ca.location": tls["ca"],
                           "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                           "sasl.password": "admin-secret"},
    }
    listener = {"ssl": "TLS", "mtls": "MTLS"}.get(how, how.split("-")[0].upper())
    return {"bootstrap.servers": broker.address(listener), **ways[how]}


def new_topic(broker: BrokerProcess) -> str:
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    return topic


def end_offsets(broker: BrokerProcess, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offsets"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                for p in range(2)]
    finally:
        consumer.close()


def produce_and_consume(settings: dict[str, str], topic: str, count: int = 20) -> list[bytes]:
    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 20000})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(topic, b"record-%d" % i, partition=i % 2,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(TIMEOUT) == 0 and not errors, errors
    consumer = Consumer({**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got: list[bytes] = []
    try:
        for _ in range(100):
            for m in consumer.consume(count, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return sorted(got)


@pytest.mark.parametrize("how", ["ssl", "mtls", "sasl_plaintext-plain",
                                 "sasl_plaintext-scram-sha-256", "sasl_ssl-scram-sha-512",
                                 "sasl_ssl-plain"])
def test_confluent_kafka_produces_and_consumes(broker: BrokerProcess, tls: dict[str, Any],
                                               how: str) -> None:
    topic = new_topic(broker)
    assert produce_and_consume(client_settings(broker, tls, how), topic) == sorted(
        b"record-%d" % i for i in range(20))
    assert end_offsets(broker, topic) == [10, 10]


def refused(settings: dict[str, str], topic: str) -> str:
    """What librdkafka says when a producer cannot get in; it must not deliver."""
    errors: list[str] = []
    producer = Producer({**settings, "message.timeout.ms": 3000, "socket.timeout.ms": 3000,
                         "error_cb": lambda e: errors.append(str(e))})
    delivered: list[Any] = []
    producer.produce(topic, b"intruder", on_delivery=lambda err, m: delivered.append(err))
    producer.flush(10)
    assert delivered and delivered[0] is not None, "a refused client delivered a record"
    return " ".join(errors)


@pytest.mark.parametrize(("how", "change", "said"), [
    ("sasl_plaintext-plain", {"sasl.password": "guess"}, "Invalid username or password"),
    ("sasl_plaintext-plain", {"sasl.username": "nobody"}, "Invalid username or password"),
    ("sasl_plaintext-scram-sha-256", {"sasl.password": "guess"}, "invalid credentials"),
    ("sasl_ssl-scram-sha-512", {"sasl.username": "nobody"}, "invalid credentials"),
    ("sasl_ssl-scram-sha-512", {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                                "sasl.password": "alice-secret"}, "invalid credentials"),
    ("ssl", {"ssl.ca.location": "other_ca"}, "certificate verify failed"),
    ("mtls", {"ssl.certificate.location": "stranger_cert",
              "ssl.key.location": "stranger_key"}, ""),
    ("mtls", {"ssl.certificate.location": None, "ssl.key.location": None}, ""),
])
def test_bad_credentials_are_refused_and_nothing_is_written(
        broker: BrokerProcess, tls: dict[str, Any], how: str,
        change: dict[str, str | None], said: str) -> None:
    topic = new_topic(broker)
    settings = client_settings(broker, tls, how)
    for key, value in change.items():
        if value is None:
            settings.pop(key)
        else:
            settings[key] = tls.get(value, value)
    assert said in refused(settings, topic)
    assert end_offsets(broker, topic) == [0, 0]


def test_plaintext_clients_on_tls_and_sasl_ports_are_refused(broker: BrokerProcess,
                                                             tls: dict[str, Any]) -> None:
    topic = new_topic(broker)
    for listener in ("TLS", "MTLS", "SASL_SSL"):
        refused({"bootstrap.servers": broker.address(listener)}, topic)
    # A SASL listener: nothing but ApiVersions and the handshake before authentication.
    with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), 5) as s:
        s.settimeout(5)
        assert wire(s, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).error_code == 0
        s.sendall(encode_request(MetadataRequest(topics=None), 12, 2, "t"))
        assert s.recv(100) == b""  # closed, unanswered
    assert end_offsets(broker, topic) == [0, 0]
    # The broker still serves everyone else.
    assert produce_and_consume(client_settings(broker, tls, "sasl_ssl-plain"), topic, 4) == [
        b"record-0", b"record-1", b"record-2", b"record-3"]


def wire(sock: socket.socket, api_key: int, version: int, body: Any) -> Any:
    sock.sendall(encode_request(body, version, 1, "odradek-test"))
    size = struct.unpack(">i", _read(sock, 4))[0]
    _, response = decode_response(_read(sock, size), api_key, version)
    return response


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def test_a_big_request_before_authentication_closes_the_connection(
        broker: BrokerProcess) -> None:
    # sasl.server.max.receive.size (512 KiB): a client that is not authenticated cannot
    # make the broker hold a request of the full socket.request.max.bytes.
    with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), 5) as s:
        s.settimeout(5)
        s.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
        assert s.recv(100) == b""


def test_sessions_are_reauthenticated(broker: BrokerProcess, tls: dict[str, Any]) -> None:
    """KIP-368: with connections.max.reauth.ms, librdkafka re-authenticates its connections
    before their session ends; the broker closes none of them for an expired session."""
    topic = new_topic(broker)
    settings = client_settings(broker, tls, "sasl_plaintext-scram-sha-256")
    producer = Producer({**settings, "acks": "all"})
    errors: list[Any] = []
    import time
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"r", partition=0,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
        sent += 1
        producer.flush(TIMEOUT)
        time.sleep(0.1)
    assert not errors, errors
    assert end_offsets(broker, topic)[0] == sent
    assert "SASL session expired" not in broker.log_text()


def test_scram_users_are_described_and_deleted(broker: BrokerProcess,
                                               tls: dict[str, Any]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    user = f"temp-{uuid.uuid4().hex[:6]}"
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"pw")])[user].result(
        TIMEOUT)
    described = {u: f.result(TIMEOUT) for u, f in
                 admin.describe_user_scram_credentials([user, SCRAM_USER]).items()}
    assert [(i.mechanism, i.iterations) for i in described[user].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    assert len(described[SCRAM_USER].scram_credential_infos) == 2
    settings = {**client_settings(broker, tls, "sasl_ssl-scram-sha-512"),
                "sasl.username": user, "sasl.password": "pw"}
    topic = new_topic(broker)
    assert produce_and_consume(settings, topic, 2) == [b"record-0", b"record-1"]
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        user, ScramMechanism.SCRAM_SHA_512)])[user].result(TIMEOUT)
    assert "invalid credentials" in refused(settings, topic)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials([user])[user].result(TIMEOUT)
    with pytest.raises(KafkaException, match="Too few iterations"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw")])[
            user].result(TIMEOUT)


def test_kafka_python_over_sasl_ssl_and_ssl(broker: BrokerProcess, tls: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(broker)
    context = ssl.create_default_context(cafile=tls["ca"])
    ways = [
        {"bootstrap_servers": broker.address("SASL_SSL"), "security_protocol": "SASL_SSL",
         "ssl_context": context, "sasl_mechanism": "SCRAM-SHA-512",
         "sasl_plain_username": SCRAM_USER, "sasl_plain_password": SCRAM_PASSWORD},
        {"bootstrap_servers": broker.address("TLS"), "security_protocol": "SSL",
         "ssl_context": context},
        {"bootstrap_servers": broker.address("SASL_PLAINTEXT"),
         "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
         "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"},
    ]
    for n, way in enumerate(ways):
        producer = KafkaProducer(acks="all", **way)
        producer.send(topic, b"kp-%d" % n, partition=0).get(TIMEOUT)
        producer.close()
    consumer = KafkaConsumer(consumer_timeout_ms=5000, auto_offset_reset="earliest", **ways[0])
    consumer.assign([__import__("kafka").TopicPartition(topic, 0)])
    got = [m.value for _, m in zip(range(3), consumer, strict=False)]
    consumer.close()
    assert got == [b"kp-0", b"kp-1", b"kp-2"]


def test_aiokafka_over_sasl_ssl(broker: BrokerProcess, tls: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = new_topic(broker)

    async def run() -> list[bytes]:
        got = []
        for mechanism, user, password in (("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
                                          ("PLAIN", "alice", "alice-secret")):
            way = {"bootstrap_servers": broker.address("SASL_SSL"),
                   "security_protocol": "SASL_SSL",
                   "ssl_context": create_ssl_context(cafile=tls["ca"]),
                   "sasl_mechanism": mechanism, "sasl_plain_username": user,
                   "sasl_plain_password": password}
            producer = AIOKafkaProducer(acks="all", **way)
            await producer.start()
            try:
                await producer.send_and_wait(topic, mechanism.encode(), partition=1)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **way)
            await consumer.start()
            try:
                got = [m.value for m in
                       (await consumer.getmany(timeout_ms=5000)).get(
                           __import__("aiokafka").TopicPartition(topic, 1), [])]
            finally:
                await consumer.stop()
        return got

    assert asyncio.run(asyncio.wait_for(run(), 60)) == [b"SCRAM-SHA-256", b"PLAIN"]


def test_oauthbearer_with_unsecured_and_signed_tokens(broker: BrokerProcess,
                                                      tls: dict[str, Any],
                                                      oauth: dict[str, Any]) -> None:
    topic = new_topic(broker)
    # librdkafka's own unsecured JWS, as Kafka's default validator takes it.
    unsecured = {"bootstrap.servers": broker.address("SASL_SSL"),
                 "security.protocol": "SASL_SSL", "ssl.ca.location": tls["ca"],
                 "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                 "sasl.oauthbearer.config": "principal=dave"}
    assert produce_and_consume(unsecured, topic, 2) == [b"record-0", b"record-1"]
    # Signed by the identity provider, for the right audience: served.
    signed = {"bootstrap.servers": broker.address("OAUTH"), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "OAUTHBEARER",
              "oauth_cb": lambda _config: signed_token(oauth, "erin")}
    signed_topic = new_topic(broker)
    assert produce_and_consume(signed, signed_topic, 3) == [b"record-0", b"record-1",
                                                            b"record-2"]
    # Another audience, or an unsigned token on the JWKS listener: refused. (An expired
    # token librdkafka refuses to send at all; the validator's unit tests cover it.)
    refused({**signed, "oauth_cb": lambda _c: signed_token(oauth, "erin", audience="elsewhere")},
            signed_topic)
    refused({**unsecured, "bootstrap.servers": broker.address("OAUTH"),
             "security.protocol": "SASL_PLAINTEXT"}, signed_topic)
    assert sum(end_offsets(broker, topic)) == 2
    assert sum(end_offsets(broker, signed_topic)) == 3


def test_debians_kcat_over_sasl_ssl_with_scram(broker: BrokerProcess,
                                               tls: dict[str, Any]) -> None:
    """kcat (librdkafka 2.0: its SCRAM final message repeats its nonce in front, which
    Kafka accepts) produces and consumes over SASL_SSL."""
    import subprocess

    topic = new_topic(broker)
    settings = ["-b", broker.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
                "-X", f"ssl.ca.location={tls['ca']}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                "-X", f"sasl.username={SCRAM_USER}", "-X", f"sasl.password={SCRAM_PASSWORD}"]
    subprocess.run(["kcat", "-P", "-t", topic, "-p", "0", *settings], input=b"one\ntwo\n",
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          *settings], capture_output=True, check=True, timeout=30).stdout
    assert out.split() == [b"one", b"two"]


def test_inter_broker_requests_are_refused_on_client_listeners(broker: BrokerProcess,
                                                               tls: dict[str, Any]) -> None:
    """WriteTxnMarkers sent to a client listener (here SASL_PLAINTEXT, authenticated as a
    client) is answered CLUSTER_AUTHORIZATION_FAILED: markers are the brokers' alone."""
    topic = new_topic(broker)
    request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
    context = ssl.create_default_context(cafile=tls["ca"])
    with socket.create_connection(("127.0.0.1", broker.ports["TLS"]), 5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as s:
        s.settimeout(5)
        response = wire(s, ApiKey.WRITE_TXN_MARKERS, 1, request)
    assert [p.error_code for m in response.markers for t in m.topics for p in t.partitions
            ] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert end_offsets(broker, topic) == [0, 0]
