"""ACL authorization of the consumer group and transaction handlers (GroupApis,
TransactionApis, DescribeProducers), as Kafka 3.9's KafkaApis authorizes them: a real
AclAuthorizer fed ACLs as a store feeds them, behind the AuthHelper the handlers ask, and
requests from User:alice through the group and transaction tests' clients. For each API:
what is allowed, what is refused and with which error code, a DENY that overrides an
ALLOW, and that a refused request changes nothing. Without an authorizer (ALLOW_ALL, the
default) everything is allowed, as the other tests of these handlers show."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from support.groups import GroupHarness
from test_broker_describe_producers import TOPIC_ID, batch, logs, manager, state
from test_group_apis import Client as GroupClient
from test_group_apis import join, versions
from test_txn_coordinator import P0, P1, TxnHarness
from test_txn_coordinator import Client as TxnClient

from odradek.broker.auth_helper import ALLOW_ALL, AuthHelper
from odradek.broker.describe_producers import describe_producers_handler
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.metadata import TopicMetadata
from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.apis import GroupApis
from odradek.coordinator.transaction.apis import TransactionApis
from odradek.coordinator.transaction.transaction_metadata import TransactionState
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.messages import (
    add_offsets_to_txn_request,
    add_partitions_to_txn_request,
    delete_groups_request,
    describe_groups_request,
    describe_transactions_request,
    end_txn_request,
    find_coordinator_request,
    heartbeat_request,
    init_producer_id_request,
    leave_group_request,
    list_groups_request,
    list_transactions_request,
    offset_commit_request,
    offset_delete_request,
    offset_fetch_request,
    sync_group_request,
    txn_offset_commit_request,
)
from odradek.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from odradek.protocol.messages.request_header import RequestHeader
from odradek.security.acl import (
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
from odradek.server.network import RequestContext

__all__ = ["logs", "manager"]  # the DescribeProducers fixtures, used here

E = ErrorCode
Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALICE = KafkaPrincipal.user("alice")
NOT_REQUESTED = -(2**31)  # DescribeGroups' authorized operations when not asked for
SECRET_ID = UUID(int=0x5EC)


class Acls:
    """A real AclAuthorizer, its ACLs applied the way an AclStore applies them, and the
    AuthHelper the handlers ask."""

    def __init__(self) -> None:
        self.authorizer = AclAuthorizer()
        self.auth = AuthHelper(self.authorizer)
        self._acls: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)

    def allow(self, resource_type: ResourceType, name: str, *operations: AclOperation,
              pattern: PatternType = LITERAL, principal: str = str(ALICE)) -> None:
        self._add(resource_type, name, operations, pattern, principal, AclPermissionType.ALLOW)

    def deny(self, resource_type: ResourceType, name: str, *operations: AclOperation,
             pattern: PatternType = LITERAL, principal: str = str(ALICE)) -> None:
        self._add(resource_type, name, operations, pattern, principal, AclPermissionType.DENY)

    def clear(self) -> None:
        self.authorizer.apply(AclChanges({}, full=True))
        self._acls.clear()

    def _add(self, resource_type: ResourceType, name: str, operations: tuple[AclOperation, ...],
             pattern_type: PatternType, principal: str, permission: AclPermissionType) -> None:
        pattern = ResourcePattern(resource_type, name, pattern_type)
        self._acls[pattern].update(AccessControlEntry(principal, "*", op, permission)
                                   for op in operations)
        self.authorizer.apply(AclChanges({pattern: frozenset(self._acls[pattern])}))


class AsPrincipal:
    """The handlers of a GroupApis or TransactionApis as a principal's requests reach
    them: the tests' clients build anonymous contexts, this puts `principal` on each."""

    def __init__(self, apis: Any, principal: KafkaPrincipal) -> None:
        self.apis = apis
        self.principal = principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.apis, name)

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        def as_principal(handler: Callable[[Request, RequestContext], Any]
                         ) -> Callable[[Request, RequestContext], Any]:
            return lambda request, context: handler(
                request, replace(context, principal=self.principal))
        return {key: as_principal(handler) for key, handler in self.apis.handlers().items()}


def record_calls(coordinator: Any, *names: str) -> list[str]:
    """Each call of the coordinator's methods `names`, recorded by name."""
    calls: list[str] = []
    for name in names:
        method = getattr(coordinator, name)

        def spy(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _method(*args, **kwargs)

        setattr(coordinator, name, spy)
    return calls


GROUP_METHODS = ("handle_join_group", "handle_sync_group", "handle_heartbeat",
                 "handle_leave_group", "handle_commit_offsets", "handle_txn_commit_offsets",
                 "handle_fetch_offsets", "handle_delete_offsets", "handle_describe_group",
                 "handle_list_groups", "handle_delete_groups")
TXN_METHODS = ("handle_init_producer_id", "handle_add_partitions", "handle_verify_partitions",
               "handle_add_offsets", "handle_end_transaction", "handle_describe_transactions",
               "handle_list_transactions")


# ---- the group APIs ---------------------------------------------------------------------


class Groups:
    """The group harness, its GroupApis behind `acls`, and a client sending as alice."""

    def __init__(self, directory: Path) -> None:
        self.h = GroupHarness(directory)
        asyncio.run(self.h.controller.create_topic("secret", 2, 1, {}))
        self.h.time.run_pending()
        self.acls = Acls()
        self.client = GroupClient(self.h)
        self.apis: GroupApis = self.client.apis
        self.apis.auth = self.acls.auth
        self.client.apis = AsPrincipal(self.apis, ALICE)  # type: ignore[assignment]
        self.calls = record_calls(self.h.coordinator, *GROUP_METHODS)

    def call(self, key: ApiKey, version: int, body: Any) -> Any:
        return self.client.call(key, version, body)

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Offsets committed without the handlers (and their authorization)."""
        assert set(self.h.commit(group, offsets).values()) == {E.NONE}

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return self.h.committed(group)


@pytest.fixture
def g(tmp_path: Path) -> Iterator[Groups]:
    groups = Groups(tmp_path)
    yield groups
    groups.h.close()


def test_allow_all_is_the_default() -> None:
    """Until KafkaApis sets the broker's, the handlers ask no authorizer."""
    assert ALLOW_ALL.authorizer is None and not ALLOW_ALL.enabled
    assert GroupApis(None, None, None, None).auth is ALLOW_ALL  # type: ignore[arg-type]
    assert TransactionApis(None, None, None, None).auth is ALLOW_ALL  # type: ignore[arg-type]


def test_allow_all_lets_any_principal_do_everything(tmp_path: Path) -> None:
    """Alice, with no authorizer: as the anonymous principal of the other tests."""
    g = Groups(tmp_path)
    try:
        g.apis.auth = ALLOW_ALL
        assert join(g.client, 9, "free").error_code == E.NONE
        commit = g.call(ApiKey.OFFSET_COMMIT, 9, offset_commit_request.OffsetCommitRequest(
            group_id="offsets", topics=[commit_topic("secret", 0)]))
        assert codes(commit) == [("secret", [(0, E.NONE)])]
        answer = g.call(ApiKey.OFFSET_FETCH, 8, fetch_groups(("offsets", None)))
        assert fetched(answer.groups[0].topics) == [("secret", [(0, 5, E.NONE)])]
        described = g.call(ApiKey.DESCRIBE_GROUPS, 5, describe_groups_request.
                           DescribeGroupsRequest(groups=["free"],
                                                 include_authorized_operations=True))
        assert described.groups[0].authorized_operations == (
            (1 << Op.READ) | (1 << Op.DELETE) | (1 << Op.DESCRIBE))
        listed = g.call(ApiKey.LIST_GROUPS, 5, list_groups_request.ListGroupsRequest())
        assert sorted(x.group_id for x in listed.groups) == ["free", "offsets"]
        found = g.call(ApiKey.FIND_COORDINATOR, 4, find_coordinator_request.
                       FindCoordinatorRequest(key_type=0, coordinator_keys=["free"]))
        assert found.coordinators[0].error_code == E.NONE
        deleted = g.call(ApiKey.DELETE_GROUPS, 2, delete_groups_request.DeleteGroupsRequest(
            groups_names=["offsets"]))
        assert [(x.group_id, x.error_code) for x in deleted.results] == [("offsets", E.NONE)]
    finally:
        g.h.close()


# ---- FindCoordinator --------------------------------------------------------------------


def message(version: int, text: str | None) -> str | None:
    """An error message as a FindCoordinator response of `version` carries it: none in v0
    (the field's default), Kafka's own before v4, none in a v4+ coordinator entry."""
    return "" if version == 0 else text if version < 4 else None


def find(g: Groups, version: int, key_type: int, *keys: str) -> list[tuple[Any, ...]]:
    """(key, error, node, host, port, message) per key."""
    if version >= 4:
        r = g.call(ApiKey.FIND_COORDINATOR, version, find_coordinator_request.
                   FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys)))
        return [(c.key, c.error_code, c.node_id, c.host, c.port, c.error_message)
                for c in r.coordinators]
    [key] = keys
    r = g.call(ApiKey.FIND_COORDINATOR, version, find_coordinator_request.
               FindCoordinatorRequest(key=key, key_type=key_type))
    return [(key, r.error_code, r.node_id, r.host, r.port, r.error_message)]


def test_find_coordinator_of_a_group(g: Groups) -> None:
    g.acls.allow(GROUP, "app-", Op.DESCRIBE, pattern=PREFIXED)
    g.acls.allow(GROUP, "reader", Op.READ)  # READ implies DESCRIBE
    g.acls.deny(GROUP, "app-secret", Op.DESCRIBE)  # a DENY overrides the prefix's ALLOW
    for v in versions(ApiKey.FIND_COORDINATOR):
        found = E.NONE, 1, "broker.example", 9092, message(v, None)
        denied = (E.GROUP_AUTHORIZATION_FAILED, -1, "", -1,
                  message(v, "Group authorization failed."))
        if v >= 4:
            assert find(g, v, 0, "app-1", "app-secret", "other", "reader") == [
                ("app-1", *found), ("app-secret", *denied), ("other", *denied),
                ("reader", *found)]
        else:
            assert find(g, v, 0, "app-1") == [("app-1", *found)]
            assert find(g, v, 0, "app-secret") == [("app-secret", *denied)]
            assert find(g, v, 0, "other") == [("other", *denied)]
            assert find(g, v, 0, "reader") == [("reader", *found)]


def test_find_coordinator_refused_creates_no_offsets_topic(tmp_path: Path) -> None:
    h = GroupHarness(tmp_path, create_topic=False)
    try:
        acls = Acls()
        client = GroupClient(h)
        client.apis.auth = acls.auth
        client.apis = AsPrincipal(client.apis, ALICE)  # type: ignore[assignment]
        r = client.call(ApiKey.FIND_COORDINATOR, 3, find_coordinator_request.
                        FindCoordinatorRequest(key="g", key_type=0))
        assert (r.error_code, r.node_id) == (E.GROUP_AUTHORIZATION_FAILED, -1)
        assert GROUP_METADATA_TOPIC not in h.controller.topics
        acls.allow(GROUP, "g", Op.DESCRIBE)
        r = client.call(ApiKey.FIND_COORDINATOR, 3, find_coordinator_request.
                        FindCoordinatorRequest(key="g", key_type=0))
        assert (r.error_code, r.node_id) == (E.NONE, 1)
        assert GROUP_METADATA_TOPIC in h.controller.topics
    finally:
        h.close()


def test_find_coordinator_of_a_transactional_id(g: Groups) -> None:
    """Without transaction APIs (the group APIs alone), the id is still authorized first."""
    g.acls.allow(TXN, "t-", Op.DESCRIBE, pattern=PREFIXED)
    g.acls.deny(TXN, "t-2", Op.ALL)
    for v in versions(ApiKey.FIND_COORDINATOR):
        assert find(g, v, 1, "t-1")[0][1] == E.COORDINATOR_NOT_AVAILABLE  # no coordinator
        assert find(g, v, 1, "t-2") == [
            ("t-2", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1,
             message(v, "Transactional Id authorization failed."))]
        # The group ACLs are not a transactional id's.
        g.acls.allow(GROUP, "other", Op.ALL)
        assert find(g, v, 1, "other")[0][1] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_find_coordinator_of_a_share_group(g: Groups) -> None:
    assert find(g, 6, 2, "s")[0][1:3] == (E.CLUSTER_AUTHORIZATION_FAILED, -1)
    assert find(g, 5, 2, "s")[0][1] == E.INVALID_REQUEST  # before v6, as Kafka
    g.acls.allow(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)
    assert find(g, 6, 2, "s")[0][1] == E.COORDINATOR_NOT_AVAILABLE  # none here


# ---- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------


def test_join_group(g: Groups) -> None:
    g.acls.allow(GROUP, "*", Op.ALL)
    g.acls.deny(GROUP, "closed", Op.READ)  # overrides ALL on every group
    g.acls.allow(GROUP, "described", Op.DESCRIBE, principal="User:*")  # not READ
    g.acls.deny(GROUP, "described", Op.READ)
    g.acls.allow(GROUP, "bobs", Op.READ, principal="User:bob")  # not alice's
    g.acls.deny(GROUP, "bobs", Op.ALL)
    for v in versions(ApiKey.JOIN_GROUP):
        for group in ("closed", "described", "bobs"):
            r = join(g.client, v, group)
            assert (r.error_code, r.generation_id, r.member_id, r.leader, r.members) == (
                E.GROUP_AUTHORIZATION_FAILED, -1, "", "", [])
            assert r.protocol_name == (None if v >= 7 else "")
            assert r.protocol_type is None
            assert g.h.manager.get_group(group) is None  # nobody joined
        assert g.calls == []
        r = join(g.client, v, f"open-{v}")
        assert r.error_code == E.NONE and r.generation_id == 1
        assert g.h.group(f"open-{v}").has(r.member_id)
        g.calls.clear()


def formed(g: Groups, group: str) -> str:
    """A one-member group past its first rebalance, joined without authorization."""
    [member] = g.h.form_group(group, 1)
    return member


def test_sync_group(g: Groups) -> None:
    g.acls.allow(GROUP, "*", Op.READ)
    g.acls.deny(GROUP, "closed", Op.READ, pattern=PREFIXED)
    for v in versions(ApiKey.SYNC_GROUP):
        for group in (f"closed-{v}", f"open-{v}"):
            answer = g.h.join(group)
            g.h.settle([answer])
            member = answer.result.member_id
            body = sync_group_request.SyncGroupRequest(
                group_id=group, generation_id=answer.result.generation_id, member_id=member,
                assignments=[sync_group_request.SyncGroupRequestAssignment(
                    member_id=member, assignment=b"mine")])
            if v >= 5:
                body.protocol_type, body.protocol_name = "consumer", "range"
            r = g.call(ApiKey.SYNC_GROUP, v, body)
            if group.startswith("closed"):
                assert (r.error_code, bytes(r.assignment)) == (
                    E.GROUP_AUTHORIZATION_FAILED, b"")
                assert r.protocol_name is None and r.protocol_type is None
                # Still waiting for its leader's assignment.
                assert g.h.group(group).state.value == "CompletingRebalance"
                assert "handle_sync_group" not in g.calls
            else:
                assert (r.error_code, bytes(r.assignment)) == (E.NONE, b"mine")
            g.calls.clear()
    # From v5 the missing protocol type or name is found before the authorization.
    r = g.call(ApiKey.SYNC_GROUP, 5, sync_group_request.SyncGroupRequest(
        group_id="closed-5", generation_id=1, member_id="m"))
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_heartbeat_and_leave_group(g: Groups) -> None:
    member = formed(g, "members")
    g.calls.clear()
    g.acls.allow(GROUP, "members", Op.ALL)
    g.acls.deny(GROUP, "members", Op.READ, principal="User:*")  # for everyone, alice too
    for v in versions(ApiKey.HEARTBEAT):
        r = g.call(ApiKey.HEARTBEAT, v, heartbeat_request.HeartbeatRequest(
            group_id="members", generation_id=1, member_id=member))
        assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
    for v in versions(ApiKey.LEAVE_GROUP):
        body = leave_group_request.LeaveGroupRequest(group_id="members")
        if v >= 3:
            body.members = [leave_group_request.MemberIdentity(member_id=member)]
        else:
            body.member_id = member
        r = g.call(ApiKey.LEAVE_GROUP, v, body)
        assert (r.error_code, r.members) == (E.GROUP_AUTHORIZATION_FAILED, [])
    assert g.calls == []
    assert g.h.group("members").has(member)  # still there
    g.acls.clear()
    g.acls.allow(GROUP, "members", Op.READ)
    r = g.call(ApiKey.HEARTBEAT, 4, heartbeat_request.HeartbeatRequest(
        group_id="members", generation_id=1, member_id=member))
    assert r.error_code == E.NONE
    r = g.call(ApiKey.LEAVE_GROUP, 5, leave_group_request.LeaveGroupRequest(
        group_id="members", members=[leave_group_request.MemberIdentity(member_id=member)]))
    assert (r.error_code, [m.error_code for m in r.members]) == (E.NONE, [E.NONE])
    assert not g.h.group("members").has(member)


# ---- OffsetCommit, TxnOffsetCommit --------------------------------------------------------


def commit_topic(name: str, *partitions: int, offset: int = 5
                 ) -> offset_commit_request.OffsetCommitRequestTopic:
    return offset_commit_request.OffsetCommitRequestTopic(name=name, partitions=[
        offset_commit_request.OffsetCommitRequestPartition(partition_index=p,
                                                           committed_offset=offset)
        for p in partitions])


def codes(response: Any) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics]


def test_offset_commit(g: Groups) -> None:
    topics = [commit_topic("events", 0, 99), commit_topic("secret", 0),
              commit_topic("nope", 0)]
    for v in versions(ApiKey.OFFSET_COMMIT):
        group = f"commit-v{v}"
        g.acls.clear()
        g.acls.allow(TOPIC, "*", Op.READ)
        # The group: refused, whatever the topics, and nothing is stored.
        g.acls.allow(GROUP, group, Op.DESCRIBE, Op.DELETE)
        r = g.call(ApiKey.OFFSET_COMMIT, v, offset_commit_request.OffsetCommitRequest(
            group_id=group, topics=topics))
        assert codes(r) == [("events", [(0, E.GROUP_AUTHORIZATION_FAILED),
                                        (99, E.GROUP_AUTHORIZATION_FAILED)]),
                            ("secret", [(0, E.GROUP_AUTHORIZATION_FAILED)]),
                            ("nope", [(0, E.GROUP_AUTHORIZATION_FAILED)])]
        assert g.calls == [] and g.h.manager.get_group(group) is None
        # The topics: a DENY on one overrides the wildcard's ALLOW; an unknown topic
        # is refused before it is found unknown.
        g.acls.allow(GROUP, group, Op.READ)
        g.acls.deny(TOPIC, "secret", Op.READ)
        g.acls.deny(TOPIC, "nope", Op.ALL)
        r = g.call(ApiKey.OFFSET_COMMIT, v, offset_commit_request.OffsetCommitRequest(
            group_id=group, topics=topics))
        assert codes(r) == [("events", [(0, E.NONE), (99, E.UNKNOWN_TOPIC_OR_PARTITION)]),
                            ("secret", [(0, E.TOPIC_AUTHORIZATION_FAILED)]),
                            ("nope", [(0, E.TOPIC_AUTHORIZATION_FAILED)])]
        assert g.committed(group) == {("events", 0): 5}
        # None of them: the coordinator is not asked, and nothing is stored.
        g.calls.clear()
        r = g.call(ApiKey.OFFSET_COMMIT, v, offset_commit_request.OffsetCommitRequest(
            group_id=f"{group}-none", topics=[commit_topic("secret", 0, offset=1)]))
        assert codes(r) == [("secret", [(0, E.GROUP_AUTHORIZATION_FAILED)])]
        g.acls.allow(GROUP, f"{group}-none", Op.READ)
        r = g.call(ApiKey.OFFSET_COMMIT, v, offset_commit_request.OffsetCommitRequest(
            group_id=f"{group}-none", topics=[commit_topic("secret", 0, 1, offset=1)]))
        assert codes(r) == [("secret", [(0, E.TOPIC_AUTHORIZATION_FAILED),
                                        (1, E.TOPIC_AUTHORIZATION_FAILED)])]
        assert "handle_commit_offsets" not in g.calls
        assert g.h.manager.get_group(f"{group}-none") is None
        g.calls.clear()


def txn_commit(g: Groups, version: int, group: str, tid: str = "txn") -> Any:
    body = txn_offset_commit_request.TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=7000, producer_epoch=0,
        topics=[txn_offset_commit_request.TxnOffsetCommitRequestTopic(name=name, partitions=[
            txn_offset_commit_request.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=11) for p in partitions])
            for name, partitions in (("events", [1, 2]), ("secret", [0]))])
    return g.call(ApiKey.TXN_OFFSET_COMMIT, version, body)


def pending(g: Groups, group: str) -> bool:
    group_metadata = g.h.manager.get_group(group)
    return group_metadata is not None and group_metadata.has_pending_offset_commits_for_partition(
        ("events", 1))


def test_txn_offset_commit(g: Groups) -> None:
    every = [("events", [1, 2]), ("secret", [0])]
    for v in versions(ApiKey.TXN_OFFSET_COMMIT):
        group = f"txn-v{v}"
        g.acls.clear()
        g.acls.allow(TOPIC, "*", Op.READ)
        g.acls.allow(GROUP, group, Op.READ)
        # WRITE on the transactional id first (DESCRIBE is not enough).
        g.acls.allow(TXN, "txn", Op.DESCRIBE)
        r = txn_commit(g, v, group)
        assert codes(r) == [(name, [(p, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in ps])
                            for name, ps in every]
        # Then READ on the group (checked after the id: both refused, the id's error).
        g.acls.deny(GROUP, group, Op.READ)
        assert codes(txn_commit(g, v, group))[0][1][0][1] == (
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        g.acls.allow(TXN, "txn", Op.WRITE)
        r = txn_commit(g, v, group)
        assert codes(r) == [(name, [(p, E.GROUP_AUTHORIZATION_FAILED) for p in ps])
                            for name, ps in every]
        assert g.calls == [] and g.h.manager.get_group(group) is None
        # Then READ on each topic.
        g.acls.clear()
        g.acls.allow(TXN, "txn", Op.WRITE)
        g.acls.allow(GROUP, group, Op.READ)
        g.acls.allow(TOPIC, "", Op.READ, pattern=PREFIXED)
        g.acls.deny(TOPIC, "sec", Op.READ, pattern=PREFIXED)
        r = txn_commit(g, v, group)
        assert codes(r) == [("events", [(1, E.NONE), (2, E.NONE)]),
                            ("secret", [(0, E.TOPIC_AUTHORIZATION_FAILED)])]
        assert pending(g, group)
        g.calls.clear()


# ---- OffsetFetch --------------------------------------------------------------------------


def fetch_groups(*groups: tuple[str, list[tuple[str, list[int]]] | None]
                 ) -> offset_fetch_request.OffsetFetchRequest:
    return offset_fetch_request.OffsetFetchRequest(groups=[
        offset_fetch_request.OffsetFetchRequestGroup(
            group_id=group, topics=None if topics is None else [
                offset_fetch_request.OffsetFetchRequestTopics(name=n, partition_indexes=ps)
                for n, ps in topics]) for group, topics in groups])


def fetched(topics: list[Any]) -> list[tuple[str, list[tuple[int, int, int]]]]:
    return [(t.name, [(p.partition_index, p.committed_offset, p.error_code)
                      for p in t.partitions]) for t in topics]


def test_offset_fetch_before_v8(g: Groups) -> None:
    g.commit("fetched", {("events", 1): 10, ("secret", 0): 20})
    asked = [offset_fetch_request.OffsetFetchRequestTopic(name="secret", partition_indexes=[0]),
             offset_fetch_request.OffsetFetchRequestTopic(name="events",
                                                          partition_indexes=[1, 2])]
    g.acls.allow(GROUP, "fetched", Op.READ)  # implies DESCRIBE
    g.acls.allow(TOPIC, "*", Op.DESCRIBE)
    g.acls.deny(TOPIC, "secret", Op.DESCRIBE)
    for v in range(0, 8):
        body = offset_fetch_request.OffsetFetchRequest(group_id="fetched", topics=asked)
        r = g.call(ApiKey.OFFSET_FETCH, v, body)
        # The topics it may describe first, then those refused (offset -1), as Kafka.
        assert fetched(r.topics) == [
            ("events", [(1, 10, E.NONE), (2, -1, E.NONE)]),
            ("secret", [(0, -1, E.TOPIC_AUTHORIZATION_FAILED)])]
        assert r.topics[1].partitions[0].metadata == ""
        if v >= 2:  # all of the group's offsets: those refused are left out
            r = g.call(ApiKey.OFFSET_FETCH, v, offset_fetch_request.OffsetFetchRequest(
                group_id="fetched", topics=None))
            assert (r.error_code, fetched(r.topics)) == (E.NONE, [("events", [(1, 10, 0)])])
        # A group it may not describe: no offsets at all.
        r = g.call(ApiKey.OFFSET_FETCH, v, offset_fetch_request.OffsetFetchRequest(
            group_id="other", topics=asked))
        if v >= 2:
            assert (r.error_code, r.topics) == (E.GROUP_AUTHORIZATION_FAILED, [])
        else:  # no top-level error: each partition asked for carries it
            assert fetched(r.topics) == [
                ("secret", [(0, -1, E.GROUP_AUTHORIZATION_FAILED)]),
                ("events", [(1, -1, E.GROUP_AUTHORIZATION_FAILED),
                            (2, -1, E.GROUP_AUTHORIZATION_FAILED)])]
    assert "handle_fetch_offsets" in g.calls
    g.calls.clear()
    g.call(ApiKey.OFFSET_FETCH, 7, offset_fetch_request.OffsetFetchRequest(
        group_id="other", topics=None))
    assert g.calls == []


def test_offset_fetch_of_several_groups(g: Groups) -> None:
    g.commit("a", {("events", 1): 10, ("secret", 0): 20})
    g.commit("b", {("events", 3): 30, ("secret", 1): 40})
    g.acls.allow(GROUP, "a", Op.DESCRIBE)
    g.acls.allow(GROUP, "b", Op.DESCRIBE)
    g.acls.allow(GROUP, "*", Op.DESCRIBE, principal="User:bob")
    g.acls.allow(TOPIC, "events", Op.READ)
    for v in (8, 9):
        r = g.call(ApiKey.OFFSET_FETCH, v, fetch_groups(
            ("a", None), ("b", [("secret", [1]), ("events", [3])]), ("c", None)))
        a, b, c = r.groups
        assert (a.group_id, a.error_code, fetched(a.topics)) == (
            "a", E.NONE, [("events", [(1, 10, E.NONE)])])
        assert (b.group_id, b.error_code, fetched(b.topics)) == (
            "b", E.NONE, [("events", [(3, 30, E.NONE)]),
                          ("secret", [(1, -1, E.TOPIC_AUTHORIZATION_FAILED)])])
        assert (c.group_id, c.error_code, c.topics) == ("c", E.GROUP_AUTHORIZATION_FAILED, [])
    g.acls.deny(GROUP, "b", Op.ALL)
    r = g.call(ApiKey.OFFSET_FETCH, 8, fetch_groups(("a", None), ("b", None)))
    assert [(x.group_id, x.error_code) for x in r.groups] == [
        ("a", E.NONE), ("b", E.GROUP_AUTHORIZATION_FAILED)]


# ---- DescribeGroups, ListGroups, DeleteGroups, OffsetDelete -------------------------------


def test_describe_groups(g: Groups) -> None:
    member = formed(g, "described")
    formed(g, "hidden")
    g.acls.allow(GROUP, "described", Op.READ)  # READ implies DESCRIBE
    g.acls.allow(GROUP, "nope", Op.DESCRIBE)
    g.acls.allow(GROUP, "hidden", Op.ALL)
    g.acls.deny(GROUP, "hidden", Op.DESCRIBE)
    for v in versions(ApiKey.DESCRIBE_GROUPS):
        for include in (False, True):
            r = g.call(ApiKey.DESCRIBE_GROUPS, v, describe_groups_request.DescribeGroupsRequest(
                groups=["described", "hidden", "nope"],
                include_authorized_operations=include))
            hidden, described, nope = r.groups  # the refused first, as Kafka answers
            assert (hidden.group_id, hidden.error_code, hidden.group_state,
                    hidden.protocol_type, hidden.protocol_data, hidden.members) == (
                "hidden", E.GROUP_AUTHORIZATION_FAILED, "", "", "", [])
            assert hidden.authorized_operations == NOT_REQUESTED
            assert (described.group_id, described.error_code, described.group_state) == (
                "described", E.NONE, "Stable")
            assert [m.member_id for m in described.members] == [member]
            assert (nope.group_id, nope.error_code, nope.group_state) == ("nope", E.NONE, "Dead")
            if v >= 3 and include:  # KIP-430: READ (and DESCRIBE, which it implies)
                assert described.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
                assert nope.authorized_operations == 1 << Op.DESCRIBE
            else:
                assert described.authorized_operations == NOT_REQUESTED
    assert g.calls.count("handle_describe_group") == 2 * 2 * len(
        versions(ApiKey.DESCRIBE_GROUPS))  # never for "hidden"


def test_list_groups(g: Groups) -> None:
    for group in ("app-1", "app-2", "other"):
        formed(g, group)

    def listed() -> list[str]:
        r = g.call(ApiKey.LIST_GROUPS, 5, list_groups_request.ListGroupsRequest())
        assert r.error_code == E.NONE
        return sorted(x.group_id for x in r.groups)

    assert listed() == []
    g.acls.allow(GROUP, "app-", Op.DESCRIBE, pattern=PREFIXED)
    assert listed() == ["app-1", "app-2"]
    g.acls.deny(GROUP, "app-2", Op.DESCRIBE)
    assert listed() == ["app-1"]
    g.acls.allow(CLUSTER, "kafka-cluster", Op.DESCRIBE)  # every group, the DENY too
    assert listed() == ["app-1", "app-2", "other"]
    g.acls.deny(CLUSTER, "kafka-cluster", Op.DESCRIBE)  # back to the groups' own ACLs
    assert listed() == ["app-1"]
    for v in versions(ApiKey.LIST_GROUPS):
        r = g.call(ApiKey.LIST_GROUPS, v, list_groups_request.ListGroupsRequest())
        assert [x.group_id for x in r.groups] == ["app-1"]


def test_delete_groups(g: Groups) -> None:
    g.acls.allow(GROUP, "*", Op.DELETE)
    g.acls.deny(GROUP, "kept-", Op.DELETE, pattern=PREFIXED)
    for v in versions(ApiKey.DELETE_GROUPS):
        for group in (f"kept-{v}", f"gone-{v}", f"read-{v}"):
            g.commit(group, {("events", 0): 1})
        g.acls.allow(GROUP, f"read-{v}", Op.READ, Op.DESCRIBE)  # not DELETE
        g.acls.deny(GROUP, f"read-{v}", Op.DELETE)
        r = g.call(ApiKey.DELETE_GROUPS, v, delete_groups_request.DeleteGroupsRequest(
            groups_names=[f"kept-{v}", f"gone-{v}", f"read-{v}", f"kept-{v}"]))
        # The refused after the others, as Kafka answers.
        assert [(x.group_id, x.error_code) for x in r.results] == [
            (f"gone-{v}", E.NONE), (f"kept-{v}", E.GROUP_AUTHORIZATION_FAILED),
            (f"read-{v}", E.GROUP_AUTHORIZATION_FAILED)]
        assert g.committed(f"kept-{v}") == g.committed(f"read-{v}") == {("events", 0): 1}
        assert g.committed(f"gone-{v}") == {}
    g.calls.clear()
    r = g.call(ApiKey.DELETE_GROUPS, 2, delete_groups_request.DeleteGroupsRequest(
        groups_names=["kept-x"]))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("kept-x", E.GROUP_AUTHORIZATION_FAILED)]
    assert g.calls == []


def test_offset_delete(g: Groups) -> None:
    g.commit("offsets", {("events", 1): 10, ("secret", 0): 20})
    g.calls.clear()
    body = offset_delete_request.OffsetDeleteRequest(group_id="offsets", topics=[
        offset_delete_request.OffsetDeleteRequestTopic(name=name, partitions=[
            offset_delete_request.OffsetDeleteRequestPartition(partition_index=p)
            for p in ps]) for name, ps in (("events", [1, 99]), ("secret", [0]),
                                           ("nope", [0]))])
    g.acls.allow(GROUP, "offsets", Op.READ, Op.DESCRIBE)  # not DELETE
    g.acls.allow(TOPIC, "*", Op.READ)
    g.acls.deny(TOPIC, "secret", Op.READ)
    r = g.call(ApiKey.OFFSET_DELETE, 0, body)
    assert (r.error_code, r.topics) == (E.GROUP_AUTHORIZATION_FAILED, [])
    assert g.calls == []
    assert g.committed("offsets") == {("events", 1): 10, ("secret", 0): 20}
    g.acls.allow(GROUP, "offsets", Op.DELETE)
    r = g.call(ApiKey.OFFSET_DELETE, 0, body)
    assert r.error_code == E.NONE
    assert sorted((t.name, p.partition_index, p.error_code)
                  for t in r.topics for p in t.partitions) == [
        ("events", 1, E.NONE), ("events", 99, E.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION), ("secret", 0, E.TOPIC_AUTHORIZATION_FAILED)]
    assert g.committed("offsets") == {("secret", 0): 20}


# ---- the transaction APIs ---------------------------------------------------------------


class Txns:
    """The transaction harness, its TransactionApis behind `acls`, a client sending as
    alice, and the group APIs' FindCoordinator answering through them."""

    def __init__(self, directory: Path) -> None:
        self.h = TxnHarness(directory)
        asyncio.run(self.h.groups.controller.create_topic("secret", 2, 1, {}))
        self.h.time.run_pending()
        self.acls = Acls()
        self.client = TxnClient(self.h)
        self.apis: TransactionApis = self.client.apis
        self.apis.auth = self.acls.auth
        self.client.apis = AsPrincipal(self.apis, ALICE)  # type: ignore[assignment]
        self.groups = GroupClient(self.h.groups)
        self.groups.apis.auth = self.acls.auth
        self.groups.apis.find_transaction_coordinator = self.apis.find_coordinator
        self.groups.apis = AsPrincipal(self.groups.apis, ALICE)  # type: ignore[assignment]
        self.calls = record_calls(self.h.coordinator, *TXN_METHODS)

    def run(self, test: Callable[[], Any]) -> None:
        self.h.run(test())

    async def call(self, key: ApiKey, version: int, body: Any) -> Any:
        return await self.client.call(key, version, body)

    def known(self, tid: str) -> bool:
        error, entry = self.h.manager.get_transaction_state(tid)
        assert error == E.NONE
        return entry is not None


@pytest.fixture
def t(tmp_path: Path) -> Iterator[Txns]:
    txns = Txns(tmp_path)
    yield txns
    txns.h.coordinator.shutdown()
    txns.h.groups.close()


def test_find_coordinator_through_the_transaction_apis(t: Txns) -> None:
    t.acls.allow(TXN, "app-", Op.DESCRIBE, pattern=PREFIXED)
    t.acls.deny(TXN, "app-secret", Op.DESCRIBE)
    for v in versions(ApiKey.FIND_COORDINATOR):
        refused = message(v, "Transactional Id authorization failed.")
        if v >= 4:
            r = t.groups.call(ApiKey.FIND_COORDINATOR, v, find_coordinator_request.
                              FindCoordinatorRequest(key_type=1,
                                                     coordinator_keys=["app-1", "app-secret"]))
            assert [(c.key, c.error_code, c.node_id, c.error_message)
                    for c in r.coordinators] == [
                ("app-1", E.NONE, 1, None),
                ("app-secret", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, refused)]
        else:
            for key, expected in (("app-1", (E.NONE, 1, "localhost", 9092, message(v, None))),
                                  ("other", (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1,
                                             "", -1, refused))):
                r = t.groups.call(ApiKey.FIND_COORDINATOR, v, find_coordinator_request.
                                  FindCoordinatorRequest(key=key, key_type=1))
                assert (r.error_code, r.node_id, r.host, r.port, r.error_message) == expected


def init_request(tid: str | None, pid: int = -1, epoch: int = -1
                 ) -> init_producer_id_request.InitProducerIdRequest:
    return init_producer_id_request.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=pid,
        producer_epoch=epoch)


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_with_a_transactional_id(t: Txns, version: int) -> None:
    async def run() -> None:
        refused = (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        t.acls.allow(TXN, "t", Op.DESCRIBE)  # not WRITE
        t.acls.allow(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)  # not for an id
        r = await t.call(ApiKey.INIT_PRODUCER_ID, version, init_request("t"))
        assert (r.error_code, r.producer_id, r.producer_epoch) == refused
        assert not t.known("t") and t.calls == []
        if version >= 3:  # refused before the producer id and epoch are looked at
            r = await t.call(ApiKey.INIT_PRODUCER_ID, version, init_request("t", 5, -1))
            assert r.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        t.acls.allow(TXN, "", Op.WRITE, pattern=PREFIXED)
        t.acls.deny(TXN, "t", Op.WRITE)
        r = await t.call(ApiKey.INIT_PRODUCER_ID, version, init_request("t"))
        assert (r.error_code, r.producer_id, r.producer_epoch) == refused
        assert not t.known("t")
        r = await t.call(ApiKey.INIT_PRODUCER_ID, version, init_request("u"))
        assert (r.error_code, r.producer_epoch) == (E.NONE, 0) and t.known("u")
    t.run(run)


@pytest.mark.parametrize("version", [0, 5])
def test_init_producer_id_of_an_idempotent_producer(t: Txns, version: int) -> None:
    async def run() -> None:
        async def init() -> tuple[int, int, int]:
            r = await t.call(ApiKey.INIT_PRODUCER_ID, version, init_request(None))
            return r.error_code, r.producer_id, r.producer_epoch

        refused = (E.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
        assert await init() == refused
        t.acls.allow(TOPIC, "events", Op.READ, Op.DESCRIBE)  # no WRITE anywhere
        t.acls.allow(TXN, "*", Op.WRITE)
        assert await init() == refused
        assert t.calls == []
        # IDEMPOTENT_WRITE on the cluster,
        t.acls.allow(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)
        error, pid, epoch = await init()
        assert (error, epoch) == (E.NONE, 0) and pid >= 0
        # or (KIP-679) WRITE on some topic;
        t.acls.clear()
        t.acls.allow(TOPIC, "events-", Op.WRITE, pattern=PREFIXED)
        error, other, _ = await init()
        assert error == E.NONE and other != pid
        # but not when a DENY covers each topic it may write.
        t.acls.deny(TOPIC, "events", Op.WRITE, pattern=PREFIXED)
        assert await init() == refused
        t.acls.clear()
        t.acls.allow(TOPIC, "events", Op.WRITE)
        t.acls.deny(TOPIC, "*", Op.WRITE)
        assert await init() == refused
    t.run(run)


def add_partitions(version: int, tid: str, pid: int, epoch: int,
                   *topics: tuple[str, list[int]], verify_only: bool = False
                   ) -> add_partitions_to_txn_request.AddPartitionsToTxnRequest:
    apt = add_partitions_to_txn_request
    wanted = [apt.AddPartitionsToTxnTopic(name=name, partitions=ps) for name, ps in topics]
    if version < 4:
        return apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=wanted)
    return apt.AddPartitionsToTxnRequest(transactions=[apt.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
        topics=wanted)])


def added(response: Any, version: int) -> dict[tuple[str, int], int]:
    results = (response.results_by_topic_v3_and_below if version < 4 else
               [r for x in response.results_by_transaction for r in x.topic_results])
    return {(r.name, p.partition_index): p.partition_error_code
            for r in results for p in r.results_by_partition}


@pytest.mark.parametrize("version", range(0, 4))
def test_add_partitions_to_txn(t: Txns, version: int) -> None:
    async def run() -> None:
        pid, epoch, _ = await t.h.init("t")
        ask = [("events", [0, 1]), ("secret", [0]), ("nope", [0])]
        t.acls.allow(TOPIC, "*", Op.WRITE)
        t.acls.allow(TXN, "t", Op.DESCRIBE)  # not WRITE
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version,
                         add_partitions(version, "t", pid, epoch, *ask))
        assert added(r, version) == dict.fromkeys(
            [("events", 0), ("events", 1), ("secret", 0), ("nope", 0)],
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        t.acls.allow(TXN, "t", Op.WRITE)
        t.acls.deny(TOPIC, "secret", Op.WRITE)
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version,
                         add_partitions(version, "t", pid, epoch, *ask))
        # One refused (or unknown) partition fails them all: the others not attempted.
        assert added(r, version) == {
            ("events", 0): E.OPERATION_NOT_ATTEMPTED, ("events", 1): E.OPERATION_NOT_ATTEMPTED,
            ("secret", 0): E.TOPIC_AUTHORIZATION_FAILED,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        # An internal topic is never a client's to add, whatever its ACLs.
        t.acls.allow(TOPIC, GROUP_METADATA_TOPIC, Op.ALL)
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_partitions(
            version, "t", pid, epoch, ("events", [0]), (GROUP_METADATA_TOPIC, [0])))
        assert added(r, version) == {("events", 0): E.OPERATION_NOT_ATTEMPTED,
                                     (GROUP_METADATA_TOPIC, 0): E.TOPIC_AUTHORIZATION_FAILED}
        assert "handle_add_partitions" not in t.calls
        assert t.h.state("t") is TransactionState.EMPTY
        assert t.h.metadata("t").topic_partitions == set()
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version,
                         add_partitions(version, "t", pid, epoch, ("events", [0, 1])))
        assert added(r, version) == {("events", 0): E.NONE, ("events", 1): E.NONE}
        assert t.h.metadata("t").topic_partitions == {P0, P1}
        # Without an authorizer too (Kafka leaves internal topics out of the authorized).
        t.apis.auth = ALLOW_ALL
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_partitions(
            version, "t", pid, epoch, (GROUP_METADATA_TOPIC, [0])))
        assert added(r, version) == {(GROUP_METADATA_TOPIC, 0): E.TOPIC_AUTHORIZATION_FAILED}
        assert t.h.metadata("t").topic_partitions == {P0, P1}
    t.run(run)


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_to_txn_of_brokers(t: Txns, version: int) -> None:
    """The batched versions (partition leaders verifying a transaction, KIP-890) take
    CLUSTER_ACTION on the cluster, and nothing of the id or the topics."""
    async def run() -> None:
        pid, epoch, _ = await t.h.init("t")
        await t.h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        t.calls.clear()
        t.acls.allow(TXN, "*", Op.ALL)
        t.acls.allow(TOPIC, "*", Op.ALL)
        t.acls.allow(CLUSTER, "kafka-cluster", Op.ALL)
        t.acls.deny(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)
        for verify_only in (True, False):
            r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_partitions(
                version, "t", pid, epoch, ("events", [0, 1]), verify_only=verify_only))
            assert (r.error_code, r.results_by_transaction) == (
                E.CLUSTER_AUTHORIZATION_FAILED, [])
        assert t.calls == [] and t.h.metadata("t").topic_partitions == {P0}
        t.acls.clear()
        t.acls.allow(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)
        r = await t.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_partitions(
            version, "t", pid, epoch, ("events", [0, 1]), verify_only=True))
        assert r.error_code == E.NONE
        assert added(r, version) == {("events", 0): E.NONE,
                                     ("events", 1): E.TRANSACTION_ABORTABLE}
    t.run(run)


@pytest.mark.parametrize("version", range(0, 5))
def test_add_offsets_to_txn(t: Txns, version: int) -> None:
    async def run() -> None:
        pid, epoch, _ = await t.h.init("t")
        t.calls.clear()
        body = add_offsets_to_txn_request.AddOffsetsToTxnRequest(
            transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
        t.acls.allow(GROUP, "g", Op.READ)
        r = await t.call(ApiKey.ADD_OFFSETS_TO_TXN, version, body)
        assert r.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        t.acls.allow(TXN, "t", Op.WRITE)
        t.acls.deny(GROUP, "g", Op.READ)
        r = await t.call(ApiKey.ADD_OFFSETS_TO_TXN, version, body)
        assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
        t.acls.clear()
        t.acls.allow(TXN, "t", Op.WRITE)
        t.acls.allow(GROUP, "g", Op.DESCRIBE, Op.DELETE)  # not READ
        r = await t.call(ApiKey.ADD_OFFSETS_TO_TXN, version, body)
        assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
        assert t.calls == [] and t.h.state("t") is TransactionState.EMPTY
        assert t.h.metadata("t").topic_partitions == set()
        t.acls.allow(GROUP, "g", Op.READ)
        r = await t.call(ApiKey.ADD_OFFSETS_TO_TXN, version, body)
        assert r.error_code == E.NONE
        assert t.h.metadata("t").topic_partitions == {
            (GROUP_METADATA_TOPIC, t.h.groups.coordinator.partition_for("g"))}
    t.run(run)


@pytest.mark.parametrize("version", range(0, 6))
def test_end_txn(t: Txns, version: int) -> None:
    async def run() -> None:
        pid, epoch, _ = await t.h.init("t")
        await t.h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        t.calls.clear()
        body = end_txn_request.EndTxnRequest(transactional_id="t", producer_id=pid,
                                             producer_epoch=epoch, committed=True)
        t.acls.allow(TXN, "*", Op.WRITE)
        t.acls.deny(TXN, "t", Op.WRITE)
        r = await t.call(ApiKey.END_TXN, version, body)
        assert r.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if version >= 5:
            assert (r.producer_id, r.producer_epoch) == (-1, -1)
        assert t.calls == [] and t.h.sender.calls == []
        assert t.h.state("t") is TransactionState.ONGOING
        t.acls.clear()
        t.acls.allow(TXN, "t", Op.WRITE)
        r = await t.call(ApiKey.END_TXN, version, body)
        assert r.error_code == E.NONE
        assert t.h.state("t") is TransactionState.COMPLETE_COMMIT
    t.run(run)


def test_describe_transactions(t: Txns) -> None:
    async def run() -> None:
        pid, epoch, _ = await t.h.init("t")
        await t.h.coordinator.handle_add_partitions("t", pid, epoch, [P0, ("secret", 1)])
        await t.h.init("hidden")
        t.acls.allow(TXN, "t", Op.DESCRIBE)
        t.acls.allow(TXN, "hidden", Op.WRITE)  # implies DESCRIBE, but:
        t.acls.deny(TXN, "hidden", Op.DESCRIBE)
        t.acls.allow(TOPIC, "events", Op.READ)  # implies DESCRIBE; "secret" not
        r = await t.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, describe_transactions_request.
                         DescribeTransactionsRequest(transactional_ids=["t", "hidden", "u"]))
        described, hidden, unknown = r.transaction_states
        assert (described.transactional_id, described.error_code,
                described.transaction_state, described.producer_id) == (
            "t", E.NONE, "Ongoing", pid)
        # Only the partitions of the topics it may describe.
        assert [(x.topic, x.partitions) for x in described.topics] == [("events", [0])]
        assert (hidden.transactional_id, hidden.error_code, hidden.transaction_state,
                hidden.producer_id, hidden.topics) == (
            "hidden", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", 0, [])
        assert (unknown.transactional_id, unknown.error_code) == (
            "u", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert t.calls.count("handle_describe_transactions") == 1
    t.run(run)


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions(t: Txns, version: int) -> None:
    async def run() -> None:
        for tid in ("app-1", "app-2", "other"):
            await t.h.init(tid)

        async def listed() -> list[str]:
            r = await t.call(ApiKey.LIST_TRANSACTIONS, version,
                             list_transactions_request.ListTransactionsRequest())
            assert r.error_code == E.NONE
            return sorted(x.transactional_id for x in r.transaction_states)

        assert await listed() == []
        t.acls.allow(CLUSTER, "kafka-cluster", Op.ALL)  # not the ids'
        assert await listed() == []
        t.acls.allow(TXN, "app-", Op.DESCRIBE, pattern=PREFIXED)
        assert await listed() == ["app-1", "app-2"]
        t.acls.deny(TXN, "app-2", Op.DESCRIBE)
        assert await listed() == ["app-1"]
    t.run(run)


# ---- DescribeProducers ------------------------------------------------------------------


def describe_producers(manager: ReplicaManager, auth: AuthHelper,
                       principal: KafkaPrincipal = ALICE) -> list[tuple[Any, ...]]:
    cache = MetadataCache(1, "cluster", topics={
        name: TopicMetadata(name, topic_id, {i: state() for i in range(2)})
        for name, topic_id in (("events", TOPIC_ID), ("secret", SECRET_ID))})
    handler = describe_producers_handler(manager, cache, auth=auth)
    header = RequestHeader(request_api_key=ApiKey.DESCRIBE_PRODUCERS, request_api_version=0,
                           client_id="tester")
    body = DescribeProducersRequest(topics=[
        TopicRequest(name=name, partition_indexes=ps)
        for name, ps in (("events", [0, 1]), ("secret", [0]), ("nope", [0]),
                         ("bad/name", [0]))])
    context = RequestContext(1, "127.0.0.1", 5555, "PLAINTEXT", header, principal)
    response = handler(Request(header, API_SPECS[ApiKey.DESCRIBE_PRODUCERS], body), context)
    return [(t.name, p.partition_index, p.error_code, p.error_message is not None,
             len(p.active_producers)) for t in response.topics for p in t.partitions]


def test_describe_producers(manager: ReplicaManager) -> None:
    manager.make_leader("secret", 0, SECRET_ID, state())
    manager.append_records(1, {("events", 0): batch(1, pid=4000),
                               ("secret", 0): batch(1, pid=5000)})
    acls = Acls()
    refused = (E.TOPIC_AUTHORIZATION_FAILED, True, 0)
    invalid = ("bad/name", 0, E.INVALID_TOPIC_EXCEPTION, True, 0)  # before authorization
    assert describe_producers(manager, acls.auth) == [
        ("events", 0, *refused), ("events", 1, *refused), ("secret", 0, *refused),
        ("nope", 0, *refused), invalid]
    acls.allow(TOPIC, "*", Op.READ)
    acls.deny(TOPIC, "secret", Op.READ)
    acls.allow(TOPIC, "secret", Op.DESCRIBE, Op.WRITE)  # not READ
    assert describe_producers(manager, acls.auth) == [
        ("events", 0, E.NONE, False, 1), ("events", 1, E.NONE, False, 0),
        ("secret", 0, *refused), ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION, False, 0),
        invalid]
    # Nothing for another principal's ACLs; all as before without an authorizer.
    assert describe_producers(manager, acls.auth, KafkaPrincipal.user("bob"))[0][2] == (
        E.TOPIC_AUTHORIZATION_FAILED)
    assert describe_producers(manager, ALLOW_ALL)[:3] == [
        ("events", 0, E.NONE, False, 1), ("events", 1, E.NONE, False, 0),
        ("secret", 0, E.NONE, False, 1)]
