"""A TLS listener's keystore and truststore reloaded without a restart (KIP-226), on a real
broker: the same AlterConfigs that reloads an Apache Kafka broker's certificates
(`kafka-configs.sh --entity-type brokers --entity-name 1 --alter --add-config
listener.name.ssl.ssl.keystore.location=...`), sent by confluent-kafka's AdminClient.

A file replaced in place is reloaded when its setting is sent again; a new certificate must
keep the old one's distinguished name and subject alternative names, as Kafka's SslFactory
checks; connections already up keep their TLS session; new ones get the new certificate,
and the dynamic setting survives a restart."""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from cryptography import x509
from support.broker import BrokerProcess
from support.certs import (
    CertificateAuthority,
    Issued,
    write_pem_keystore,
    write_pem_truststore,
    write_pkcs12_keystore,
)

from odradek.protocol.errors import ErrorCode

TIMEOUT = 30
NODE = "1"


class Tls:
    """The certificates of one broker's listeners, written where its settings point."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.ca = CertificateAuthority("Reload Test CA")
        self.other_ca = CertificateAuthority("Another CA")
        self.keystore = write_pem_keystore(d / "server.pem", self.ca.issue())
        self.ca_file = write_pem_truststore(d / "ca.pem", self.ca)
        self.truststore = write_pem_truststore(d / "trust.pem", self.ca)

    def client(self, ca: CertificateAuthority, name: str) -> tuple[Path, Path]:
        issued = ca.issue(f"client-{name}")
        cert = self.d / f"client-{name}.crt"
        key = self.d / f"client-{name}.key"
        cert.write_text(issued.chain_pem())
        key.write_text(issued.key_pem())
        return cert, key


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return Tls(tmp_path / "tls")


@pytest.fixture
def broker(tmp_path: Path, tls: Tls) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.keystore),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": str(tls.truststore),
    }).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})


def alter(admin: AdminClient, settings: dict[str, str], *, validate_only: bool = False
          ) -> None:
    resource = ConfigResource(ResourceType.BROKER, NODE, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in settings.items()])
    admin.incremental_alter_configs([resource], validate_only=validate_only,
                                    request_timeout=TIMEOUT)[resource].result(TIMEOUT)


def refused(admin: AdminClient, settings: dict[str, str]) -> str:
    """The message of an INVALID_REQUEST answer to the alter."""
    with pytest.raises(KafkaException) as info:
        alter(admin, settings)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_REQUEST, error
    return str(error.str())


def served(broker: BrokerProcess, tls: Tls, listener: str = "SSL",
           client: tuple[Path, Path] | None = None) -> int:
    """The serial number of the certificate a new connection to the listener is shown,
    after an ApiVersions round trip (TLS 1.3 refuses a client certificate only then)."""
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    context.check_hostname = False
    if client is not None:
        context.load_cert_chain(*map(str, client))
    host, port = broker.address(listener).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as raw, \
            context.wrap_socket(raw) as sock:
        der = sock.getpeercert(binary_form=True)
        assert der is not None
        # ApiVersions v0, correlation id 7, client id "t"
        body = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
        sock.sendall(struct.pack(">i", len(body)) + body)
        header = sock.recv(8)
        assert len(header) == 8 and struct.unpack(">ii", header)[1] == 7, header
    return x509.load_der_x509_certificate(der).serial_number


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def replace_in_place(path: Path, issued: Issued) -> None:
    """As cert-manager or an operator does: a new file renamed over the old one."""
    write_pem_keystore(path.with_suffix(".new"), issued)
    os.replace(path.with_suffix(".new"), path)


def produce(settings: dict[str, str], producer: Producer | None = None) -> Producer:
    producer = producer or Producer({**settings, "acks": "all"})
    producer.produce("reload", b"x")
    assert producer.flush(TIMEOUT) == 0
    return producer


def test_a_keystore_replaced_in_place_is_reloaded_when_its_setting_is_sent_again(
        broker: BrokerProcess, tls: Tls, admin: AdminClient) -> None:
    admin.create_topics([NewTopic("reload", 1, 1)])["reload"].result(TIMEOUT)
    first = serial_of(tls.keystore)
    assert served(broker, tls) == first
    client = {"bootstrap.servers": broker.address("SSL"), "security.protocol": "SSL",
              "ssl.ca.location": str(tls.ca_file)}
    producer = produce(client)  # a connection made before the reload

    replace_in_place(tls.keystore, tls.ca.issue())
    second = serial_of(tls.keystore)
    assert served(broker, tls) == first  # the broker reads its files when told to
    alter(admin, {"listener.name.ssl.ssl.keystore.location": str(tls.keystore)},
          validate_only=True)
    assert served(broker, tls) == first  # validation installs nothing
    alter(admin, {"listener.name.ssl.ssl.keystore.location": str(tls.keystore)})
    assert served(broker, tls) == second
    # The MTLS listener reads the same file (ssl.keystore.location): reloaded too, as Kafka
    # reloads every listener whose stores changed on disk.
    assert served(broker, tls, "MTLS", tls.client(tls.ca, "a")) == second

    produce(client, producer)  # the connection made before still works
    produce(client).flush(TIMEOUT)  # and new clients trust the new certificate
    resource = ConfigResource(ResourceType.BROKER, NODE)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    entry = entries["listener.name.ssl.ssl.keystore.location"]
    assert entry.value == str(tls.keystore)
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert "listener SSL: reloaded its TLS keystore" in broker.log_text()

    # Sent again with nothing changed on disk: nothing to reload.
    alter(admin, {"listener.name.ssl.ssl.keystore.location": str(tls.keystore)})
    assert broker.log_text().count("listener SSL: reloaded its TLS keystore") == 1


def test_a_new_keystore_must_keep_the_name_and_the_alternative_names(
        broker: BrokerProcess, tls: Tls, admin: AdminClient) -> None:
    first = serial_of(tls.keystore)
    other_name = write_pem_keystore(tls.d / "other-name.pem", tls.ca.issue("broker-2"))
    message = refused(admin, {"listener.name.ssl.ssl.keystore.location": str(other_name)})
    assert "Keystore DistinguishedName does not match" in message
    assert "CN=broker-2" in message and "ssl.allow.dn.changes" in message
    fewer_names = write_pem_keystore(tls.d / "fewer-names.pem",
                                     tls.ca.issue(ip_addresses=()))
    message = refused(admin, {"listener.name.ssl.ssl.keystore.location": str(fewer_names)})
    assert "Keystore SubjectAltNames do not match" in message
    missing = tls.d / "missing.pem"
    message = refused(admin, {"listener.name.ssl.ssl.keystore.location": str(missing)})
    assert "listener SSL" in message and "cannot read" in message
    # Only what Kafka reconfigures may change.
    message = refused(admin, {"listener.name.ssl.ssl.client.auth": "required"})
    assert "Only a TLS listener's keystore and truststore" in message

    # Nothing was installed or stored.
    assert served(broker, tls) == first
    resource = ConfigResource(ResourceType.BROKER, NODE)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert "listener.name.ssl.ssl.keystore.location" not in entries

    # More names are fine, and the setting survives a restart.
    more_names = write_pem_keystore(tls.d / "more-names.pem", tls.ca.issue(
        dns_names=("localhost", "broker.example")))
    alter(admin, {"listener.name.ssl.ssl.keystore.location": str(more_names)})
    assert served(broker, tls) == serial_of(more_names)
    broker.restart()
    assert served(broker, tls) == serial_of(more_names)


def test_a_truststore_reloaded_lets_clients_of_a_new_ca_in(
        broker: BrokerProcess, tls: Tls, admin: AdminClient) -> None:
    ours, theirs = tls.client(tls.ca, "ours"), tls.client(tls.other_ca, "theirs")
    served(broker, tls, "MTLS", ours)
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        served(broker, tls, "MTLS", theirs)

    both = write_pem_truststore(tls.d / "both.pem", tls.ca, tls.other_ca)
    alter(admin, {"listener.name.mtls.ssl.truststore.location": str(both)})
    served(broker, tls, "MTLS", theirs)
    served(broker, tls, "MTLS", ours)

    # And out again, on the server side at once (OpenSSL cannot forget a CA in place: the
    # listener's new handshakes move to a context built afresh).
    alter(admin, {"listener.name.mtls.ssl.truststore.location": str(tls.truststore)})
    served(broker, tls, "MTLS", ours)
    with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
        served(broker, tls, "MTLS", theirs)


def test_a_pkcs12_keystore_with_a_new_password_through_the_encrypted_store(
        tmp_path: Path, tls: Tls) -> None:
    """Passwords updated dynamically are stored encrypted with password.encoder.secret, as
    Kafka stores them, and decoded again at start-up."""
    first = write_pkcs12_keystore(tls.d / "first.p12", tls.ca.issue(), "first-pw")
    broker = BrokerProcess(tmp_path / "p12", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(first),
        "ssl.keystore.password": "first-pw",
        "password.encoder.secret": "encoder-secret",
    }).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
        second_issued = tls.ca.issue()
        second = write_pkcs12_keystore(tls.d / "second.p12", second_issued, "second-pw")
        message = refused(admin, {"listener.name.ssl.ssl.keystore.location": str(second)})
        assert "listener SSL" in message  # the static password does not open it
        alter(admin, {"listener.name.ssl.ssl.keystore.location": str(second),
                      "listener.name.ssl.ssl.keystore.password": "second-pw"})
        assert served(broker, tls) == second_issued.cert.serial_number
        stored = b"".join(p.read_bytes() for p in (tmp_path / "p12").rglob("*") if p.is_file())
        assert b"second-pw" not in stored and b"encryptedPassword:" in stored
        broker.restart()
        assert served(broker, tls) == second_issued.cert.serial_number
        assert "could not be decoded" not in broker.log_text()
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def test_passwords_need_the_encoder_secret(admin: AdminClient) -> None:
    message = refused(admin, {"listener.name.ssl.ssl.keystore.password": "x"})
    assert "Password encoder secret not configured" in message
