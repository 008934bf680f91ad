"""GroupMetadata and MemberMetadata: one classic group's state, as Kafka keeps it.

A group moves between five states (Kafka's names and rules):

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable
      ^            ^    |                |                  |
      |            |    +--(no members)--|------------------|---> Empty
      |            +-----------------------------------------+    (a join, leave or expiry)
    Dead: after deletion, expiry of its last offset, or unloading; reachable from any state

- Empty: no members; the group may still hold committed offsets.
- PreparingRebalance: members are (re)joining; JoinGroup requests wait until all known
  members have rejoined or the rebalance timeout passes.
- CompletingRebalance: joins are answered (the leader got every member's subscription);
  waiting for the leader's assignment in SyncGroup.
- Stable: the assignment is out; members heartbeat.

The classes hold state and the bookkeeping that goes with it (who awaits a join or sync
answer, which protocols all members support); the decisions are GroupCoordinator's.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from odradek.coordinator.timer import Time, TimerTask
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from odradek.protocol.primitives import INT16

TopicPartition = tuple[str, int]
CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1  # -1: none given
    metadata: str = ""
    commit_timestamp: int = -1
    # Only from OffsetCommit v2-v4 with a retention time (or records Kafka wrote so):
    # such an offset expires at this time, whatever the group does.
    expire_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    member_id: str
    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[JoinGroupMember] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


class GroupStateError(Exception):
    """A transition the state machine does not allow: a bug, never a client's doing."""


@dataclass(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]  # (name, metadata), in preference order
    assignment: bytes = b""
    awaiting_join_callback: JoinCallback | None = None
    awaiting_sync_callback: SyncCallback | None = None
    # Joined but not yet through a completed join: a new member cannot heartbeat, so it
    # expires after the new-member join timeout instead of its session timeout.
    is_new: bool = False
    # Sessions: heartbeats move the deadline; one timer task checks it, due at
    # heartbeat_due, and rearms itself while the deadline lies ahead.
    heartbeat_deadline: int = 0
    heartbeat_task: TimerTask | None = None
    heartbeat_due: int = 0

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [
            (n, bytes(m)) for n, m in self.supported_protocols]

    def vote(self, candidates: set[str]) -> str:
        """This member's preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise GroupStateError(f"member {self.member_id} supports none of {candidates}")


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState, time: Time) -> None:
        self.group_id = group_id
        self.state = state
        self.time = time
        self.current_state_timestamp: int | None = time.milliseconds()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # KIP-394: member ids handed out by a JoinGroup answered MEMBER_ID_REQUIRED, not
        # yet used to join; the rebalance waits for them too. Their expiry timers:
        self.pending_members: dict[str, TimerTask | None] = {}
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self._supported_protocols: Counter[str] = Counter()
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # Where each committed offset's record sits in __consumer_offsets (the batch's base
        # offset), when known: a transaction's offsets replace a committed offset only if
        # their record came later (Kafka's CommitRecordMetadataAndOffset.olderThan).
        self.offset_positions: dict[TopicPartition, int] = {}
        # KIP-98: offsets a transactional producer committed (TxnOffsetCommit), written
        # but invisible until its transaction commits: producer id -> {partition:
        # (offset, position of its record)} (Kafka's pendingTransactionalOffsetCommits).
        self.pending_transactional_offsets: dict[
            int, dict[TopicPartition, tuple[OffsetAndMetadata, int]]] = {}
        self.new_member_added = False  # extends group.initial.rebalance.delay.ms
        self.subscribed_topics: set[str] | None = None  # None: not known
        # The coordinator's timers: the rebalance (DelayedJoin or InitialDelayedJoin)
        # and the wait for every member's SyncGroup (DelayedSync).
        self.join_task: TimerTask | None = None
        self.initial_join_delay: tuple[int, int] | None = None  # (delay ms, remaining ms)
        self.sync_task: TimerTask | None = None

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state}, generation "
                f"{self.generation_id}, {len(self.members)} members)")

    # ---- state ------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[state]:
            raise GroupStateError(f"group {self.group_id} cannot move to {state} from "
                                  f"{self.state}")
        self.state = state
        self.current_state_timestamp = self.time.milliseconds()

    @property
    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                              GroupState.EMPTY)

    # ---- members ----------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._supported_protocols.update(member.protocols())
        member.awaiting_join_callback = callback
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        self.remove_pending_member(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(member.protocols())
            # Whoever still waits for an answer gets one: the member is gone.
            self.maybe_invoke_join_callback(member, JoinGroupResult(
                UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
            self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            if (member.group_instance_id is not None
                    and self.static_members.get(member.group_instance_id) == member_id):
                del self.static_members[member.group_instance_id]
            if member.heartbeat_task is not None:
                member.heartbeat_task.cancel()
                member.heartbeat_task = None
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.remove_pending_member(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      callback: JoinCallback | None) -> None:
        self._supported_protocols.subtract(member.protocols())
        member.supported_protocols = protocols
        self._supported_protocols.update(member.protocols())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        previous = member.awaiting_join_callback
        member.awaiting_join_callback = callback
        if previous is not None and callback is not None:
            # A second JoinGroup of one member while the first waits (the client gave up
            # on the first, e.g. after a reconnect): the first is answered now, not never.
            previous(JoinGroupResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> MemberMetadata:
        member = self.members.pop(old_member_id)
        # Fence the old instance at once if it waits for an answer.
        self.maybe_invoke_join_callback(member, JoinGroupResult(
            old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def current_static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        current = self.current_static_member_id(group_instance_id)
        return current is not None and current != member_id

    def add_pending_member(self, member_id: str) -> None:
        self.pending_members[member_id] = None

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def remove_pending_member(self, member_id: str) -> None:
        task = self.pending_members.pop(member_id, None)
        if task is not None:
            task.cancel()

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keeps a leader that rejoined, or makes any rejoined member the leader; False
        when nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        joined = next((m for m in self.members.values() if m.is_awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_invoke_join_callback(self, member: MemberMetadata,
                                   result: JoinGroupResult) -> None:
        callback = member.awaiting_join_callback
        if callback is not None:
            member.awaiting_join_callback = None
            self.num_members_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata,
                                   result: SyncGroupResult) -> bool:
        callback = member.awaiting_sync_callback
        if callback is None:
            return False
        member.awaiting_sync_callback = None
        callback(result)
        return True

    # ---- protocols --------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols[p] == len(self.members) for p in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self._supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer; a tie goes to
        the one voted for first, in join order."""
        if not self.members:
            raise GroupStateError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])  # max keeps the first of equals

    def current_member_metadata(self) -> list[JoinGroupMember]:
        """What the leader receives: every member's metadata for the chosen protocol."""
        if self.protocol_name is None:
            raise GroupStateError(f"group {self.group_id} has no protocol selected")
        return [JoinGroupMember(m.member_id, m.group_instance_id,
                                m.metadata(self.protocol_name))
                for m in self.members.values()]

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """The topics consumers of the group subscribe to, from their subscriptions; None
        when not a consumer group or a subscription does not parse."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscription = parse_subscription(member.metadata(self.protocol_name))
            if subscription is None:
                return None
            topics.update(subscription.topics)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    # ---- offsets ----------------------------------------------------------------------

    def has_offsets(self) -> bool:
        """Committed offsets or pending transactional ones: either keeps an empty group
        alive (Kafka's hasOffsets)."""
        return bool(self.offsets) or bool(self.pending_transactional_offsets)

    def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                       position: int | None = None) -> None:
        """Offsets committed now, their record at `position` of the log (None: unknown)."""
        self.offsets.update(offsets)
        for tp in offsets:
            if position is None:
                self.offset_positions.pop(tp, None)
            else:
                self.offset_positions[tp] = position

    def remove_offsets(self, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Removes committed offsets. Pending transactional offsets stay: they belong to
        an open transaction and become the committed offset if it commits, as a reload
        of the log would make them (the tombstones come before the marker)."""
        removed = {}
        for tp in partitions:
            offset = self.offsets.pop(tp, None)
            self.offset_positions.pop(tp, None)
            if offset is not None:
                removed[tp] = offset
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        removed, self.offsets = self.offsets, {}
        self.offset_positions = {}
        return removed

    # Transactional offsets (KIP-98, KIP-447).

    def add_pending_txn_offsets(self, producer_id: int,
                                offsets: dict[TopicPartition, OffsetAndMetadata],
                                position: int) -> None:
        """Offsets of a producer's open transaction, written at `position` of the log
        (Kafka's prepareTxnOffsetCommit and onTxnOffsetCommitAppend)."""
        pending = self.pending_transactional_offsets.setdefault(producer_id, {})
        for tp, offset in offsets.items():
            pending[tp] = (offset, position)

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> None:
        """The producer's transaction ended: on commit its offsets become the committed
        ones (unless a commit written later in the log is there); on abort they go."""
        pending = self.pending_transactional_offsets.pop(producer_id, None)
        if not is_commit or not pending:
            return
        for tp, (offset, position) in pending.items():
            current = self.offset_positions.get(tp)
            if tp not in self.offsets or current is None or current < position:
                self.offsets[tp] = offset
                self.offset_positions[tp] = position

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self.pending_transactional_offsets

    def has_pending_offset_commits_for_partition(self, tp: TopicPartition) -> bool:
        return any(tp in pending for pending in self.pending_transactional_offsets.values())

    @property
    def active_producers(self) -> set[int]:
        return set(self.pending_transactional_offsets)

    def remove_expired_offsets(self, now: int, retention_ms: int
                               ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka's rules (KIP-211, KIP-496): an empty group's offsets expire once it has
        been empty for the retention; a stable consumer group's offsets of topics it no
        longer subscribes to, once that long after their commit; a group that never used
        group management (no protocol type), each offset that long after its commit. An
        offset committed with an explicit expire timestamp expires then."""
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            state_time = self.current_state_timestamp
            expired = self._expired(now, retention_ms, lambda o: (
                state_time if state_time is not None else o.commit_timestamp))
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.is_(GroupState.STABLE)):
            expired = self._expired(now, retention_ms, lambda o: o.commit_timestamp,
                                    self.subscribed_topics)
        elif self.protocol_type is None:
            expired = self._expired(now, retention_ms, lambda o: o.commit_timestamp)
        else:
            return {}
        return self.remove_offsets(expired)

    def _expired(self, now: int, retention_ms: int, base: Callable[[OffsetAndMetadata], int],
                 subscribed: set[str] | frozenset[str] = frozenset()) -> list[TopicPartition]:
        out = []
        for tp, offset in self.offsets.items():
            if tp[0] in subscribed or self.has_pending_offset_commits_for_partition(tp):
                # A partition with an open transaction's offset keeps its offset until
                # the transaction ends (as Kafka's new group coordinator).
                continue
            if offset.expire_timestamp is not None:
                if now >= offset.expire_timestamp:
                    out.append(tp)
            elif now - base(offset) >= retention_ms:
                out.append(tp)
        return out


def parse_subscription(metadata: bytes) -> ConsumerProtocolSubscription | None:
    """A consumer's subscription (its JoinGroup protocol metadata); None if it does not
    parse. Newer versions are read as the newest known, as Kafka's ConsumerProtocol does."""
    if len(metadata) < 2:
        return None
    (version,) = INT16.unpack_from(metadata, 0)
    if version < 0:
        return None
    try:
        subscription, _ = ConsumerProtocolSubscription.decode_from(
            metadata, 2, min(version, ConsumerProtocolSubscription.MAX_VERSION))
    except ProtocolError:
        return None
    return subscription
