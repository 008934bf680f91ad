"""A secured 3-broker cluster on ZooKeeper (issue 17): brokers talk to each other over a
SASL_SSL inter-broker listener as User:broker (a super user), clients authenticate on it
too, and Kafka's ACL authorizer checks everyone. Replication, leader elections and a
killed leader's return all go over TLS with SASL; nothing acknowledged is lost; ACLs made
through one broker hold on all and survive restarts; inter-broker requests from a client
are refused."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore
from support.cluster import WAIT, Cluster, wait_until
from support.replication import agreed_full_isr

from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.messages.stop_replica_request import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)

TIMEOUT = 30
PASSWORDS = {"broker": "broker-secret", "alice": "alice-secret"}


@pytest.fixture
def secure_cluster(tmp_path: Path, connect: str) -> Iterator[tuple[Cluster, str]]:
    ca = CertificateAuthority("Cluster CA")
    keystore = write_pem_keystore(tmp_path / "broker.pem", ca.issue("localhost"))
    truststore = write_pem_truststore(tmp_path / "ca.pem", ca)
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "inter.broker.listener.name": "SECURE",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        # The broker's own login (username/password) and the PLAIN users it accepts.
        "listener.name.secure.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="broker" password="{PASSWORDS["broker"]}" {users};',
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The test's own bookkeeping goes over PLAINTEXT, as a super user.
        "super.users": "User:broker;User:ANONYMOUS",
        "offsets.topic.replication.factor": "3",
    }
    cluster = Cluster(tmp_path, connect, brokers=3, settings=settings)
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        print(cluster.logs())
        raise
    yield cluster, str(truststore)
    for broker in cluster.brokers.values():
        broker.kill()
    text = cluster.logs()
    assert "Traceback" not in text, text


def secure(cluster: Cluster, truststore: str, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": ",".join(b.address("SECURE")
                                          for b in cluster.brokers.values() if b.ports),
            "security.protocol": "SASL_SSL", "ssl.ca.location": truststore,
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def produce(settings: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer({**settings, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert producer.flush(TIMEOUT) == 0 and not errors, errors


def read_all(settings: dict[str, Any], topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({**settings, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        def done() -> bool:
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            return len(got) >= expected
        wait_until(done, WAIT, f"{expected} records of {topic}")
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(240)
def test_a_sasl_ssl_cluster_replicates_and_survives_a_leader_kill(
        secure_cluster: tuple[Cluster, str]) -> None:
    cluster, truststore = secure_cluster
    topic = "secured"
    admin = AdminClient(secure(cluster, truststore, "broker"))  # a super user
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[
        topic].result(TIMEOUT)
    # alice may write and read the topic, as any group: granted through one broker.
    for f in admin.create_acls([
            AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                       "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ)] + [
            AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:alice",
                       "*", AclOperation.READ, AclPermissionType.ALLOW)]).values():
        f.result(TIMEOUT)
    wait_until(lambda: agreed_full_isr(cluster, topic), WAIT, "a full ISR, over SASL_SSL")
    alice = secure(cluster, truststore, "alice")
    first = [b"before-%d" % i for i in range(50)]
    produce(alice, topic, first)

    leader = cluster.partitions(topic)[0][0]
    cluster.kill(leader)
    wait_until(lambda: cluster.partitions(topic).get(0, (-1,))[0] not in (-1, leader), WAIT,
               "a new leader, elected by the controller over SASL_SSL")
    second = [b"after-%d" % i for i in range(50)]
    produce(alice, topic, second)
    assert read_all(alice, topic, 100) == first + second

    # The killed broker comes back, catches up over SASL_SSL and rejoins the ISR.
    cluster.brokers[leader].start()
    cluster.wait_for_brokers(set(cluster.brokers))
    wait_until(lambda: agreed_full_isr(cluster, topic), WAIT,
               f"broker {leader} back in the ISR of {topic}")
    assert "Authentication failed" not in cluster.logs()
    assert "is Denied operation = CLUSTER_ACTION" not in cluster.logs()


def test_inter_broker_requests_from_a_client_are_refused(
        secure_cluster: tuple[Cluster, str]) -> None:
    """StopReplica with delete_partition=true, sent by a client to the PLAINTEXT listener
    (not the inter-broker one): refused, and the partition keeps its records."""
    cluster, truststore = secure_cluster
    topic = "kept"
    admin = AdminClient(secure(cluster, truststore, "broker"))
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(TIMEOUT)
    wait_until(lambda: agreed_full_isr(cluster, topic), WAIT, "a full ISR")
    produce(secure(cluster, truststore, "broker"), topic, [b"precious"])
    victim = cluster.brokers[1]
    request = StopReplicaRequest(
        controller_id=1, controller_epoch=2**30, broker_epoch=2**40, topic_states=[
            StopReplicaTopicState(topic_name=topic, partition_states=[
                StopReplicaPartitionState(partition_index=0, leader_epoch=2**30,
                                          delete_partition=True)])])
    with socket.create_connection(("127.0.0.1", victim.port), 5) as s:
        s.settimeout(5)
        s.sendall(encode_request(request, 4, 7, "intruder"))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        _, response = decode_response(s.recv(size, socket.MSG_WAITALL), 5, 4)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert read_all(secure(cluster, truststore, "broker"), topic, 1) == [b"precious"]
    assert (victim.data_dir / f"{topic}-0").is_dir()
