"""The group APIs' handlers at every version they serve: each response encodes in the
request's version (a field a version lacks keeps its default), and carries what that
version can say. Also: ApiVersions and docs/broker.md list what KafkaApis serves."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.groups import DELAY_MS, GroupHarness, subscription

from odradek.broker.admin import AdminManager
from odradek.broker.apis import KafkaApis, supported_range
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.quota_apis import QuotaApis
from odradek.broker.scram_apis import ScramApis
from odradek.coordinator.group.apis import GroupApis
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
)
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    delete_groups_request,
    describe_groups_request,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    list_groups_request,
    offset_commit_request,
    offset_delete_request,
    offset_fetch_request,
    sync_group_request,
    txn_offset_commit_request,
)
from odradek.protocol.messages.request_header import RequestHeader
from odradek.security.credential_cache import CredentialCache
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext

DOCS = Path(__file__).resolve().parents[1] / "docs"


class Client:
    def __init__(self, h: GroupHarness) -> None:
        self.h = h
        self.apis = GroupApis(BrokerConfig.default(), h.coordinator, h.controller,
                              lambda broker_id, context: ("broker.example", 9092))

    def call(self, key: ApiKey, version: int, body: Message) -> Any:
        """Runs the handler, moving the clock for answers that wait; returns the response
        after a round trip through its encoding in `version`."""
        header = RequestHeader(request_api_key=key, request_api_version=version,
                               client_id="tester")
        request = Request(header, API_SPECS[key], body)
        context = RequestContext(1, "127.0.0.1", 5555, "PLAINTEXT", header)
        handler = self.apis.handlers()[key]

        async def run() -> Message:
            result = handler(request, context)
            if not asyncio.iscoroutine(result):
                return result  # type: ignore[no-any-return]
            task = asyncio.ensure_future(result)
            for _ in range(20):
                await asyncio.sleep(0)
                if task.done():
                    break
                self.h.advance(DELAY_MS)
            return await task

        response = asyncio.run(run())
        cls = type(response)
        return cls.decode(response.encode(version), version)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    h = GroupHarness(tmp_path)
    yield Client(h)
    h.close()


def versions(key: ApiKey) -> range:
    low, high = supported_range(key)
    return range(low, high + 1)


def join(client: Client, version: int, group: str, member_id: str = "",
         instance_id: str | None = None) -> Any:
    body = join_group_request.JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
        member_id=member_id, protocol_type="consumer",
        group_instance_id=instance_id if version >= 5 else None,
        protocols=[join_group_request.JoinGroupRequestProtocol(
            name="range", metadata=subscription("events"))])
    response = client.call(ApiKey.JOIN_GROUP, version, body)
    if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        assert version >= 4 and instance_id is None
        body.member_id = response.member_id
        response = client.call(ApiKey.JOIN_GROUP, version, body)
    return response


def test_find_coordinator(client: Client) -> None:
    for v in versions(ApiKey.FIND_COORDINATOR):
        if v >= 4:
            body = find_coordinator_request.FindCoordinatorRequest(
                key_type=0, coordinator_keys=["a", "b"])
            r = client.call(ApiKey.FIND_COORDINATOR, v, body)
            assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in r.coordinators] == [
                ("a", 1, "broker.example", 9092, 0), ("b", 1, "broker.example", 9092, 0)]
            txn = client.call(ApiKey.FIND_COORDINATOR, v, find_coordinator_request.
                              FindCoordinatorRequest(key_type=1, coordinator_keys=["t"]))
            assert txn.coordinators[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            r = client.call(ApiKey.FIND_COORDINATOR, v,
                            find_coordinator_request.FindCoordinatorRequest(key="a"))
            assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, "broker.example", 9092)
            txn = client.call(ApiKey.FIND_COORDINATOR, v,
                              find_coordinator_request.FindCoordinatorRequest(key="t",
                                                                              key_type=1))
            assert (txn.error_code, txn.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)


def test_join_sync_heartbeat_leave_at_every_version(client: Client) -> None:
    for v in versions(ApiKey.JOIN_GROUP):
        group = f"join-v{v}"
        joined = join(client, v, group)
        assert joined.error_code == 0 and joined.generation_id == 1
        assert joined.protocol_name == "range" and joined.leader == joined.member_id
        assert joined.protocol_type == ("consumer" if v >= 7 else None)
        assert [m.member_id for m in joined.members] == [joined.member_id]
        refused = join(client, v, "", "")
        assert refused.error_code == ErrorCode.INVALID_GROUP_ID
        assert refused.protocol_name == (None if v >= 7 else "")
    for v in versions(ApiKey.SYNC_GROUP):
        group = f"sync-v{v}"
        member = join(client, 9, group).member_id
        body = sync_group_request.SyncGroupRequest(
            group_id=group, generation_id=1, member_id=member,
            assignments=[sync_group_request.SyncGroupRequestAssignment(
                member_id=member, assignment=b"mine")])
        if v >= 5:
            body.protocol_type, body.protocol_name = "consumer", "range"
        synced = client.call(ApiKey.SYNC_GROUP, v, body)
        assert (synced.error_code, bytes(synced.assignment)) == (0, b"mine")
        assert synced.protocol_name == ("range" if v >= 5 else None)
    group = "beats"
    member = join(client, 9, group).member_id
    client.call(ApiKey.SYNC_GROUP, 5, sync_group_request.SyncGroupRequest(
        group_id=group, generation_id=1, member_id=member, protocol_type="consumer",
        protocol_name="range"))
    for v in versions(ApiKey.HEARTBEAT):
        beat = client.call(ApiKey.HEARTBEAT, v, heartbeat_request.HeartbeatRequest(
            group_id=group, generation_id=1, member_id=member))
        assert beat.error_code == 0
    for v in versions(ApiKey.LEAVE_GROUP):
        group = f"leave-v{v}"
        member = join(client, 9, group).member_id
        if v >= 3:
            leave = leave_group_request.LeaveGroupRequest(group_id=group, members=[
                leave_group_request.MemberIdentity(member_id=member),
                leave_group_request.MemberIdentity(member_id="ghost")])
            left = client.call(ApiKey.LEAVE_GROUP, v, leave)
            assert left.error_code == 0
            assert [(m.member_id, m.error_code) for m in left.members] == [
                (member, 0), ("ghost", ErrorCode.UNKNOWN_MEMBER_ID)]
        else:
            left = client.call(ApiKey.LEAVE_GROUP, v, leave_group_request.LeaveGroupRequest(
                group_id=group, member_id="ghost"))
            assert left.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # the member's error


def test_offsets_at_every_version(client: Client) -> None:
    for v in versions(ApiKey.OFFSET_COMMIT):
        body = offset_commit_request.OffsetCommitRequest(group_id=f"commit-v{v}", topics=[
            offset_commit_request.OffsetCommitRequestTopic(name="events", partitions=[
                offset_commit_request.OffsetCommitRequestPartition(
                    partition_index=1, committed_offset=10 + v, committed_metadata=None,
                    committed_leader_epoch=3 if v >= 6 else -1),
                offset_commit_request.OffsetCommitRequestPartition(
                    partition_index=99, committed_offset=1)])])
        committed = client.call(ApiKey.OFFSET_COMMIT, v, body)
        assert [p.error_code for p in committed.topics[0].partitions] == [
            0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    for v in versions(ApiKey.OFFSET_FETCH):
        if v >= 8:
            fetch = offset_fetch_request.OffsetFetchRequest(groups=[
                offset_fetch_request.OffsetFetchRequestGroup(group_id="commit-v9", topics=None),
                offset_fetch_request.OffsetFetchRequestGroup(
                    group_id="commit-v8", topics=[offset_fetch_request.OffsetFetchRequestTopics(
                        name="events", partition_indexes=[1, 2])]),
                offset_fetch_request.OffsetFetchRequestGroup(group_id="", topics=[])])
            fetched = client.call(ApiKey.OFFSET_FETCH, v, fetch)
            a, b, empty = fetched.groups
            assert [(t.name, [(p.partition_index, p.committed_offset,
                               p.committed_leader_epoch) for p in t.partitions])
                    for t in a.topics] == [("events", [(1, 19, 3)])]
            assert [(p.partition_index, p.committed_offset) for p in b.topics[0].partitions] == [
                (1, 18), (2, -1)]
            assert empty.error_code == 0 and empty.topics == []
        else:
            topics = None if v >= 2 else [offset_fetch_request.OffsetFetchRequestTopic(
                name="events", partition_indexes=[1])]
            fetched = client.call(ApiKey.OFFSET_FETCH, v, offset_fetch_request.
                                  OffsetFetchRequest(group_id="commit-v7", topics=topics))
            [partition] = fetched.topics[0].partitions
            assert (partition.committed_offset, partition.metadata) == (17, "")
            assert partition.committed_leader_epoch == (3 if v >= 5 else -1)
    for v in versions(ApiKey.OFFSET_DELETE):
        deleted = client.call(ApiKey.OFFSET_DELETE, v, offset_delete_request.OffsetDeleteRequest(
            group_id="commit-v9", topics=[offset_delete_request.OffsetDeleteRequestTopic(
                name="events", partitions=[offset_delete_request.OffsetDeleteRequestPartition(
                    partition_index=1)])]))
        assert deleted.error_code == 0 and deleted.topics[0].partitions[0].error_code == 0
        missing = client.call(ApiKey.OFFSET_DELETE, v, offset_delete_request.
                              OffsetDeleteRequest(group_id="nope"))
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def txn_commit(client: Client, version: int, group: str, offset: int, *, pid: int,
               member_id: str = "", generation: int = -1) -> list[int]:
    body = txn_offset_commit_request.TxnOffsetCommitRequest(
        transactional_id="txn", group_id=group, producer_id=pid, producer_epoch=0,
        topics=[txn_offset_commit_request.TxnOffsetCommitRequestTopic(name="events", partitions=[
            txn_offset_commit_request.TxnOffsetCommitRequestPartition(
                partition_index=1, committed_offset=offset, committed_metadata="meta",
                committed_leader_epoch=4 if version >= 2 else -1),
            txn_offset_commit_request.TxnOffsetCommitRequestPartition(
                partition_index=99, committed_offset=1)])])
    if version >= 3:
        body.member_id, body.generation_id = member_id, generation
    response = client.call(ApiKey.TXN_OFFSET_COMMIT, version, body)
    return [p.error_code for p in response.topics[0].partitions]


def test_txn_offset_commit_at_every_version(client: Client) -> None:
    coordinator = client.h.coordinator
    for v in versions(ApiKey.TXN_OFFSET_COMMIT):
        group, pid = f"txn-v{v}", 6000 + v
        assert txn_commit(client, v, group, 10 + v, pid=pid) == [
            0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        for fv in versions(ApiKey.OFFSET_FETCH):
            if fv < 7:
                continue
            stable = offset_fetch_request.OffsetFetchRequest(require_stable=True)
            if fv >= 8:
                stable.groups = [offset_fetch_request.OffsetFetchRequestGroup(
                    group_id=group, topics=[offset_fetch_request.OffsetFetchRequestTopics(
                        name="events", partition_indexes=[1])])]
            else:
                stable.group_id = group
                stable.topics = [offset_fetch_request.OffsetFetchRequestTopic(
                    name="events", partition_indexes=[1])]
            fetched = client.call(ApiKey.OFFSET_FETCH, fv, stable)
            topics = fetched.groups[0].topics if fv >= 8 else fetched.topics
            [p] = topics[0].partitions
            assert (p.committed_offset, p.error_code) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        coordinator.on_transaction_completed(
            pid, [("__consumer_offsets", coordinator.partition_for(group))], True)
        fetched = client.call(ApiKey.OFFSET_FETCH, 7, offset_fetch_request.OffsetFetchRequest(
            group_id=group, require_stable=True, topics=[
                offset_fetch_request.OffsetFetchRequestTopic(name="events",
                                                             partition_indexes=[1])]))
        [p] = fetched.topics[0].partitions
        assert (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code) == (
            10 + v, 4 if v >= 2 else -1, "meta", 0)
    # KIP-447 (v3+): a group's member and generation are checked when given.
    member = join(client, 9, "txn-members").member_id
    client.call(ApiKey.SYNC_GROUP, 5, sync_group_request.SyncGroupRequest(
        group_id="txn-members", generation_id=1, member_id=member, protocol_type="consumer",
        protocol_name="range"))
    for v in versions(ApiKey.TXN_OFFSET_COMMIT):
        if v < 3:  # nothing to check: accepted
            assert txn_commit(client, v, "txn-members", 1, pid=6100)[0] == 0
            continue
        assert txn_commit(client, v, "txn-members", 1, pid=6100, member_id=member,
                          generation=1)[0] == 0
        assert txn_commit(client, v, "txn-members", 1, pid=6100, member_id=member,
                          generation=2)[0] == ErrorCode.ILLEGAL_GENERATION
        assert txn_commit(client, v, "txn-members", 1, pid=6100, member_id="ghost",
                          generation=1)[0] == ErrorCode.UNKNOWN_MEMBER_ID
        assert txn_commit(client, v, "", 1, pid=6100)[0] == ErrorCode.INVALID_GROUP_ID


def test_describe_list_delete_at_every_version(client: Client) -> None:
    member = join(client, 5, "described", instance_id="static-1").member_id
    for v in versions(ApiKey.DESCRIBE_GROUPS):
        described = client.call(ApiKey.DESCRIBE_GROUPS, v, describe_groups_request.
                                DescribeGroupsRequest(groups=["described", "nope"],
                                                      include_authorized_operations=v >= 3))
        group, nope = described.groups
        assert (group.group_state, group.protocol_type) == ("CompletingRebalance", "consumer")
        [m] = group.members
        assert (m.member_id, m.client_id, m.client_host) == (member, "tester", "/127.0.0.1")
        assert m.group_instance_id == ("static-1" if v >= 4 else None)
        assert nope.group_state == "Dead" and nope.error_code == 0
        assert (group.authorized_operations > 0) == (v >= 3)
    for v in versions(ApiKey.LIST_GROUPS):
        body = list_groups_request.ListGroupsRequest()
        if v >= 4:
            body.states_filter = ["completingrebalance"]
        listed = client.call(ApiKey.LIST_GROUPS, v, body)
        names = {g.group_id: g for g in listed.groups}
        assert "described" in names
        if v >= 4:
            assert set(names) == {"described"} and names["described"].group_state == (
                "CompletingRebalance")
        assert names["described"].group_type == ("classic" if v >= 5 else "")
    client.call(ApiKey.OFFSET_COMMIT, 9, offset_commit_request.OffsetCommitRequest(
        group_id="doomed", topics=[offset_commit_request.OffsetCommitRequestTopic(
            name="events", partitions=[offset_commit_request.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1)])]))
    for v in versions(ApiKey.DELETE_GROUPS):
        deleted = client.call(ApiKey.DELETE_GROUPS, v, delete_groups_request.DeleteGroupsRequest(
            groups_names=["described", "doomed"]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            ("described", ErrorCode.NON_EMPTY_GROUP),
            ("doomed", ErrorCode.NONE if v == versions(ApiKey.DELETE_GROUPS)[0]
             else ErrorCode.GROUP_ID_NOT_FOUND)]


def test_api_versions_and_broker_md_list_exactly_what_is_served(client: Client) -> None:
    h = client.h
    config = BrokerConfig.default()
    transactions = TransactionConfig.from_broker_config(config)
    coordinator = TransactionCoordinator(
        transactions, TransactionStateManager(transactions, h.replica_manager, h.time, h.time),
        ProducerIdManager(h.controller.store), None,  # type: ignore[arg-type]
        h.coordinator.partition_for, h.time, h.time)
    apis = KafkaApis(config, h.replica_manager, h.controller,
                     AdminManager(config, h.controller, h.replica_manager), coordinator,
                     h.coordinator, MetadataCache(config.node_id, "cluster"),
                     scram=ScramApis(h.controller.store, CredentialCache()),
                     quota_apis=QuotaApis(h.controller.store))
    versions_response: Any = apis.handle_api_versions(None, None)  # type: ignore[arg-type]
    advertised = {v.api_key: (v.min_version, v.max_version)
                  for v in versions_response.api_keys}
    for key in client.apis.handlers():
        assert advertised[key] == supported_range(key)
    table = {int(k): v for k, v in re.findall(r"^\| \w+ \| (\d+) \| ([\d-]+) \|$",
                                              (DOCS / "broker.md").read_text(), re.M)}
    assert table == {key: f"{low}-{high}" if low != high else str(low)
                     for key, (low, high) in advertised.items()}
