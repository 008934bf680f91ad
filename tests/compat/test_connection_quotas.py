"""Connection limits on a real broker process, as Kafka's ConnectionQuotas enforces them:
max.connections.per.ip (a connection over it is closed unread), max.connections and
listener.name.<l>.max.connections (the client waits in the listen backlog and is served
once a slot frees; the inter-broker listener is exempt and closes the least recently used
connection of another), max.connection.creation.rate (connections are accepted late),
dynamic updates through confluent-kafka's AdminClient and, for the cluster-wide default
that librdkafka cannot name, over the wire as kafka-configs.sh --entity-default sends it;
and a TLS handshake that stalls gives its slot back within min(connections.max.idle.ms,
10 s).

Clients are raw sockets sending ApiVersions, so that every connection is the test's own;
a second loopback address (127.0.0.2) stands for another client host."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType as AdminResourceType
from support.broker import BrokerProcess
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore
from support.wait import wait_until

from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.messages import incremental_alter_configs_request as incremental
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30.0
QUIET_S = 0.5  # how long a held client is seen not to be answered
OTHER_HOST = "127.0.0.2"
API_VERSIONS = encode_request(ApiVersionsRequest(), 0, 1, "odradek-test")
BROKER_RESOURCE = 4
SET, DELETE = 0, 1


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    brokers: list[BrokerProcess] = []

    def start(settings: dict[str, str]) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / f"data{len(brokers)}", settings)
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.stop()
        assert "Traceback" not in broker.log_text(), broker.log_text()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), TIMEOUT, source_address=(source, 0))


def read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def answered(sock: socket.socket) -> bool:
    """Whether the ApiVersions request sent on `sock` is answered (False: the broker closed
    the connection without an answer)."""
    head = read(sock, 4)
    return head is not None and read(sock, struct.unpack(">i", head)[0]) is not None


def served(sock: socket.socket) -> bool:
    try:
        sock.sendall(API_VERSIONS)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return answered(sock)


def held(sock: socket.socket) -> bool:
    """Sends ApiVersions and sees it unanswered, and the connection open, for QUIET_S (a
    negative: only a bounded wait can show it); the answer comes later."""
    sock.sendall(API_VERSIONS)
    sock.settimeout(QUIET_S)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(TIMEOUT)
    return False


def refused(port: int, source: str = "127.0.0.1") -> bool:
    """Whether a new connection is closed by the broker without an answer."""
    with connect(port, source) as sock:
        return not served(sock)


def new_served(port: int, source: str = "127.0.0.1") -> socket.socket | None:
    """A new connection, when it is served (the broker may not have seen a close yet)."""
    sock = connect(port, source)
    if served(sock):
        return sock
    sock.close()
    return None


def test_an_address_over_max_connections_per_ip_is_closed_unread(
        start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker({"max.connections.per.ip": "3"})
    clients = [connect(broker.port) for _ in range(3)]
    assert all(served(c) for c in clients)
    assert refused(broker.port)  # closed by the broker, unanswered
    wait_until(lambda: "Rejected connection from /127.0.0.1 on listener PLAINTEXT: the "
               "address already has the configured maximum of 3 connections"
               in broker.log_text(), TIMEOUT, "the rejection logged")
    # Another address is not held to this one's count.
    other = connect(broker.port, OTHER_HOST)
    assert served(other)
    # Closing one lets a new one in; the others were served all along.
    clients.pop().close()
    clients.append(wait_until(lambda: new_served(broker.port), TIMEOUT, "a free slot"))
    assert all(served(c) for c in clients)
    for sock in [*clients, other]:
        sock.close()


def test_max_connections_holds_clients_in_the_backlog(
        start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "max.connections": "2"})
    external = broker.ports["EXTERNAL"]
    first, second = connect(external), connect(external)
    assert served(first) and served(second)  # the first is the least recently used
    third = connect(external)  # connected: it waits in the backlog, unread
    assert held(third)
    # The inter-broker listener is exempt from max.connections: it is served, and the
    # least recently used connection of another listener closes to make room.
    internal = connect(broker.ports["PLAINTEXT"])
    assert served(internal)
    assert not served(first)
    assert served(second)
    fourth = connect(external)
    assert held(fourth)  # the broker is full still
    # A connection closing lets the held one in: it is answered.
    second.close()
    third.settimeout(TIMEOUT)
    assert answered(third)
    assert served(third) and served(internal)
    for sock in (first, third, fourth, internal):
        sock.close()


def test_max_connection_creation_rate_delays_connections(
        start_broker: Callable[..., BrokerProcess]) -> None:
    # Two 1 s windows: a rate of 1 per second lets one connection in at once, then each
    # next one a window (quota.window.size.seconds) later.
    broker = start_broker({"max.connection.creation.rate": "1", "quota.window.num": "2",
                           "quota.window.size.seconds": "1"})
    start = time.monotonic()
    clients = [connect(broker.port) for _ in range(3)]
    for sock in clients:
        sock.sendall(API_VERSIONS)
    answers = []
    for sock in clients:
        assert answered(sock)
        answers.append(time.monotonic() - start)
    assert answers[0] < 0.9, answers
    assert answers[1] >= 0.9 and 1.9 <= answers[2] < TIMEOUT, answers
    for sock in clients:
        sock.close()


class Wire:
    """Requests librdkafka cannot send: the cluster-wide default broker resource ("")."""

    def __init__(self, port: int) -> None:
        self.sock = connect(port)

    def alter_cluster_default(self, configs: dict[str, str | None]) -> None:
        request = incremental.IncrementalAlterConfigsRequest(resources=[
            incremental.AlterConfigsResource(
                resource_type=BROKER_RESOURCE, resource_name="", configs=[
                    incremental.AlterableConfig(name=name, value=value,
                                                config_operation=SET if value else DELETE)
                    for name, value in configs.items()])])
        self.sock.sendall(encode_request(request, 1, 2, "odradek-test"))
        head = read(self.sock, 4)
        assert head is not None
        body = read(self.sock, struct.unpack(">i", head)[0])
        assert body is not None
        _, response = decode_response(body, request.API_KEY, 1)
        assert [(r.error_code, r.error_message) for r in response.responses] == [(0, None)]

    def close(self) -> None:
        self.sock.close()


def alter_broker(admin: AdminClient, configs: dict[str, str | None]) -> None:
    resource = ConfigResource(AdminResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(name, value or "", incremental_operation=(
            AlterConfigOpType.SET if value else AlterConfigOpType.DELETE))
        for name, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def test_limits_follow_dynamic_updates(start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT"})
    external = broker.ports["EXTERNAL"]
    # The admin clients connect from 127.0.0.1 to PLAINTEXT; the limited clients from
    # 127.0.0.2 to EXTERNAL.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    wire = Wire(broker.port)
    clients = [connect(external, OTHER_HOST) for _ in range(3)]
    assert all(served(c) for c in clients)

    # This broker's dynamic config (IncrementalAlterConfigs): an override for 127.0.0.2.
    # Connections already in stay; new ones past it are refused.
    alter_broker(admin, {"max.connections.per.ip.overrides": f"{OTHER_HOST}:2"})
    assert refused(external, OTHER_HOST)
    clients.pop().close()
    clients.pop().close()
    clients.append(wait_until(lambda: new_served(external, OTHER_HOST), TIMEOUT,
                              "a slot under the override"))
    assert refused(external, OTHER_HOST)

    # The cluster-wide default (resource ""), over the wire: the listener's own limit.
    # With the override removed, a client up to it is served; the next waits for a slot.
    wire.alter_cluster_default({"listener.name.external.max.connections": "3"})
    alter_broker(admin, {"max.connections.per.ip.overrides": None})
    clients.append(wait_until(lambda: new_served(external, OTHER_HOST), TIMEOUT,
                              "the override removed"))
    waiting = connect(external, OTHER_HOST)
    assert held(waiting)
    clients.pop().close()
    waiting.settimeout(TIMEOUT)
    assert answered(waiting)

    # Raised again, cluster-wide: no wait.
    wire.alter_cluster_default({"listener.name.external.max.connections": "10"})
    more = wait_until(lambda: new_served(external, OTHER_HOST), TIMEOUT, "the limit raised")
    text = broker.log_text()
    assert "is accepted and has no effect" not in text
    for sock in [*clients, waiting, more]:
        sock.close()
    wire.close()


def test_a_stalled_tls_handshake_gives_its_slot_back(
        start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    ca = CertificateAuthority("Odradek Test CA")
    broker = start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(write_pem_keystore(tmp_path / "server.pem",
                                                        ca.issue("localhost"))),
        # The handshake's bound: min(connections.max.idle.ms, 10 s).
        "connections.max.idle.ms": "2000", "max.connections.per.ip": "1"})
    port = broker.ports["SSL"]
    start = time.monotonic()
    stalled = connect(port)  # sends no ClientHello, and holds this address's one slot
    assert refused(port)
    stalled.settimeout(TIMEOUT)
    assert read(stalled, 1) is None  # closed by the broker
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 10, elapsed
    wait_until(lambda: "SSL handshake is taking longer than 2.0 seconds" in broker.log_text(),
               TIMEOUT, "the stalled handshake logged")
    # Its slot is free: a TLS client is served.
    context = ssl.create_default_context(cafile=str(write_pem_truststore(tmp_path / "ca.pem",
                                                                        ca)))

    def tls_client() -> Any:
        plain = connect(port)
        try:
            sock = context.wrap_socket(plain, server_hostname="localhost")
        except OSError:  # refused: the broker has not seen the stalled one go yet
            plain.close()
            return None
        if served(sock):
            return sock
        sock.close()
        return None

    wait_until(tls_client, TIMEOUT, "a TLS client served").close()
    stalled.close()
