"""ACLs through real clients (issue 17): a broker with Kafka's AclAuthorizer
(authorizer.class.name, super.users), SASL/PLAIN users, and ACLs created, listed and deleted
with confluent-kafka's AdminClient as kafka-acls.sh would. Each user can do what its ACLs
allow and nothing more: the exact Kafka error codes, and nothing written, created or
deleted by a denied request. The ACLs survive a restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.broker import BrokerProcess

TIMEOUT = 30
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
_admins: dict[tuple[int, str], AdminClient] = {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    process = BrokerProcess(tmp_path_factory.mktemp("acls"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }).start()
    yield process
    _admins.clear()
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def client(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def admin(broker: BrokerProcess, user: str = "admin") -> AdminClient:
    """One AdminClient per user and listener port, kept: a client collected while its
    futures are pending fails them with _DESTROY."""
    key = (broker.ports["SASL_PLAINTEXT"], user)
    if key not in _admins:
        _admins[key] = AdminClient(client(broker, user))
    return _admins[key]


def allow(principal: str, operation: AclOperation, kind: ResourceType, name: str,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", operation, permission)


def add_acls(broker: BrokerProcess, *bindings: AclBinding) -> None:
    for f in admin(broker).create_acls(list(bindings)).values():
        f.result(TIMEOUT)


def new_topic(broker: BrokerProcess, prefix: str = "t") -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin(broker).create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    return topic


def end_offset(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({**client(broker, "admin"), "group.id": "admin-offsets"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
    finally:
        consumer.close()


def produce(broker: BrokerProcess, user: str, topic: str, **settings: Any) -> KafkaError | None:
    """One record; the delivery error, or None."""
    producer = Producer({**client(broker, user), "message.timeout.ms": 5000,
                         "enable.idempotence": False, **settings})
    outcome: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    error: KafkaError | None = outcome[0]
    return error


def code(error: Any) -> int:
    return int(error.code())


def test_acls_are_created_listed_and_deleted_by_a_super_user_only(
        broker: BrokerProcess) -> None:
    topic = f"listed-{uuid.uuid4().hex[:6]}"
    binding = allow("User:bob", AclOperation.READ, ResourceType.TOPIC, topic)
    add_acls(broker, binding)
    listed = admin(broker).describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(TIMEOUT)
    assert listed == [binding]
    # alice may not create, list or delete ACLs.
    everything = allow("User:alice", AclOperation.ALL, ResourceType.BROKER, "kafka-cluster")
    with pytest.raises(KafkaException) as info:
        admin(broker, "alice").create_acls([everything])[everything].result(TIMEOUT)
    assert code(info.value.args[0]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' error and lists nothing; kafka-python raises it.
    assert admin(broker, "alice").describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(TIMEOUT) == []
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    kafka_python = KafkaAdminClient(
        bootstrap_servers=broker.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"])
    with pytest.raises(ClusterAuthorizationFailedError, match="DescribeAcls is not authorized"):
        kafka_python.describe_acls(ACLFilter(
            principal=None, host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY, resource_pattern=ResourcePatternFilter(
                KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY)))
    kafka_python.close()
    deleted = admin(broker).delete_acls([AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", None,
        AclOperation.ANY, AclPermissionType.ANY)])
    assert next(iter(deleted.values())).result(TIMEOUT) == [binding]


def test_produce_needs_write_and_a_deny_wins(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    error = produce(broker, "alice", topic)
    assert error is not None and code(error) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker, topic) == 0
    add_acls(broker, allow("User:*", AclOperation.WRITE, ResourceType.TOPIC, topic))
    assert produce(broker, "alice", topic) is None
    assert produce(broker, "bob", topic) is None
    add_acls(broker, allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, topic,
                           permission=AclPermissionType.DENY))
    error = produce(broker, "bob", topic)
    assert error is not None and code(error) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker, topic) == 2


def test_an_idempotent_producer_needs_write_somewhere_or_idempotent_write(
        broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    # bob may write nowhere: InitProducerId is CLUSTER_AUTHORIZATION_FAILED (KIP-679).
    error = produce(broker, "bob", topic, **{"enable.idempotence": True})
    assert error is not None
    add_acls(broker, allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, topic))
    assert produce(broker, "bob", topic, **{"enable.idempotence": True}) is None


def test_consume_needs_read_on_the_topic_and_the_group(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    assert produce(broker, "admin", topic) is None
    group = f"g-{uuid.uuid4().hex[:6]}"

    def consume() -> tuple[list[bytes], int | None]:
        consumer = Consumer({**client(broker, "alice"), "group.id": group,
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        try:
            for _ in range(20):
                m = consumer.poll(0.5)
                if m is None:
                    continue
                if m.error() is not None:
                    return [], int(m.error().code())
                consumer.commit(m, asynchronous=False)
                return [m.value()], None
            return [], None
        finally:
            consumer.close()

    add_acls(broker, allow("User:alice", AclOperation.READ, ResourceType.TOPIC, topic))
    assert consume() == ([], KafkaError.GROUP_AUTHORIZATION_FAILED)
    add_acls(broker, allow("User:alice", AclOperation.READ, ResourceType.GROUP, group))
    assert consume() == ([b"v"], None)


def test_metadata_shows_only_topics_one_may_describe(broker: BrokerProcess) -> None:
    hidden, shown = new_topic(broker, "hidden"), new_topic(broker, "shown")
    add_acls(broker, allow("User:bob", AclOperation.DESCRIBE, ResourceType.TOPIC, shown))
    topics = admin(broker, "bob").list_topics(timeout=TIMEOUT).topics
    assert shown in topics and hidden not in topics
    described = admin(broker, "bob").list_topics(hidden, timeout=TIMEOUT).topics[hidden]
    assert code(described.error) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_and_delete_topics_by_prefix(broker: BrokerProcess) -> None:
    prefix = f"alice-{uuid.uuid4().hex[:4]}-"
    add_acls(broker, allow("User:alice", AclOperation.CREATE, ResourceType.TOPIC, prefix,
                           ResourcePatternType.PREFIXED),
             allow("User:alice", AclOperation.DELETE, ResourceType.TOPIC, prefix,
                   ResourcePatternType.PREFIXED))
    mine, other = prefix + "orders", f"bob-{uuid.uuid4().hex[:4]}"
    results = admin(broker, "alice").create_topics([NewTopic(mine, 1, 1),
                                                   NewTopic(other, 1, 1)])
    results[mine].result(TIMEOUT)
    with pytest.raises(KafkaException) as info:
        results[other].result(TIMEOUT)
    assert code(info.value.args[0]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    everything = admin(broker).list_topics(timeout=TIMEOUT).topics
    assert mine in everything and other not in everything
    kept = new_topic(broker, "kept")
    results = admin(broker, "alice").delete_topics([mine, kept])
    results[mine].result(TIMEOUT)
    with pytest.raises(KafkaException) as info:
        results[kept].result(TIMEOUT)
    assert code(info.value.args[0]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert kept in admin(broker).list_topics(timeout=TIMEOUT).topics


def test_transactions_need_write_on_the_transactional_id(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    add_acls(broker, allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic))
    producer = Producer({**client(broker, "alice"), "transactional.id": tid})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(10)
    assert code(info.value.args[0]) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    add_acls(broker, allow("User:alice", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           tid))
    producer = Producer({**client(broker, "alice"), "transactional.id": tid})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(TIMEOUT)
    assert end_offset(broker, topic) == 2  # the record and its commit marker


def test_anonymous_plaintext_clients_may_do_nothing(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    add_acls(broker, allow("User:alice", AclOperation.ALL, ResourceType.TOPIC, topic))
    anonymous = {"bootstrap.servers": broker.bootstrap}
    assert topic not in AdminClient(anonymous).list_topics(timeout=TIMEOUT).topics
    producer = Producer({**anonymous, "message.timeout.ms": 5000})
    outcome: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(15)
    assert outcome and outcome[0] is not None
    assert end_offset(broker, topic) == 0
    # The producer never learnt of the topic (Metadata hides it), so it sent nothing.
    assert (f"Principal = User:ANONYMOUS is Denied operation = DESCRIBE from host = "
            f"127.0.0.1 on resource = Topic:LITERAL:{topic} for request = Metadata"
            ) in broker.log_text()


def test_scram_users_need_rights_on_the_cluster(broker: BrokerProcess) -> None:
    # (Not describe-all: librdkafka 2.x crashes on that response's top-level error, from
    # Apache Kafka as from Odradek.)
    with pytest.raises(KafkaException) as info:
        admin(broker, "alice").describe_user_scram_credentials(["bob"])["bob"].result(TIMEOUT)
    assert code(info.value.args[0]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    with pytest.raises(KafkaException) as info:
        admin(broker, "alice").alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"mine")])[
            "alice"].result(TIMEOUT)
    assert code(info.value.args[0]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_acls_survive_a_restart(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    add_acls(broker, allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, topic))
    broker.restart()
    assert produce(broker, "bob", topic) is None
    assert produce(broker, "alice", topic) is not None
    assert end_offset(broker, topic) == 1
