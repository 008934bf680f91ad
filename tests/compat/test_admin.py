"""The admin APIs against a real broker process, through real clients: confluent-kafka's
AdminClient (librdkafka) and kafka-python's KafkaAdminClient. CreatePartitions,
DeleteRecords, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs:
results, validate_only, Kafka's error codes, config sources and synonyms, dynamic broker
configs applied live and kept across a restart.

Where the clients cannot say something (a resource named twice, a null value, the
cluster-default broker resource in librdkafka, documentation), the test sends the request
itself with Odradek's codec.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.structs import TopicPartition as KpTopicPartition
from support.broker import BrokerProcess

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_configs_request,
    api_versions_request,
    create_partitions_request,
    create_topics_request,
    delete_records_request,
    describe_configs_request,
    describe_log_dirs_request,
    fetch_request,
    incremental_alter_configs_request,
)

pytestmark = pytest.mark.timeout(120)

TOPIC, BROKER = 2, 4  # ConfigResource types on the wire
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
STATIC_SEGMENT_BYTES = "4194304"  # log.segment.bytes in the broker's server.properties


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin"), {
        "auto.create.topics.enable": "false",
        "log.segment.bytes": STATIC_SEGMENT_BYTES,
    }).start()
    yield process
    process.stop()
    log = process.log_text()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="test-admin")
    yield client
    client.close()


# ---- helpers ---------------------------------------------------------------------------------


def create(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    futures[name].result(30)


def produce(broker: BrokerProcess, topic: str, count: int, size: int = 100,
            partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 0})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(topic, (b"%06d" % i) * (size // 6), partition=partition,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert not errors, errors


def error_code(future: Any) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(30)
    return int(info.value.args[0].code())


def call(broker: BrokerProcess, body: Message, version: int) -> Any:
    """Sends one request with our codec and returns the decoded response."""
    with socket.create_connection(("127.0.0.1", broker.port), 10) as sock:
        sock.sendall(encode_request(body, version, correlation_id=1, client_id="test-admin"))
        (size,) = struct.unpack(">i", _read(sock, 4))
        frame = _read(sock, size)
    _, response = decode_response(frame, body.API_KEY, version)  # type: ignore[attr-defined]
    return response


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(30)


def describe_raw(broker: BrokerProcess, kind: int, name: str, keys: list[str] | None = None,
                 version: int = 4, **flags: bool) -> Any:
    request = describe_configs_request.DescribeConfigsRequest(
        resources=[describe_configs_request.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=keys)], **flags)
    (result,) = call(broker, request, version).results
    return result


def incremental_raw(broker: BrokerProcess, resources: list[tuple[int, str, list[tuple]]],
                    validate_only: bool = False) -> list[tuple[int, str | None]]:
    m = incremental_alter_configs_request
    request = m.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        m.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
            m.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs])
        for kind, name, configs in resources])
    response = call(broker, request, 1)
    return [(r.error_code, r.error_message) for r in response.responses]


def alter_raw(broker: BrokerProcess, resources: list[tuple[int, str, dict[str, str | None]]],
              validate_only: bool = False) -> list[tuple[int, str | None]]:
    m = alter_configs_request
    request = m.AlterConfigsRequest(validate_only=validate_only, resources=[
        m.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
            m.AlterableConfig(name=k, value=v) for k, v in configs.items()])
        for kind, name, configs in resources])
    response = call(broker, request, 2)
    return [(r.error_code, r.error_message) for r in response.responses]


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


# ---- ApiVersions -----------------------------------------------------------------------------


def test_admin_apis_at_kafka_39_versions(broker: BrokerProcess) -> None:
    response = call(broker, api_versions_request.ApiVersionsRequest(
        client_software_name="test", client_software_version="1"), 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.CREATE_PARTITIONS] == (0, 3)
    assert ranges[ApiKey.DELETE_RECORDS] == (0, 2)
    assert ranges[ApiKey.DESCRIBE_CONFIGS] == (0, 4)
    assert ranges[ApiKey.ALTER_CONFIGS] == (0, 2)
    assert ranges[ApiKey.INCREMENTAL_ALTER_CONFIGS] == (0, 1)
    assert ranges[ApiKey.DESCRIBE_LOG_DIRS] == (0, 4)


# ---- CreatePartitions ------------------------------------------------------------------------


def test_create_partitions(broker: BrokerProcess, admin: AdminClient,
                           kp_admin: KafkaAdminClient) -> None:
    create(admin, "grow", 2)
    # validate_only changes nothing
    admin.create_partitions([NewPartitions("grow", 4)], validate_only=True)["grow"].result(30)
    assert partition_count(admin, "grow") == 2
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(30)
    assert partition_count(admin, "grow") == 4
    produce(broker, "grow", 3, partition=3)  # the new partitions are served at once
    # kafka-python, with a manual assignment of the one new partition
    kp_admin.create_partitions({"grow": {"count": 5, "assignments": [[1]]}})
    assert partition_count(admin, "grow") == 5
    topic = admin.describe_topics(TopicCollection(["grow"]))["grow"].result(30)
    assert [p.id for p in topic.partitions] == [0, 1, 2, 3, 4]
    assert all(p.leader.id == 1 for p in topic.partitions)

    def grow(count: int, assignments: list[list[int]] | None = None, name: str = "grow") -> int:
        new = (NewPartitions(name, count) if assignments is None
               else NewPartitions(name, count, assignments))
        return error_code(admin.create_partitions([new])[name])

    assert grow(5) == ErrorCode.INVALID_PARTITIONS  # the same count
    assert grow(3) == ErrorCode.INVALID_PARTITIONS  # fewer
    assert grow(6, [[2]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # no broker 2
    assert grow(3, name="no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    m = create_partitions_request
    wrong = m.CreatePartitionsTopic(name="grow", count=7, assignments=[  # 2 new, 1 given
        m.CreatePartitionsAssignment(broker_ids=[1])])
    (result,) = call(broker, m.CreatePartitionsRequest(topics=[wrong]), 3).results
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert partition_count(admin, "grow") == 5

    # A topic named twice is refused once, the others go ahead (as Kafka's controller).
    request = m.CreatePartitionsRequest(timeout_ms=30_000, topics=[
        m.CreatePartitionsTopic(name="grow", count=6, assignments=None),
        m.CreatePartitionsTopic(name="grow", count=7, assignments=None),
        m.CreatePartitionsTopic(name="no-such-topic", count=2, assignments=None)])
    results = call(broker, request, 3).results
    assert [(r.name, r.error_code) for r in results] == [
        ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("grow", ErrorCode.INVALID_REQUEST)]
    assert results[1].error_message == "Duplicate topic name."
    assert partition_count(admin, "grow") == 5
    response = call(broker, m.CreatePartitionsRequest(timeout_ms=30_000, topics=[
        m.CreatePartitionsTopic(name="grow", count=4, assignments=None)]), 0)
    assert response.results[0].error_message == (
        "The topic grow currently has 5 partition(s); 4 would not be an increase.")


# ---- DescribeConfigs -------------------------------------------------------------------------


def test_describe_topic_configs_sources_and_synonyms(broker: BrokerProcess,
                                                     admin: AdminClient,
                                                     kp_admin: KafkaAdminClient) -> None:
    create(admin, "described", 1, **{"retention.ms": "3600000", "cleanup.policy": "compact"})
    configs = describe(admin, ResourceType.TOPIC, "described")
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("3600000",
                                                   ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not retention.is_read_only and not retention.is_sensitive
    assert configs["cleanup.policy"].value == "compact"
    segment = configs["segment.bytes"]  # from log.segment.bytes in server.properties
    assert (segment.value, segment.source) == (STATIC_SEGMENT_BYTES,
                                               ConfigSource.STATIC_BROKER_CONFIG.value)
    index = configs["segment.index.bytes"]
    assert (index.value, index.source) == ("10485760", ConfigSource.DEFAULT_CONFIG.value)
    assert {"compression.type", "min.insync.replicas", "max.message.bytes",
            "message.timestamp.after.max.ms", "compression.zstd.level"} <= set(configs)

    # Synonyms: the override, then the broker settings that supply the default.
    result = describe_raw(broker, TOPIC, "described", ["retention.ms", "segment.bytes"],
                          include_synonyms=True, include_documentation=True)
    assert result.error_code == 0
    by_name = {c.name: c for c in result.configs}
    assert set(by_name) == {"retention.ms", "segment.bytes"}  # the names asked for
    assert [(s.name, s.value, s.source) for s in by_name["retention.ms"].synonyms] == [
        ("retention.ms", "3600000", 1), ("log.retention.hours", "168", 5)]
    assert [(s.name, s.value, s.source) for s in by_name["segment.bytes"].synonyms] == [
        ("log.segment.bytes", STATIC_SEGMENT_BYTES, 4), ("log.segment.bytes", "1073741824", 5)]
    assert by_name["retention.ms"].config_type == 5  # LONG
    assert by_name["segment.bytes"].config_type == 3  # INT
    assert "older than this" in by_name["retention.ms"].documentation
    plain = describe_raw(broker, TOPIC, "described", ["retention.ms"])
    assert plain.configs[0].synonyms == [] and plain.configs[0].documentation is None
    v1 = describe_raw(broker, TOPIC, "described", ["retention.ms"], version=1)
    assert v1.configs[0].value == "3600000" and v1.configs[0].config_source == 1

    # kafka-python, including synonyms
    kp = kp_admin.describe_configs([KpConfigResource(KpResourceType.TOPIC, "described")],
                                   include_synonyms=True, config_filter="all")
    entry = kp["topic"]["described"]["retention.ms"]
    assert (entry["value"], entry["config_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")

    assert error_code(admin.describe_configs([ConfigResource(ResourceType.TOPIC, "nope")])[
        ConfigResource(ResourceType.TOPIC, "nope")]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # CreateTopics v5+ lists the new topic's configs as DescribeConfigs does.
    m = create_topics_request
    request = m.CreateTopicsRequest(timeout_ms=30_000, validate_only=True, topics=[
        m.CreatableTopic(name="described-too", num_partitions=1, replication_factor=1,
                         configs=[m.CreatableTopicConfig(name="retention.ms", value="3600000"),
                                  m.CreatableTopicConfig(name="cleanup.policy",
                                                         value="compact")])])
    (created,) = call(broker, request, 7).topics
    assert created.error_code == 0
    listed = {c.name: (c.value, c.config_source, c.read_only) for c in created.configs}
    assert listed == {name: (c.value, c.source, c.is_read_only) for name, c in configs.items()}
    assert describe_raw(broker, TOPIC, "bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_describe_broker_configs(broker: BrokerProcess, admin: AdminClient) -> None:
    configs = describe(admin, ResourceType.BROKER, "1")
    assert configs["log.segment.bytes"].value == STATIC_SEGMENT_BYTES
    assert configs["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].is_read_only
    assert not configs["log.retention.ms"].is_read_only
    assert configs["log.retention.ms"].value == str(168 * 3600_000)
    # The cluster-default resource lists the dynamic defaults alone: none yet.
    assert describe_raw(broker, BROKER, "").configs == []
    for name in ("2", "one"):
        result = describe_raw(broker, BROKER, name)
        assert result.error_code == ErrorCode.INVALID_REQUEST, name
        assert result.error_message
    assert describe_raw(broker, 8, "1").error_code == ErrorCode.INVALID_REQUEST  # BROKER_LOGGER


# ---- AlterConfigs and IncrementalAlterConfigs on topics --------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_a_topics_overrides(broker: BrokerProcess,
                                                   admin: AdminClient) -> None:
    create(admin, "legacy", 1, **{"retention.ms": "1000", "flush.messages": "10"})

    def alter(configs: dict[str, str], validate_only: bool = False) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, "legacy", set_config=configs)
        return admin.alter_configs([resource], validate_only=validate_only)[resource]

    alter({"retention.ms": "5000"}, validate_only=True).result(30)
    assert describe(admin, ResourceType.TOPIC, "legacy")["retention.ms"].value == "1000"
    alter({"retention.ms": "5000"}).result(30)
    configs = describe(admin, ResourceType.TOPIC, "legacy")
    assert configs["retention.ms"].value == "5000"
    assert configs["flush.messages"].source == ConfigSource.DEFAULT_CONFIG.value  # replaced

    assert error_code(alter({"retention.ms": "soon"})) == ErrorCode.INVALID_CONFIG
    assert error_code(alter({"no.such.config": "1"})) == ErrorCode.INVALID_CONFIG
    [(code, message)] = alter_raw(broker, [(TOPIC, "legacy", {"segment.ms": "0"})])
    assert (code, message) == (ErrorCode.INVALID_CONFIG, "segment.ms=0 is invalid: must be >= 1")
    assert alter_raw(broker, [(TOPIC, "nope", {"retention.ms": "1"})])[0][0] == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert alter_raw(broker, [(TOPIC, "legacy", {"retention.ms": None})])[0][0] == (
        ErrorCode.INVALID_REQUEST)
    # A resource named twice is refused, each time; the others go ahead.
    results = alter_raw(broker, [(TOPIC, "legacy", {"retention.ms": "1"}),
                                 (TOPIC, "legacy", {"retention.ms": "2"})])
    assert results == [(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
    assert describe(admin, ResourceType.TOPIC, "legacy")["retention.ms"].value == "5000"


def test_incremental_alter_topic_configs(broker: BrokerProcess, admin: AdminClient,
                                        kp_admin: KafkaAdminClient) -> None:
    create(admin, "incremental", 1, **{"retention.ms": "1000"})

    def alter(*entries: ConfigEntry, validate_only: bool = False) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, "incremental",
                                  incremental_configs=list(entries))
        return admin.incremental_alter_configs([resource],
                                               validate_only=validate_only)[resource]

    def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
        return ConfigEntry(name, value, incremental_operation=kind)

    def values() -> dict[str, tuple[str, int]]:
        configs = describe(admin, ResourceType.TOPIC, "incremental")
        return {k: (c.value, c.source) for k, c in configs.items()}

    alter(op("retention.bytes", "5000", AlterConfigOpType.SET), validate_only=True).result(30)
    assert values()["retention.bytes"] == ("-1", ConfigSource.DEFAULT_CONFIG.value)
    alter(op("retention.bytes", "5000", AlterConfigOpType.SET),
          op("retention.ms", None, AlterConfigOpType.DELETE)).result(30)
    now = values()
    assert now["retention.bytes"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert now["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value)

    # APPEND and SUBTRACT work on list configs, from the default when the topic has none.
    alter(op("cleanup.policy", "compact", AlterConfigOpType.APPEND)).result(30)
    assert values()["cleanup.policy"][0] == "compact,delete"
    alter(op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)).result(30)
    assert values()["cleanup.policy"] == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert error_code(alter(op("retention.ms", "5", AlterConfigOpType.APPEND))) == (
        ErrorCode.INVALID_CONFIG)
    assert error_code(alter(op("retention.ms", "-7", AlterConfigOpType.SET))) == (
        ErrorCode.INVALID_CONFIG)

    # kafka-python: (op, value) pairs
    kp_admin.alter_configs([KpConfigResource(KpResourceType.TOPIC, "incremental", configs={
        "cleanup.policy": ("DELETE", None), "min.insync.replicas": ("SET", "1")})],
        incremental=True)
    assert values()["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    assert values()["min.insync.replicas"] == ("1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    # What clients cannot send: a config named twice, a null SET, an unknown operation.
    assert incremental_raw(broker, [(TOPIC, "incremental", [
        ("retention.ms", SET, "1"), ("retention.ms", SET, "2")])]) == [
        (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")]
    assert incremental_raw(broker, [(TOPIC, "incremental", [("retention.ms", SET, None)])]) == [
        (ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms")]
    assert incremental_raw(broker, [(TOPIC, "incremental", [("retention.ms", 9, "1")])])[0][0] == (
        ErrorCode.INVALID_REQUEST)
    assert incremental_raw(broker, [(TOPIC, "nope", [("retention.ms", SET, "1")])])[0][0] == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert incremental_raw(broker, [(TOPIC, "incremental", [("nope", SET, "1")])])[0][0] == (
        ErrorCode.INVALID_CONFIG)


def test_kafka_only_topic_configs_accepted(broker: BrokerProcess, admin: AdminClient,
                                          kp_admin: KafkaAdminClient) -> None:
    """Kafka 4.0's topic configs that have no effect here: replication throttles (as
    kafka-reassign-partitions.sh sets them), tiered storage switches, down-conversion."""
    create(admin, "throttled", 2, **{"remote.storage.enable": "false",
                                     "message.downconversion.enable": "false"})
    configs = describe(admin, ResourceType.TOPIC, "throttled")
    for name, value in [("leader.replication.throttled.replicas", ""),
                        ("follower.replication.throttled.replicas", ""),
                        ("remote.log.copy.disable", "false"),
                        ("remote.log.delete.on.disable", "false")]:
        assert (configs[name].value, configs[name].source) == (
            value, ConfigSource.DEFAULT_CONFIG.value), name
    for name, value in [("remote.storage.enable", "false"),
                        ("message.downconversion.enable", "false")]:
        assert (configs[name].value, configs[name].source) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), name

    throttles = [ConfigEntry("leader.replication.throttled.replicas", "0:1,1:1",
                             incremental_operation=AlterConfigOpType.SET),
                 ConfigEntry("follower.replication.throttled.replicas", "*",
                             incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.TOPIC, "throttled", incremental_configs=throttles)
    admin.incremental_alter_configs([resource])[resource].result(30)
    result = describe_raw(broker, TOPIC, "throttled", ["leader.replication.throttled.replicas"],
                          include_synonyms=True, include_documentation=True)
    (entry,) = result.configs
    assert (entry.value, entry.config_source, entry.config_type) == ("0:1,1:1", 1, 7)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("leader.replication.throttled.replicas", "0:1,1:1", 1)]
    assert "no effect" in entry.documentation
    kp = kp_admin.describe_configs([KpConfigResource(KpResourceType.TOPIC, "throttled")],
                                   config_filter="all")
    assert kp["topic"]["throttled"]["follower.replication.throttled.replicas"]["value"] == "*"

    assert incremental_raw(broker, [(TOPIC, "throttled", [
        ("leader.replication.throttled.replicas", SET, "0:1:2")])])[0][0] == (
        ErrorCode.INVALID_CONFIG)
    assert incremental_raw(broker, [(TOPIC, "throttled", [
        ("remote.storage.enable", SET, "true")])]) == [(
            ErrorCode.INVALID_CONFIG, "remote.storage.enable=true is invalid: tiered storage "
            "is not supported (Odradek has no remote log storage), so it must be false")]
    futures = admin.create_topics([NewTopic("tiered", 1, 1,
                                            config={"remote.storage.enable": "true"})])
    assert error_code(futures["tiered"]) == ErrorCode.INVALID_CONFIG
    assert "tiered" not in admin.list_topics(timeout=30).topics


def test_topic_config_change_is_live(broker: BrokerProcess, admin: AdminClient) -> None:
    create(admin, "live")
    produce(broker, "live", 1, size=2000)
    resource = ConfigResource(ResourceType.TOPIC, "live", incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    with pytest.raises(AssertionError, match="MSG_SIZE_TOO_LARGE"):
        produce(broker, "live", 1, size=2000)


# ---- dynamic broker configs ------------------------------------------------------------------


def test_broker_config_errors(broker: BrokerProcess, admin: AdminClient) -> None:
    def alter(name: str, key: str, value: str) -> tuple[int, str | None]:
        return incremental_raw(broker, [(BROKER, name, [(key, SET, value)])])[0]

    code, message = alter("1", "num.partitions", "3")  # not dynamic
    assert code == ErrorCode.INVALID_REQUEST
    assert message == "Cannot update these configs dynamically: {num.partitions}"
    assert alter("", "log.retention.ms", "soon")[0] == ErrorCode.INVALID_REQUEST
    assert alter("1", "no.such.config", "1")[0] == ErrorCode.INVALID_REQUEST
    assert alter("2", "log.retention.ms", "1000") == (
        ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")
    assert incremental_raw(broker, [(BROKER, "1", [("log.retention.ms", APPEND, "5")])])[0][0] == (
        ErrorCode.INVALID_CONFIG)
    assert alter_raw(broker, [(BROKER, "1", {"log.flush.interval.ms": None})])[0][0] == (
        ErrorCode.INVALID_REQUEST)
    # validate_only: checked, not applied
    assert incremental_raw(broker, [(BROKER, "", [("log.retention.ms", SET, "1234")])],
                           validate_only=True) == [(0, None)]
    assert describe_raw(broker, BROKER, "").configs == []
    entry = describe(admin, ResourceType.BROKER, "1")["log.retention.ms"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value


def test_per_broker_config_over_cluster_default(broker: BrokerProcess,
                                               admin: AdminClient) -> None:
    create(admin, "layers")
    assert incremental_raw(broker, [(BROKER, "", [("log.retention.bytes", SET, "7000000")])]) == [
        (0, None)]
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "log.retention.bytes", "8000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    entry = describe(admin, ResourceType.TOPIC, "layers")["retention.bytes"]
    assert (entry.value, entry.source) == ("8000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    result = describe_raw(broker, TOPIC, "layers", ["retention.bytes"], include_synonyms=True)
    assert [(s.name, s.value, s.source) for s in result.configs[0].synonyms] == [
        ("log.retention.bytes", "8000000", 2), ("log.retention.bytes", "7000000", 3),
        ("log.retention.bytes", "-1", 5)]
    (default,) = describe_raw(broker, BROKER, "", include_synonyms=True).configs
    assert (default.name, default.value, default.config_source) == (
        "log.retention.bytes", "7000000", 3)
    assert [(s.name, s.value, s.source) for s in default.synonyms] == [
        ("log.retention.bytes", "7000000", 3)]
    # Removing both restores the default.
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "log.retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert alter_raw(broker, [(BROKER, "", {})]) == [(0, None)]  # legacy: replace with none
    entry = describe(admin, ResourceType.TOPIC, "layers")["retention.bytes"]
    assert (entry.value, entry.source) == ("-1", ConfigSource.DEFAULT_CONFIG.value)


# ---- DeleteRecords ---------------------------------------------------------------------------


def test_delete_records(broker: BrokerProcess, admin: AdminClient,
                        kp_admin: KafkaAdminClient) -> None:
    create(admin, "trim", 2)
    produce(broker, "trim", 10)
    produce(broker, "trim", 4, partition=1)
    (future,) = admin.delete_records([TopicPartition("trim", 0, 5)]).values()
    assert future.result(30).low_watermark == 5
    earliest = admin.list_offsets({TopicPartition("trim", 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(30).offset == 5

    # A fetch below the log start offset is out of range; a consumer resets to it.
    m = fetch_request
    request = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                             topics=[m.FetchTopic(topic="trim", partitions=[m.FetchPartition(
                                 partition=0, fetch_offset=2, partition_max_bytes=1 << 20)])])
    data = call(broker, request, 12).responses[0].partitions[0]
    assert (data.error_code, data.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 5)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("trim", 0, 1)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert message.offset() == 5
    finally:
        consumer.close()

    # kafka-python; -1 is the high watermark
    result = kp_admin.delete_records({KpTopicPartition("trim", 0): -1,
                                      KpTopicPartition("trim", 1): 2})
    assert result[KpTopicPartition("trim", 0)]["low_watermark"] == 10
    assert result[KpTopicPartition("trim", 1)]["low_watermark"] == 2

    def delete(topic: str, partition: int, offset: int) -> tuple[int, int]:
        m = delete_records_request
        request = m.DeleteRecordsRequest(timeout_ms=30_000, topics=[m.DeleteRecordsTopic(
            name=topic, partitions=[m.DeleteRecordsPartition(partition_index=partition,
                                                             offset=offset)])])
        p = call(broker, request, 2).topics[0].partitions[0]
        return p.error_code, p.low_watermark

    assert delete("trim", 1, 5) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)  # beyond the end
    assert delete("trim", 1, 1) == (0, 2)  # never backwards
    assert delete("trim", 7, 0) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert delete("nope", 0, 0) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    create(admin, "compacted", 1, **{"cleanup.policy": "compact"})
    assert delete("compacted", 0, 0) == (ErrorCode.POLICY_VIOLATION, -1)
    bad = admin.delete_records([TopicPartition("trim", 1, 100)])
    assert error_code(next(iter(bad.values()))) == ErrorCode.OFFSET_OUT_OF_RANGE


# ---- DescribeLogDirs -------------------------------------------------------------------------


def test_describe_log_dirs(broker: BrokerProcess, admin: AdminClient,
                           kp_admin: KafkaAdminClient) -> None:
    create(admin, "sized", 2)

    def sizes() -> dict[tuple[str, int], tuple[int, int]]:
        m = describe_log_dirs_request
        request = m.DescribeLogDirsRequest(topics=[m.DescribableLogDirTopic(
            topic="sized", partitions=[0, 1, 9])])
        response = call(broker, request, 4)
        (result,) = response.results
        assert result.error_code == 0
        assert result.log_dir == str(broker.data_dir.absolute())
        assert 0 < result.usable_bytes <= result.total_bytes
        assert [t.name for t in result.topics] == ["sized"]  # only what was asked for
        return {("sized", p.partition_index): (p.partition_size, p.offset_lag)
                for t in result.topics for p in t.partitions}

    before = sizes()
    assert set(before) == {("sized", 0), ("sized", 1)}  # partition 9 does not exist
    produce(broker, "sized", 20, size=1000)
    after = sizes()
    assert after[("sized", 0)][0] >= before[("sized", 0)][0] + 20_000
    assert after[("sized", 1)] == before[("sized", 1)]
    assert after[("sized", 0)][1] == 0  # a leader has no lag

    # kafka-python, every partition
    (entry,) = kp_admin.describe_log_dirs()
    assert "sized" in repr(entry)


# ---- the cluster, through the other admin calls ----------------------------------------------


def test_cluster_and_topics_are_described(admin: AdminClient) -> None:
    create(admin, "listed", 3)
    cluster = admin.describe_cluster().result(30)
    assert [n.id for n in cluster.nodes] == [1]
    assert len(admin.list_topics(timeout=30).topics["listed"].partitions) == 3


# ---- a restart keeps dynamic configs and deleted records -------------------------------------


def test_dynamic_broker_config_is_live_and_survives_a_restart(
        broker: BrokerProcess, admin: AdminClient, kp_admin: KafkaAdminClient) -> None:
    create(admin, "plain")
    create(admin, "own", 1, **{"retention.ms": "1000"})
    produce(broker, "plain", 10, size=3000)
    # Cluster-wide: neither client can name the "" resource.
    assert incremental_raw(broker, [(BROKER, "", [("log.retention.ms", SET, "3600000"),
                                                  ("message.max.bytes", SET, "2000")])]) == [
        (0, None)]

    def check() -> None:
        plain = describe(admin, ResourceType.TOPIC, "plain")
        assert (plain["retention.ms"].value, plain["retention.ms"].source) == (
            "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert plain["max.message.bytes"].value == "2000"
        own = describe(admin, ResourceType.TOPIC, "own")["retention.ms"]
        assert (own.value, own.source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        broker_entry = describe(admin, ResourceType.BROKER, "1")["log.retention.ms"]
        assert (broker_entry.value, broker_entry.source) == (
            "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        # live: the log of a topic without its own max.message.bytes takes the new default
        with pytest.raises(AssertionError, match="MSG_SIZE_TOO_LARGE"):
            produce(broker, "plain", 1, size=3000)

    check()
    (future,) = admin.delete_records([TopicPartition("plain", 0, 7)]).values()
    future.result(30)
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    check()
    earliest = admin.list_offsets({TopicPartition("plain", 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(30).offset == 7
    assert "dynamic broker configs (cluster-wide)" in broker.log_text()

    # Deleting the defaults brings back server.properties and Kafka's defaults.
    assert incremental_raw(broker, [(BROKER, "", [("log.retention.ms", DELETE, None),
                                                  ("message.max.bytes", DELETE, None)])]) == [
        (0, None)]
    plain = describe(admin, ResourceType.TOPIC, "plain")["retention.ms"]
    assert (plain.value, plain.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    produce(broker, "plain", 1, size=3000)
