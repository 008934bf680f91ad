"""The web console's writes on a broker with Kafka's AclAuthorizer (authorizer.class.name):
each needs the HTTP Basic credentials of a SCRAM user, and that user's ACLs decide as they
would for the Kafka request the write stands for (CreateTopics: CREATE on the cluster or
the topic; DeleteRecords: DELETE on the topic; a reset of offsets: READ on the group and
the topic). One real broker process; its brokers' own principal (User:broker, PLAIN on
the inter-broker listener, a super user) is the one the console's Kafka requests use."""

from __future__ import annotations

import subprocess
import sys
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
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.broker import BrokerProcess
from support.console import basic, call, get, write

TIMEOUT = 30.0
BROKER_PASSWORD = "broker-secret"  # User:broker: PLAIN only, a super user
SCRAM_USERS = {"alice": ("alice-secret", ScramMechanism.SCRAM_SHA_256),
               "carol": ("carol-secret", ScramMechanism.SCRAM_SHA_512),
               "root": ("root-secret", ScramMechanism.SCRAM_SHA_256)}  # a super user
TOPIC = "guarded"
_admins: list[AdminClient] = []


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required ;"
    process = BrokerProcess(tmp_path_factory.mktemp("console-acls"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="broker" password="{BROKER_PASSWORD}" user_broker="{BROKER_PASSWORD}";',
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:root",
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "offsets.topic.num.partitions": "1",
        "http.listeners": "http://127.0.0.1:0",
        "http.console.write.enabled": "true",
    }).start()
    try:
        admin = admin_client(process)
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096),
                                                password.encode())
                   for user, (password, mechanism) in SCRAM_USERS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(TIMEOUT)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
        producer = Producer(client(process))
        for i in range(10):
            producer.produce(TOPIC, b"v%d" % i, partition=i % 2)
        assert producer.flush(TIMEOUT) == 0
        yield process
    finally:
        _admins.clear()
        process.stop()
    log = process.log_text()
    assert "Traceback" not in log, log


def client(broker: BrokerProcess) -> dict[str, Any]:
    """librdkafka settings of User:broker, the super user."""
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "broker", "sasl.password": BROKER_PASSWORD}


def admin_client(broker: BrokerProcess) -> AdminClient:
    if not _admins:
        _admins.append(AdminClient(client(broker)))
    return _admins[0]


def port(broker: BrokerProcess) -> int:
    assert broker.http_port is not None
    return broker.http_port


def as_user(user: str, password: str | None = None) -> dict[str, str]:
    return basic(user, password if password is not None else SCRAM_USERS[user][0])


def error(got: tuple[int, Any]) -> tuple[int, str]:
    status, body = got
    assert isinstance(body, dict), got
    return status, body["error"]


def topics(broker: BrokerProcess) -> set[str]:
    return set(admin_client(broker).list_topics(timeout=TIMEOUT).topics)


def allow(principal: str, operation: AclOperation, kind: ResourceType, name: str
          ) -> AclBinding:
    return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*", operation,
                      AclPermissionType.ALLOW)


def add_acls(broker: BrokerProcess, *bindings: AclBinding) -> None:
    for future in admin_client(broker).create_acls(list(bindings)).values():
        future.result(TIMEOUT)


WRITES = [("/api/topics", {"name": "anyone", "partitions": 1}),
          (f"/api/topics/{TOPIC}/delete-records", {"partitions": {"0": 1}}),
          ("/api/groups/g/reset-offsets", {"topic": TOPIC, "to": "earliest"})]


def log_start(broker: BrokerProcess) -> list[int]:
    return [p["log_start_offset"] for p in get(port(broker), f"/api/topics/{TOPIC}")[
        "partitions"]]


def test_reads_work_through_the_brokers_own_principal(secure_broker: BrokerProcess) -> None:
    """The console's own Kafka requests go as User:broker (the inter-broker listener's
    login, a super user): sizes, counts and records are there. (The reads themselves ask
    for no credentials, as routes.py has it.)"""
    http_port = port(secure_broker)
    assert get(http_port, "/api/cluster")["console"]["write_enabled"] is True
    row = next(t for t in get(http_port, "/api/topics")["topics"] if t["name"] == TOPIC)
    assert row["messages"] == 10 and row["size_bytes"] > 0
    records = get(http_port, f"/api/topics/{TOPIC}/messages?limit=3")["records"]
    assert len(records) == 3


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Basic"}, {"Authorization": "Basic !!!not-base64"},
    {"Authorization": "Bearer abc"}, as_user("alice", "wrong"), as_user("nobody", "x"),
    as_user("alice", ""), as_user("", "alice-secret"),
    as_user("carol", SCRAM_USERS["alice"][0]),
    basic("broker", BROKER_PASSWORD),  # a PLAIN user, not a SCRAM one: no
], ids=["none", "empty", "not-base64", "bearer", "wrong-password", "unknown-user",
        "no-password", "no-user", "another-users-password", "plain-user"])
def test_a_write_without_valid_scram_credentials_is_401(secure_broker: BrokerProcess,
                                                         headers: dict[str, str]) -> None:
    before = topics(secure_broker), log_start(secure_broker)
    for path, body in WRITES:
        assert error(write(port(secure_broker), path, body, headers)) == (
            401, "SASL_AUTHENTICATION_FAILED"), path
    assert (topics(secure_broker), log_start(secure_broker)) == before


def test_a_user_without_acls_is_refused_as_kafka_would(secure_broker: BrokerProcess) -> None:
    http_port = port(secure_broker)
    alice = as_user("alice")
    starts = log_start(secure_broker)
    assert error(write(http_port, "/api/topics", {"name": "alices"}, alice)) == (
        403, "TOPIC_AUTHORIZATION_FAILED")
    assert error(write(http_port, f"/api/topics/{TOPIC}/delete-records",
                       {"partitions": {"0": 1}}, alice)) == (403, "TOPIC_AUTHORIZATION_FAILED")
    assert error(write(http_port, "/api/groups/alices-group/reset-offsets",
                       {"topic": TOPIC, "to": "latest"}, alice)) == (
        403, "GROUP_AUTHORIZATION_FAILED")
    assert "alices" not in topics(secure_broker) and log_start(secure_broker) == starts


def test_acls_let_a_user_write(secure_broker: BrokerProcess, tmp_path: Path) -> None:
    http_port = port(secure_broker)
    carol = as_user("carol")  # SCRAM-SHA-512
    # `odradek acls add`: CREATE on one topic.
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in client(secure_broker).items()))
    run = subprocess.run([sys.executable, "-m", "odradek", "acls", "add", "--command-config",
                          str(config), "--allow-principal", "User:carol", "--operation",
                          "Create", "--topic", "carols"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert write(http_port, "/api/topics", {"name": "carols", "partitions": 2}, carol) == (
        200, {"ok": True, "name": "carols"})
    metadata = admin_client(secure_broker).list_topics("carols", timeout=TIMEOUT)
    assert sorted(metadata.topics["carols"].partitions) == [0, 1]
    assert error(write(http_port, "/api/topics", {"name": "carols-too"}, carol)) == (
        403, "TOPIC_AUTHORIZATION_FAILED")
    # CREATE on the cluster: any topic.
    add_acls(secure_broker, allow("User:carol", AclOperation.CREATE, ResourceType.BROKER,
                                  "kafka-cluster"))
    assert write(http_port, "/api/topics", {"name": "carols-too"}, carol)[0] == 200
    assert {"carols", "carols-too"} <= topics(secure_broker)

    # DELETE on the topic: delete-records.
    add_acls(secure_broker, allow("User:carol", AclOperation.DELETE, ResourceType.TOPIC, TOPIC))
    assert write(http_port, f"/api/topics/{TOPIC}/delete-records", {"partitions": {"0": 2}},
                 carol) == (200, {"ok": True, "log_start_offsets": {"0": 2}})
    assert log_start(secure_broker) == [2, 0]

    # READ on the group, then on the topic too: a reset of offsets.
    group, path = "carols-group", "/api/groups/carols-group/reset-offsets"
    add_acls(secure_broker, allow("User:carol", AclOperation.READ, ResourceType.GROUP, group))
    assert error(write(http_port, path, {"topic": TOPIC, "to": "latest"}, carol)) == (
        403, "TOPIC_AUTHORIZATION_FAILED")
    add_acls(secure_broker, allow("User:carol", AclOperation.READ, ResourceType.TOPIC, TOPIC))
    status, body = write(http_port, path, {"topic": TOPIC, "to": "earliest"}, carol)
    assert status == 200, body
    consumer = Consumer({**client(secure_broker), "group.id": group})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], TIMEOUT)
    finally:
        consumer.close()
    assert [tp.offset for tp in found] == [2, 0]

    # Alice still may do none of it.
    assert error(write(http_port, "/api/topics", {"name": "alices"}, as_user("alice"))) == (
        403, "TOPIC_AUTHORIZATION_FAILED")


def test_a_scram_super_user_may_do_everything(secure_broker: BrokerProcess) -> None:
    http_port, root = port(secure_broker), as_user("root")
    assert write(http_port, "/api/topics", {"name": "roots"}, root)[0] == 200
    assert "roots" in topics(secure_broker)
    status, body = write(http_port, "/api/groups/roots-group/reset-offsets",
                         {"topic": TOPIC, "to": "latest"}, root)
    assert (status, [o["offset"] for o in body["offsets"]]) == (200, [5, 5])
    got = call(http_port, "/api/topics", "POST", {"name": "roots-2"}, root)  # no header
    assert error(got) == (403, "CONSOLE_READ_ONLY")
