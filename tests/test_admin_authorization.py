"""The admin handlers under an ACL authorizer, as Kafka 3.9's KafkaApis authorizes them
(ZooKeeper mode): AdminManager (CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
DescribeLogDirs, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments) and
ConfigManager (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs).

Each handler runs over real logs and the embedded store (the group tests' GroupHarness),
with a real AclAuthorizer fed ACLs as a store feeds it. For each API: allowed with the ACL,
refused without it, a DENY beating an ALLOW, Kafka's error codes, nothing done when
refused; and with no authorizer (ALLOW_ALL) the same answers as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.groups import GroupHarness

from odradek.broker.admin import AdminManager
from odradek.broker.auth_helper import ALLOW_ALL, AuthHelper
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_request, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_configs_request,
    alter_partition_reassignments_request,
    create_partitions_request,
    create_topics_request,
    delete_records_request,
    delete_topics_request,
    describe_configs_request,
    describe_log_dirs_request,
    elect_leaders_request,
    incremental_alter_configs_request,
    list_partition_reassignments_request,
)
from odradek.protocol.primitives import ZERO_UUID
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclChanges,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.authorizer import AclAuthorizer
from odradek.security.principal import KafkaPrincipal
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext

Op, Rt = AclOperation, ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = KafkaPrincipal.user("alice")
HOST = "192.168.0.1"
TOPIC_CONFIG, BROKER_CONFIG, BROKER_LOGGER = 2, 4, 8  # ConfigResource types
SET, DELETE_OP = 0, 1  # IncrementalAlterConfigs' operations
OK = ErrorCode.NONE
TAF, CAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class Recorder:
    """A ZooKeeper cluster's KafkaController as the admin handlers see it: records what it
    is asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def elect_leaders(self, wanted: Any, *, unclean: bool) -> dict[Any, Any]:
        self.calls.append(("elect", wanted))
        return {tp: (ErrorCode.NONE, None) for tp in wanted or []}

    async def alter_partition_reassignments(self, targets: Any) -> dict[Any, Any]:
        self.calls.append(("alter", targets))
        return {tp: (ErrorCode.NONE, None) for tp in targets}

    def list_partition_reassignments(self, wanted: Any) -> dict[Any, Any]:
        self.calls.append(("list", wanted))
        return {}


class Admin:
    """An AdminManager over a broker's logs, with an authorizer (or none: ALLOW_ALL)."""

    def __init__(self, directory: Path, config: BrokerConfig | None = None, *,
                 authorizer: bool = True) -> None:
        self.h = GroupHarness(directory, create_topic=False)
        self.admin = AdminManager(config or BrokerConfig.default(), self.h.controller,
                                  self.h.replica_manager)
        self.authorizer = AclAuthorizer()
        if authorizer:
            self.admin.auth = AuthHelper(self.authorizer)
        self.acls: dict[ResourcePattern, set[AccessControlEntry]] = {}

    @property
    def topics(self) -> dict[str, Any]:
        return self.h.controller.topics

    def acl(self, resource_type: ResourceType, name: str, *operations: AclOperation,
            permission: AclPermissionType = ALLOW, principal: str = str(ALICE),
            pattern_type: PatternType = PatternType.LITERAL) -> None:
        """Adds ACLs as a store tells the authorizer of them: the resource's whole set."""
        pattern = ResourcePattern(resource_type, name, pattern_type)
        entries = self.acls.setdefault(pattern, set())
        entries.update(AccessControlEntry(principal, "*", op, permission) for op in operations)
        self.authorizer.apply(AclChanges({pattern: frozenset(entries)}))

    def create(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None
               ) -> None:
        asyncio.run(self.h.controller.create_topic(name, partitions, 1, configs or {}))

    def produce(self, topic: str, count: int) -> None:
        batch = build_record_batch([SimpleRecord(b"k", b"v", timestamp=1)] * count)
        (result,) = self.h.replica_manager.append_records(
            1, {(topic, 0): bytearray(batch)}).values()
        assert result.error_code == ErrorCode.NONE

    def log_start(self, topic: str) -> int:
        partition = self.h.replica_manager.get_partition((topic, 0))
        assert partition is not None
        return int(partition.log.log_start_offset)

    def call(self, body: Message, version: int, principal: KafkaPrincipal = ALICE) -> Any:
        """The handler's answer to `body` in `version`, request and response each through
        their encoding, as `principal` from HOST."""
        request = decode_request(encode_request(body, version, correlation_id=7,
                                                client_id="admin")[4:])
        context = RequestContext(1, HOST, 5555, "PLAINTEXT", request.header, principal)
        handler = self.admin.handlers()[request.header.request_api_key]
        result = handler(request, context)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return type(result).decode(result.encode(version), version)

    def close(self) -> None:
        self.h.close()


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    a = Admin(tmp_path)
    yield a
    a.close()


@pytest.fixture
def open_admin(tmp_path: Path) -> Iterator[Admin]:
    a = Admin(tmp_path, authorizer=False)
    yield a
    a.close()


def test_the_authorizer_is_set_on_both_managers(open_admin: Admin) -> None:
    admin = open_admin.admin
    assert admin.auth is ALLOW_ALL and admin.configs.auth is ALLOW_ALL
    auth = AuthHelper(AclAuthorizer())
    admin.auth = auth
    assert admin.auth is auth and admin.configs.auth is auth


# ---- CreateTopics --------------------------------------------------------------------------


def creatable(name: str, partitions: int = 2, **configs: str
              ) -> create_topics_request.CreatableTopic:
    return create_topics_request.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[create_topics_request.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                 for k, v in configs.items()])


def create_topics(admin: Admin, *topics: create_topics_request.CreatableTopic,
                  version: int = 7, validate_only: bool = False) -> list[Any]:
    body = create_topics_request.CreateTopicsRequest(topics=list(topics), timeout_ms=5000,
                                                     validate_only=validate_only)
    return list(admin.call(body, version).topics)


def test_create_topics_refused_without_create(admin: Admin) -> None:
    (r,) = create_topics(admin, creatable("orders", retention_ms="1000"))
    assert (r.name, r.error_code, r.error_message) == ("orders", TAF, "Authorization failed.")
    assert (r.num_partitions, r.replication_factor, r.topic_id) == (-1, -1, ZERO_UUID)
    assert r.topic_config_error_code == TAF and not r.configs
    assert "orders" not in admin.topics
    (r,) = create_topics(admin, creatable("orders"), validate_only=True)
    assert r.error_code == TAF
    # Without it, an existing topic is not even told to exist.
    admin.create("taken")
    (r,) = create_topics(admin, creatable("taken"))
    assert r.error_code == TAF


def test_create_topics_with_create_on_the_topic_or_the_cluster(admin: Admin) -> None:
    admin.acl(Rt.TOPIC, "orders", Op.CREATE, Op.DESCRIBE_CONFIGS)
    admin.acl(Rt.TOPIC, "pay", Op.CREATE, pattern_type=PatternType.PREFIXED)
    results = create_topics(admin, creatable("orders", retention_ms="1000"),
                            creatable("payments"), creatable("other"))
    assert [(r.name, r.error_code) for r in results] == [
        ("orders", OK), ("payments", OK), ("other", TAF)]
    assert set(admin.topics) == {"orders", "payments"}
    orders, payments, _ = results
    # DESCRIBE_CONFIGS: what the topic is like is told.
    assert orders.topic_config_error_code == OK
    assert (orders.num_partitions, orders.replication_factor) == (2, 1)
    assert orders.topic_id == admin.topics["orders"].topic_id != ZERO_UUID
    assert {c.name: c.value for c in orders.configs}["retention.ms"] == "1000"
    # Without it the topic is made, and nothing of it is told (Kafka's v5+ answer).
    assert payments.topic_config_error_code == TAF
    assert (payments.num_partitions, payments.replication_factor) == (-1, -1)
    assert payments.topic_id == ZERO_UUID and payments.configs == []

    # CREATE on the cluster allows every topic; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.CREATE)
    admin.acl(Rt.TOPIC, "*", Op.ALTER_CONFIGS)
    (r,) = create_topics(admin, creatable("other", partitions=3))
    assert (r.error_code, r.topic_config_error_code, r.num_partitions) == (OK, OK, 3)
    assert len(admin.topics["other"].partitions) == 3

    # Before v5 there is no topic_config_error_code to say it in.
    admin.acl(Rt.TOPIC, "old", Op.DESCRIBE_CONFIGS, permission=DENY,
              pattern_type=PatternType.PREFIXED)
    for v in (2, 4):
        (r,) = create_topics(admin, creatable(f"old{v}"), version=v)
        assert (r.error_code, r.topic_config_error_code) == (OK, OK)
        (r,) = create_topics(admin, creatable(f"old{v}"), version=v)
        assert r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_topics_deny_beats_allow(admin: Admin) -> None:
    admin.acl(Rt.TOPIC, "*", Op.CREATE, Op.DESCRIBE_CONFIGS)
    admin.acl(Rt.TOPIC, "secret", Op.CREATE, permission=DENY)
    admin.acl(Rt.TOPIC, "hidden", Op.DESCRIBE_CONFIGS, permission=DENY)
    results = create_topics(admin, creatable("public"), creatable("secret"),
                            creatable("hidden"))
    assert [(r.name, r.error_code, r.topic_config_error_code) for r in results] == [
        ("public", OK, OK), ("secret", TAF, OK), ("hidden", OK, TAF)]
    assert set(admin.topics) == {"public", "hidden"}
    # A DENY of CREATE on the cluster leaves the topics' own ACLs to decide.
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.CREATE, permission=DENY)
    (r,) = create_topics(admin, creatable("another"))
    assert r.error_code == OK
    # ALL denied to everyone on a prefix beats alice's ALLOW on "*".
    admin.acl(Rt.TOPIC, "tmp-", Op.ALL, permission=DENY, principal="User:*",
              pattern_type=PatternType.PREFIXED)
    (r,) = create_topics(admin, creatable("tmp-1"))
    assert r.error_code == TAF and "tmp-1" not in admin.topics


def test_create_topics_checks_in_kafkas_order(admin: Admin) -> None:
    # A name given twice, and __cluster_metadata, are refused before authorization.
    results = create_topics(admin, creatable("twice"), creatable("twice"),
                            creatable("__cluster_metadata"), creatable("denied"))
    assert [(r.name, r.error_code, r.topic_config_error_code) for r in results] == [
        ("twice", ErrorCode.INVALID_REQUEST, TAF), ("twice", ErrorCode.INVALID_REQUEST, TAF),
        ("__cluster_metadata", ErrorCode.INVALID_REQUEST, OK), ("denied", TAF, TAF)]
    assert results[2].error_message == (
        "Creation of internal topic __cluster_metadata is prohibited.")
    assert admin.topics == {}
    # A creation that fails once authorized says so, and no topic_config_error_code.
    admin.acl(Rt.TOPIC, "bad", Op.CREATE)
    (r,) = create_topics(admin, creatable("bad", segment_ms="0"))
    assert (r.error_code, r.topic_config_error_code) == (ErrorCode.INVALID_CONFIG, OK)
    assert "bad" not in admin.topics


def test_create_topics_without_an_authorizer(open_admin: Admin) -> None:
    results = create_topics(open_admin, creatable("a", retention_ms="1000"), creatable("b"),
                            creatable("b"))
    assert [(r.name, r.error_code, r.topic_config_error_code) for r in results] == [
        ("a", OK, OK), ("b", ErrorCode.INVALID_REQUEST, OK), ("b", ErrorCode.INVALID_REQUEST, OK)]
    a = results[0]
    assert (a.num_partitions, a.replication_factor) == (2, 1)
    assert a.topic_id == open_admin.topics["a"].topic_id
    assert {c.name: c.value for c in a.configs}["retention.ms"] == "1000"
    assert results[1].configs is None and results[1].num_partitions == -1
    assert set(open_admin.topics) == {"a"}


# ---- DeleteTopics --------------------------------------------------------------------------


def delete_by_name(admin: Admin, *names: str, version: int = 5) -> list[tuple[Any, ...]]:
    body = delete_topics_request.DeleteTopicsRequest(topic_names=list(names), timeout_ms=5000)
    return [(r.name, r.error_code) for r in admin.call(body, version).responses]


def delete_by_id(admin: Admin, *ids: Any) -> list[tuple[Any, ...]]:
    body = delete_topics_request.DeleteTopicsRequest(timeout_ms=5000, topics=[
        delete_topics_request.DeleteTopicState(name=None, topic_id=i) for i in ids])
    return [(r.name, r.topic_id, r.error_code) for r in admin.call(body, 6).responses]


def test_delete_topics_by_name(admin: Admin) -> None:
    admin.create("a")
    admin.create("b")
    # Without DELETE: refused, whether the topic exists or not.
    assert delete_by_name(admin, "a", "nope") == [("a", TAF), ("nope", TAF)]
    assert set(admin.topics) == {"a", "b"}
    # DESCRIBE is not enough.
    admin.acl(Rt.TOPIC, "a", Op.DESCRIBE)
    assert delete_by_name(admin, "a") == [("a", TAF)]
    admin.acl(Rt.TOPIC, "*", Op.DELETE)
    admin.acl(Rt.TOPIC, "b", Op.DELETE, permission=DENY)
    assert delete_by_name(admin, "a", "b", "nope") == [
        ("a", OK), ("b", TAF), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert set(admin.topics) == {"b"}
    assert delete_by_name(admin, "b", version=1) == [("b", TAF)]


def test_delete_topics_by_id(admin: Admin) -> None:
    for name in ("a", "b", "c"):
        admin.create(name)
    ids = {name: t.topic_id for name, t in admin.topics.items()}
    unknown = type(ids["a"])(int=12345)
    # Without DESCRIBE the name is not told; an unknown id is no secret.
    assert delete_by_id(admin, ids["a"], unknown) == [
        (None, ids["a"], TAF), (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID)]
    # DESCRIBE without DELETE: told the name, refused.
    admin.acl(Rt.TOPIC, "a", Op.DESCRIBE)
    assert delete_by_id(admin, ids["a"]) == [("a", ids["a"], TAF)]
    # DELETE implies DESCRIBE; a DENY of DESCRIBE beats it.
    admin.acl(Rt.TOPIC, "*", Op.DELETE)
    admin.acl(Rt.TOPIC, "c", Op.DESCRIBE, permission=DENY)
    assert delete_by_id(admin, ids["a"], ids["b"], ids["c"]) == [
        ("a", ids["a"], OK), ("b", ids["b"], OK), (None, ids["c"], TAF)]
    assert set(admin.topics) == {"c"}


def test_delete_topics_refused_before_authorization(tmp_path: Path) -> None:
    admin = Admin(tmp_path, BrokerConfig.from_properties({"delete.topic.enable": "false"}))
    try:
        admin.create("a")
        admin.acl(Rt.TOPIC, "a", Op.DELETE)
        topic_id = admin.topics["a"].topic_id
        assert delete_by_name(admin, "a", "b") == [
            ("a", ErrorCode.TOPIC_DELETION_DISABLED), ("b", ErrorCode.TOPIC_DELETION_DISABLED)]
        assert delete_by_name(admin, "a", version=2) == [("a", ErrorCode.INVALID_REQUEST)]
        assert delete_by_id(admin, topic_id) == [
            (None, topic_id, ErrorCode.TOPIC_DELETION_DISABLED)]  # the name is not looked up
        assert "a" in admin.topics
    finally:
        admin.close()


def test_delete_topics_name_and_id_together(open_admin: Admin) -> None:
    open_admin.create("a")
    topic_id = open_admin.topics["a"].topic_id
    body = delete_topics_request.DeleteTopicsRequest(timeout_ms=5000, topics=[
        delete_topics_request.DeleteTopicState(name="a", topic_id=topic_id)])
    (r,) = open_admin.call(body, 6).responses
    assert (r.name, r.error_code) == ("a", ErrorCode.INVALID_REQUEST)
    assert "a" in open_admin.topics


def test_delete_topics_without_an_authorizer(open_admin: Admin) -> None:
    for name in ("a", "b"):
        open_admin.create(name)
    b = open_admin.topics["b"].topic_id
    assert delete_by_name(open_admin, "a", "nope") == [
        ("a", OK), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert delete_by_id(open_admin, b) == [("b", b, OK)]
    assert delete_by_name(open_admin, "__consumer_offsets") == [
        ("__consumer_offsets", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    assert open_admin.topics == {}


# ---- CreatePartitions ----------------------------------------------------------------------


def create_partitions(admin: Admin, *counts: tuple[str, int], validate_only: bool = False
                      ) -> list[tuple[Any, ...]]:
    body = create_partitions_request.CreatePartitionsRequest(
        timeout_ms=5000, validate_only=validate_only, topics=[
            create_partitions_request.CreatePartitionsTopic(name=n, count=c, assignments=None)
            for n, c in counts])
    return [(r.name, r.error_code, r.error_message) for r in admin.call(body, 3).results]


def test_create_partitions(admin: Admin) -> None:
    admin.create("a")
    admin.create("b")
    refused = "The topic authorization is failed."
    assert create_partitions(admin, ("a", 3), ("nope", 2)) == [
        ("a", TAF, refused), ("nope", TAF, refused)]
    assert create_partitions(admin, ("a", 3), validate_only=True) == [("a", TAF, refused)]
    assert len(admin.topics["a"].partitions) == 1
    admin.acl(Rt.TOPIC, "*", Op.ALTER)
    admin.acl(Rt.TOPIC, "b", Op.ALTER, permission=DENY)
    assert create_partitions(admin, ("a", 3), ("b", 3), ("nope", 2)) == [
        ("a", OK, None), ("b", TAF, refused),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic 'nope' does not exist")]
    assert (len(admin.topics["a"].partitions), len(admin.topics["b"].partitions)) == (3, 1)
    # A name given twice is refused as such, authorized or not.
    assert create_partitions(admin, ("b", 2), ("b", 2)) == [
        ("b", ErrorCode.INVALID_REQUEST, "Duplicate topic name.")]


def test_create_partitions_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a")
    assert create_partitions(open_admin, ("a", 4)) == [("a", OK, None)]
    assert len(open_admin.topics["a"].partitions) == 4


# ---- DeleteRecords -------------------------------------------------------------------------


def delete_records(admin: Admin, *offsets: tuple[str, int, int]) -> list[tuple[Any, ...]]:
    body = delete_records_request.DeleteRecordsRequest(timeout_ms=5000, topics=[
        delete_records_request.DeleteRecordsTopic(name=t, partitions=[
            delete_records_request.DeleteRecordsPartition(partition_index=p, offset=o)])
        for t, p, o in offsets])
    return [(t.name, p.partition_index, p.error_code, p.low_watermark)
            for t in admin.call(body, 2).topics for p in t.partitions]


def test_delete_records(admin: Admin) -> None:
    for name in ("a", "b"):
        admin.create(name)
        admin.produce(name, 5)
    assert delete_records(admin, ("a", 0, 3), ("nope", 0, 1)) == [
        ("a", 0, TAF, -1), ("nope", 0, TAF, -1)]
    assert admin.log_start("a") == 0
    admin.acl(Rt.TOPIC, "a", Op.DESCRIBE, Op.WRITE, Op.ALTER)  # not DELETE
    assert delete_records(admin, ("a", 0, 3)) == [("a", 0, TAF, -1)]
    admin.acl(Rt.TOPIC, "*", Op.DELETE)
    admin.acl(Rt.TOPIC, "b", Op.DELETE, permission=DENY)
    assert delete_records(admin, ("a", 0, 3), ("b", 0, 3), ("nope", 0, 1)) == [
        ("a", 0, OK, 3), ("b", 0, TAF, -1),
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert (admin.log_start("a"), admin.log_start("b")) == (3, 0)


def test_delete_records_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a")
    open_admin.produce("a", 5)
    assert delete_records(open_admin, ("a", 0, -1)) == [("a", 0, OK, 5)]
    assert open_admin.log_start("a") == 5


# ---- DescribeLogDirs -----------------------------------------------------------------------


def describe_log_dirs(admin: Admin, version: int) -> Any:
    return admin.call(describe_log_dirs_request.DescribeLogDirsRequest(topics=None), version)


def test_describe_log_dirs(admin: Admin) -> None:
    admin.create("a")
    for v in range(1, 5):
        r = describe_log_dirs(admin, v)
        assert r.results == [] and r.error_code == (CAF if v >= 3 else OK), v
    admin.acl(Rt.TOPIC, "*", Op.ALL)  # no help: the cluster's DESCRIBE is needed
    assert describe_log_dirs(admin, 4).error_code == CAF
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER)  # ALTER implies DESCRIBE
    r = describe_log_dirs(admin, 4)
    assert r.error_code == OK and [t.name for t in r.results[0].topics] == ["a"]
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.DESCRIBE, permission=DENY)
    r = describe_log_dirs(admin, 4)
    assert (r.error_code, r.results) == (CAF, [])


def test_describe_log_dirs_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a")
    r = describe_log_dirs(open_admin, 4)
    assert r.error_code == OK and [t.name for t in r.results[0].topics] == ["a"]


# ---- ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments ------------------


def elect(admin: Admin, version: int, partitions: dict[str, list[int]] | None) -> Any:
    body = elect_leaders_request.ElectLeadersRequest(
        election_type=0, timeout_ms=5000,
        topic_partitions=None if partitions is None else [
            elect_leaders_request.TopicPartitions(topic=t, partitions=ps)
            for t, ps in partitions.items()])
    return admin.call(body, version)


def election_results(r: Any) -> list[tuple[Any, ...]]:
    return [(t.topic, p.partition_id, p.error_code)
            for t in r.replica_election_results for p in t.partition_result]


def test_elect_leaders(admin: Admin) -> None:
    admin.create("a", 2)
    controller = admin.admin.kafka_controller = Recorder()  # type: ignore[assignment]
    for v in range(3):
        r = elect(admin, v, {"a": [1, 0], "nope": [0]})
        assert r.error_code == (CAF if v >= 1 else OK)
        assert election_results(r) == [("a", 0, CAF), ("a", 1, CAF), ("nope", 0, CAF)]
        r = elect(admin, v, None)
        assert (r.error_code, r.replica_election_results) == ((CAF if v >= 1 else OK), [])
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)  # not enough
    assert elect(admin, 2, None).error_code == CAF
    assert controller.calls == []
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER)
    r = elect(admin, 2, {"a": [0]})
    assert (r.error_code, election_results(r)) == (OK, [("a", 0, OK)])
    assert controller.calls == [("elect", [("a", 0)])]
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER, permission=DENY)
    assert election_results(elect(admin, 2, {"a": [0]})) == [("a", 0, CAF)]
    assert len(controller.calls) == 1


def reassign(admin: Admin, targets: dict[tuple[str, int], list[int] | None]) -> Any:
    request = alter_partition_reassignments_request
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            request.ReassignablePartition(partition_index=index, replicas=replicas))
    return admin.call(request.AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        request.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()]), 0)


def list_reassignments(admin: Admin, topics: dict[str, list[int]] | None) -> Any:
    request = list_partition_reassignments_request
    return admin.call(request.ListPartitionReassignmentsRequest(
        timeout_ms=5000, topics=None if topics is None else [
            request.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
            for t, ps in topics.items()]), 0)


def test_partition_reassignments(admin: Admin) -> None:
    admin.create("a", 2)
    controller = admin.admin.kafka_controller = Recorder()  # type: ignore[assignment]
    r = reassign(admin, {("a", 0): [1], ("a", 1): None})
    assert r.error_code == CAF
    assert r.error_message == "Request AlterPartitionReassignments v0 is not authorized."
    assert [(t.name, p.partition_index, p.error_code, p.error_message)
            for t in r.responses for p in t.partitions] == [
        ("a", 0, CAF, r.error_message), ("a", 1, CAF, r.error_message)]
    r = list_reassignments(admin, {"a": [0, 1]})
    assert r.error_code == CAF and r.error_message is not None
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions])
            for t in r.topics] == [("a", [(0, []), (1, [])])]
    r = list_reassignments(admin, None)
    assert (r.error_code, r.topics) == (CAF, [])
    # DESCRIBE lists, ALTER reassigns (and implies DESCRIBE).
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)
    assert list_reassignments(admin, None).error_code == OK
    assert reassign(admin, {("a", 0): [1]}).error_code == CAF
    assert controller.calls == [("list", None)]
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER)
    r = reassign(admin, {("a", 0): [1]})
    assert r.error_code == OK and r.responses[0].partitions[0].error_code == OK
    assert controller.calls[-1] == ("alter", {("a", 0): [1]})
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER, Op.DESCRIBE, permission=DENY)
    assert reassign(admin, {("a", 0): [1]}).error_code == CAF
    assert list_reassignments(admin, None).error_code == CAF
    assert len(controller.calls) == 2


def test_elections_and_reassignments_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a", 1)
    r = elect(open_admin, 2, {"a": [0]})
    assert election_results(r) == [("a", 0, ErrorCode.ELECTION_NOT_NEEDED)]
    r = reassign(open_admin, {("a", 0): [1]})
    assert (r.error_code, r.responses[0].partitions[0].error_code) == (OK, OK)
    r = list_reassignments(open_admin, None)
    assert (r.error_code, r.topics) == (OK, [])


# ---- DescribeConfigs -----------------------------------------------------------------------


def describe_configs(admin: Admin, *resources: tuple[int, str], version: int = 4
                     ) -> list[tuple[Any, ...]]:
    body = describe_configs_request.DescribeConfigsRequest(resources=[
        describe_configs_request.DescribeConfigsResource(
            resource_type=t, resource_name=n, configuration_keys=None) for t, n in resources])
    return [(r.resource_type, r.resource_name, r.error_code, r.error_message, len(r.configs))
            for r in admin.call(body, version).results]


def test_describe_configs(admin: Admin) -> None:
    admin.create("a", configs={"retention.ms": "1000"})
    admin.create("b")
    topic_refused, cluster_refused = "Topic authorization failed.", "Cluster authorization failed."
    assert describe_configs(admin, (TOPIC_CONFIG, "a"), (TOPIC_CONFIG, "nope"),
                            (TOPIC_CONFIG, "bad name!"), (BROKER_CONFIG, "1"),
                            (BROKER_LOGGER, "1")) == [
        (TOPIC_CONFIG, "a", TAF, topic_refused, 0),
        (TOPIC_CONFIG, "nope", TAF, topic_refused, 0),
        (TOPIC_CONFIG, "bad name!", TAF, topic_refused, 0),
        (BROKER_CONFIG, "1", CAF, cluster_refused, 0),
        (BROKER_LOGGER, "1", CAF, cluster_refused, 0)]
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS; a DENY beats an ALLOW. As in Kafka, the
    # refused resources come after the others.
    admin.acl(Rt.TOPIC, "*", Op.DESCRIBE_CONFIGS)
    admin.acl(Rt.TOPIC, "b", Op.DESCRIBE_CONFIGS, permission=DENY)
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS)
    results = describe_configs(admin, (TOPIC_CONFIG, "b"), (TOPIC_CONFIG, "a"),
                               (TOPIC_CONFIG, "nope"), (BROKER_CONFIG, "1"),
                               (BROKER_CONFIG, ""))
    assert [r[:4] for r in results] == [
        (TOPIC_CONFIG, "a", OK, None),
        (TOPIC_CONFIG, "nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None),
        (BROKER_CONFIG, "1", OK, None), (BROKER_CONFIG, "", OK, None),
        (TOPIC_CONFIG, "b", TAF, topic_refused)]
    assert results[0][4] > 30 and results[2][4] > 100
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.DESCRIBE_CONFIGS, permission=DENY)
    assert describe_configs(admin, (BROKER_CONFIG, "1"), version=1) == [
        (BROKER_CONFIG, "1", CAF, cluster_refused, 0)]


def test_describe_configs_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a")
    results = describe_configs(open_admin, (TOPIC_CONFIG, "nope"), (TOPIC_CONFIG, "a"),
                               (BROKER_CONFIG, "1"), (BROKER_LOGGER, "1"))
    assert [r[:3] for r in results] == [
        (TOPIC_CONFIG, "nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (TOPIC_CONFIG, "a", OK), (BROKER_CONFIG, "1", OK),
        (BROKER_LOGGER, "1", ErrorCode.INVALID_REQUEST)]


# ---- AlterConfigs, IncrementalAlterConfigs -------------------------------------------------


def alter_configs(admin: Admin, *resources: tuple[int, str, dict[str, str | None]],
                  validate_only: bool = False) -> list[tuple[Any, ...]]:
    request = alter_configs_request
    body = request.AlterConfigsRequest(validate_only=validate_only, resources=[
        request.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            request.AlterableConfig(name=k, value=v) for k, v in configs.items()])
        for t, n, configs in resources])
    return [(r.resource_name, r.error_code, r.error_message)
            for r in admin.call(body, 2).responses]


def incremental(admin: Admin, *resources: tuple[int, str, list[tuple[str, int, str | None]]],
                validate_only: bool = False) -> list[tuple[Any, ...]]:
    request = incremental_alter_configs_request
    body = request.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        request.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            request.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
        for t, n, ops in resources])
    return [(r.resource_name, r.error_code, r.error_message)
            for r in admin.call(body, 1).responses]


def test_alter_configs(admin: Admin) -> None:
    admin.create("a", configs={"retention.ms": "1000"})
    store = admin.admin.configs.store
    changes = [(TOPIC_CONFIG, "a", {"retention.ms": "5"}), (TOPIC_CONFIG, "nope", {}),
               (BROKER_CONFIG, "1", {"log.retention.ms": "7"}),
               (BROKER_CONFIG, "", {"log.retention.ms": "7"})]
    expected = [("a", TAF, None), ("nope", TAF, None), ("1", CAF, None), ("", CAF, None)]
    assert alter_configs(admin, *changes) == expected
    assert alter_configs(admin, *changes, validate_only=True) == expected
    assert admin.topics["a"].configs == {"retention.ms": "1000"}
    assert store.broker_configs() == {} and admin.admin.config.dynamic == {}
    # The request's shape, and a broker change's validation, are checked first.
    assert alter_configs(admin, (TOPIC_CONFIG, "a", {"retention.ms": None}),
                         (BROKER_CONFIG, "1", {"num.partitions": "3"}),
                         (BROKER_CONFIG, "2", {}), (BROKER_LOGGER, "1", {})) == [
        ("a", ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms"),
        ("1", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: {num.partitions}"),
        ("2", ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2"),
        ("1", ErrorCode.INVALID_REQUEST, "Unknown resource type 8")]
    # A topic's values are checked once it is authorized.
    assert alter_configs(admin, (TOPIC_CONFIG, "a", {"segment.ms": "0"}))[0][1] == TAF
    admin.acl(Rt.TOPIC, "*", Op.ALTER_CONFIGS)
    admin.acl(Rt.TOPIC, "b", Op.ALTER_CONFIGS, permission=DENY)
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS)
    admin.create("b")
    assert alter_configs(admin, (TOPIC_CONFIG, "a", {"segment.ms": "0"}))[0][1] == (
        ErrorCode.INVALID_CONFIG)
    assert alter_configs(admin, (TOPIC_CONFIG, "a", {"retention.ms": "5"}),
                         (TOPIC_CONFIG, "b", {"retention.ms": "5"}),
                         (BROKER_CONFIG, "1", {"log.retention.ms": "7"})) == [
        ("a", OK, None), ("b", TAF, None), ("1", OK, None)]
    assert admin.topics["a"].configs == {"retention.ms": "5"}
    assert admin.topics["b"].configs == {}
    assert store.broker_configs() == {"1/log.retention.ms": "7"}
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS, permission=DENY)
    assert alter_configs(admin, (BROKER_CONFIG, "1", {})) == [("1", CAF, None)]
    assert store.broker_configs() == {"1/log.retention.ms": "7"}


def test_incremental_alter_configs(admin: Admin) -> None:
    admin.create("a")
    store = admin.admin.configs.store
    assert incremental(admin, (TOPIC_CONFIG, "a", [("retention.ms", SET, "5")]),
                       (TOPIC_CONFIG, "a2", [("retention.ms", 9, "5")]),  # bad op: after
                       (BROKER_CONFIG, "1", [("log.retention.ms", SET, "7")]),
                       (BROKER_CONFIG, "", [("log.retention.ms", DELETE_OP, None)]),
                       (BROKER_LOGGER, "1", [("kafka", SET, "DEBUG")])) == [
        ("a", TAF, None), ("a2", TAF, None), ("1", CAF, None), ("", CAF, None),
        ("1", CAF, "Cluster authorization failed.")]
    # Checked before authorization: the shape, a broker change's operations and values.
    results = incremental(admin, (TOPIC_CONFIG, "a", [("x", SET, "1"), ("x", SET, "2")]),
                          (BROKER_CONFIG, "1", [("log.retention.ms", 9, "7")]),
                          (BROKER_CONFIG, "", [("log.retention.ms", SET, "nope")]))
    assert results[:2] == [
        ("a", ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"),
        ("1", ErrorCode.INVALID_REQUEST, "Unknown operations type 9")]
    assert results[2][:2] == ("", ErrorCode.INVALID_REQUEST) and "nope" in results[2][2]
    assert admin.topics["a"].configs == {} and store.broker_configs() == {}

    admin.acl(Rt.TOPIC, "a", Op.ALTER_CONFIGS)
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS)
    assert incremental(admin, (TOPIC_CONFIG, "a", [("retention.ms", SET, "5")]),
                       (BROKER_CONFIG, "1", [("log.retention.ms", SET, "7")]),
                       (BROKER_LOGGER, "1", [("kafka", SET, "DEBUG")])) == [
        ("a", OK, None), ("1", OK, None),
        ("1", ErrorCode.INVALID_REQUEST, "Unknown resource type 8")]  # not served here
    assert admin.topics["a"].configs == {"retention.ms": "5"}
    assert store.broker_configs() == {"1/log.retention.ms": "7"}
    assert admin.admin.config.dynamic == {"log.retention.ms": "7"}
    # A DENY beats the ALLOW, validate_only or not.
    admin.acl(Rt.TOPIC, "a", Op.ALTER_CONFIGS, permission=DENY)
    admin.acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS, permission=DENY)
    for validate_only in (True, False):
        assert incremental(admin, (TOPIC_CONFIG, "a", [("retention.ms", DELETE_OP, None)]),
                           (BROKER_CONFIG, "1", [("log.retention.ms", DELETE_OP, None)]),
                           validate_only=validate_only) == [("a", TAF, None), ("1", CAF, None)]
    assert admin.topics["a"].configs == {"retention.ms": "5"}
    assert store.broker_configs() == {"1/log.retention.ms": "7"}


def test_alter_configs_without_an_authorizer(open_admin: Admin) -> None:
    open_admin.create("a")
    assert incremental(open_admin, (TOPIC_CONFIG, "a", [("retention.ms", SET, "5")]),
                       (TOPIC_CONFIG, "b", [("retention.ms", 9, "5")]),
                       (BROKER_CONFIG, "1", [("log.retention.ms", SET, "7")]),
                       (BROKER_LOGGER, "1", [("kafka", SET, "DEBUG")])) == [
        ("a", OK, None), ("b", ErrorCode.INVALID_REQUEST, "Unknown operations type 9"),
        ("1", OK, None), ("1", ErrorCode.INVALID_REQUEST, "Unknown resource type 8")]
    assert alter_configs(open_admin, (TOPIC_CONFIG, "a", {"segment.ms": "100"}),
                         (TOPIC_CONFIG, "nope", {})) == [
        ("a", OK, None),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic 'nope' does not exist")]
    assert open_admin.topics["a"].configs == {"segment.ms": "100"}
    assert open_admin.admin.config.dynamic == {"log.retention.ms": "7"}
