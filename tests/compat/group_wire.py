"""Raw group requests over one connection (test_wire.py's Wire, Odradek's own codec), for
the group tests that need exact error codes or an observer independent of the clients:
OffsetCommit, OffsetFetch, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups.

The broker in these tests is alone, so it coordinates every group; a FindCoordinator
still goes first (once per connection), as clients send it: the first one creates
__consumer_offsets.
"""

from __future__ import annotations

import struct
from typing import Any

from test_wire import Wire

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    describe_groups_request,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    offset_commit_request,
    offset_fetch_request,
    sync_group_request,
)
from odradek.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from odradek.protocol.messages.consumer_protocol_assignment import (
    TopicPartition as AssignedPartitions,
)
from odradek.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)

TP = tuple[str, int]


def subscription(*topics: str) -> bytes:
    """A consumer's JoinGroup metadata: ConsumerProtocolSubscription v0, version-prefixed."""
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=list(topics)).encode(0)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """A consumer's SyncGroup assignment: ConsumerProtocolAssignment v0, version-prefixed."""
    return struct.pack(">h", 0) + ConsumerProtocolAssignment(assigned_partitions=[
        AssignedPartitions(topic=topic, partitions=partitions)]).encode(0)


class GroupWire:
    def __init__(self, port: int) -> None:
        self.wire = Wire(port)
        self.found = False

    def close(self) -> None:
        self.wire.close()

    def call(self, body: Any, version: int) -> Any:
        if not self.found:
            found: Any = self.wire.call(find_coordinator_request.FindCoordinatorRequest(
                key="any", key_type=0), 3)
            assert found.error_code == ErrorCode.NONE, ErrorCode(found.error_code).name
            self.found = True
        return self.wire.call(body, version)

    def commit(self, group: str, offsets: dict[TP, int | tuple[int, str | None]], *,
               member_id: str = "", generation: int = -1, instance_id: str | None = None,
               retention_ms: int = -1, version: int = 9) -> dict[TP, int]:
        """Commits the offsets (each an offset or (offset, metadata)); each one's error, in
        the request's order."""
        topics: dict[str, list[offset_commit_request.OffsetCommitRequestPartition]] = {}
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            topics.setdefault(topic, []).append(offset_commit_request.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset,
                committed_metadata=metadata))
        body = offset_commit_request.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id if version >= 7 else None,
            retention_time_ms=retention_ms, topics=[
                offset_commit_request.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()])
        response: Any = self.call(body, version)
        return {(t.name, p.partition_index): p.error_code
                for t in response.topics for p in t.partitions}

    def fetch(self, group: str, partitions: list[TP] | None = None
              ) -> dict[TP, tuple[int, str | None]]:
        """The group's committed offsets (all of them for None): (offset, metadata), -1
        for none. OffsetFetch v8."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = [offset_fetch_request.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]
        response: Any = self.call(offset_fetch_request.OffsetFetchRequest(groups=[
            offset_fetch_request.OffsetFetchRequestGroup(group_id=group, topics=topics)]), 8)
        [answer] = response.groups
        assert answer.error_code == ErrorCode.NONE, ErrorCode(answer.error_code).name
        out = {}
        for t in answer.topics:
            for p in t.partitions:
                assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code).name
                out[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
        return out

    def committed(self, group: str, partitions: list[TP]) -> dict[TP, int]:
        return {tp: offset for tp, (offset, _) in self.fetch(group, partitions).items()}

    def join(self, group: str, *, member_id: str = "", instance_id: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
             rebalance_ms: int = 10_000, protocol_type: str = "consumer",
             version: int = 9, follow: bool = True) -> Any:
        """JoinGroup; with `follow`, joins again with the member id a MEMBER_ID_REQUIRED
        answer hands out (KIP-394), as clients do."""
        body = join_group_request.JoinGroupRequest(
            group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[join_group_request.JoinGroupRequestProtocol(name=n, metadata=m)
                       for n, m in (protocols or [("range", subscription("events"))])])
        response: Any = self.call(body, version)
        if follow and response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            body.member_id = response.member_id
            response = self.call(body, version)
        return response

    def sync(self, group: str, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None, *, instance_id: str | None = None,
             protocol: str = "range") -> Any:
        return self.call(sync_group_request.SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance_id, protocol_type="consumer", protocol_name=protocol,
            assignments=[sync_group_request.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()]), 5)

    def heartbeat(self, group: str, member_id: str, generation: int,
                  instance_id: str | None = None) -> int:
        response: Any = self.call(heartbeat_request.HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance_id), 4)
        return int(response.error_code)

    def leave(self, group: str, member_id: str, version: int = 5) -> Any:
        if version >= 3:
            body = leave_group_request.LeaveGroupRequest(group_id=group, members=[
                leave_group_request.MemberIdentity(member_id=member_id)])
        else:
            body = leave_group_request.LeaveGroupRequest(group_id=group, member_id=member_id)
        return self.call(body, version)

    def loaded(self, group: str) -> bool:
        """Whether the coordinator has loaded the group's partition (after a start, its
        groups answer COORDINATOR_LOAD_IN_PROGRESS until then)."""
        return bool(self.describe(group).error_code == ErrorCode.NONE)

    def describe(self, group: str) -> Any:
        response: Any = self.call(
            describe_groups_request.DescribeGroupsRequest(groups=[group]), 5)
        [described] = response.groups
        return described
