"""GroupCoordinator: the classic consumer group protocol (Kafka's GroupCoordinator).

JoinGroup, SyncGroup, Heartbeat and LeaveGroup drive each group's state machine
(group_metadata.py); offsets go through the GroupMetadataManager. JoinGroup and
SyncGroup answer later (when the rebalance completes, when the leader's assignment is
stored), so they take a callback; the other operations answer at once.

Timeouts, as Kafka keeps them (each a task on the injected Timer):
- a member's session: every heartbeat (and commit, join, sync) pushes its deadline
  session.timeout.ms ahead; a member whose deadline passes is removed, and the group
  rebalances, unless it is waiting in a rebalance (a JoinGroup or SyncGroup in flight).
  A new member waiting for its first join expires after NEW_MEMBER_JOIN_TIMEOUT_MS.
- the rebalance (DelayedJoin): PreparingRebalance completes as soon as every known member
  has rejoined, or after the largest rebalance timeout of the members; members that did
  not rejoin are then removed (static members are kept until their session expires).
- the first rebalance of an empty group (InitialDelayedJoin) waits
  group.initial.rebalance.delay.ms for more members, again as long as new ones keep
  coming, at most the rebalance timeout.
- the sync (DelayedSync): members that do not send SyncGroup within the rebalance timeout
  after the join completed are removed and the group rebalances again.
- a member id handed out with MEMBER_ID_REQUIRED (KIP-394) is forgotten after the
  session timeout unless it is used to join.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncCallback,
    SyncGroupResult,
    TopicPartition,
)
from odradek.coordinator.group.group_metadata_manager import (
    GroupMetadataManager,
    OffsetFetchResult,
)
from odradek.coordinator.timer import Time, Timer
from odradek.protocol.errors import ErrorCode
from odradek.server.config import BrokerConfig

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
CLASSIC_GROUP_TYPE = "classic"

# The APIs whose group id may be empty (offset storage and administration), as Kafka.
_EMPTY_GROUP_ID_ALLOWED = frozenset({"offset-commit", "offset-fetch", "describe-groups",
                                     "delete-groups"})


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's GroupConfig: the group settings."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 30 * 60 * 1000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            group_min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            group_initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            group_max_size=config.get("group.max.size"),
        )


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


EMPTY_GROUP = GroupSummary("", "", "", [])  # an error: no state to tell
DEAD_GROUP = GroupSummary(GroupState.DEAD.value, "", "", [])  # no such group


class GroupCoordinator:
    def __init__(self, config: GroupConfig, manager: GroupMetadataManager, time: Time,
                 timer: Timer) -> None:
        self.config = config
        self.manager = manager
        self.time = time
        self.timer = timer
        self.is_active = False

    # ---- lifecycle and partitions -----------------------------------------------------

    def startup(self, enable_metadata_expiration: bool = True) -> None:
        """Starts serving; loads the __consumer_offsets partitions this broker leads now
        and, through the ReplicaManager's leadership listener, those it comes to lead."""
        self.manager.startup(enable_metadata_expiration)
        self.is_active = True
        replica_manager = self.manager.replica_manager
        replica_manager.add_leadership_listener(self.on_leadership_change)
        for (topic, index), partition in list(replica_manager.partitions.items()):
            if topic == GROUP_METADATA_TOPIC and partition.is_leader:
                self.on_election(index)
        log.info("group coordinator started")

    def on_leadership_change(self, topic: str, partition_count: int, led: list[int],
                             resigned: list[int]) -> None:
        if topic != GROUP_METADATA_TOPIC or not self.is_active:
            return
        if led:
            # Fixed once the topic exists, whatever offsets.topic.num.partitions says now.
            self.manager.partition_count = partition_count
        for index in resigned:
            self.on_resignation(index)
        for index in led:
            self.on_election(index)

    def shutdown(self) -> None:
        """Answers every waiting JoinGroup and SyncGroup (NOT_COORDINATOR: the clients
        look for the coordinator again) and stops all timers."""
        self.is_active = False
        for group in self.manager.current_groups():
            self._on_group_unloaded(group)
        self.manager.shutdown()
        log.info("group coordinator stopped")

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    def on_election(self, partition: int, load_now: bool = False) -> None:
        """This broker now leads a __consumer_offsets partition: load its groups, step by
        step on the timer (at once with load_now, or when there is nothing to read)."""
        if load_now:
            self.manager.load_group_and_offsets(partition, self._on_group_loaded)
        else:
            self.manager.schedule_load_group_and_offsets(partition, self._on_group_loaded)

    def on_resignation(self, partition: int) -> None:
        self.manager.remove_groups_for_partition(partition, self._on_group_unloaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        log.info("loaded group %s with generation %d", group.group_id, group.generation_id)
        if group.size > self.config.group_max_size:
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity "
                                    f"(group.max.size={self.config.group_max_size})")
        for member in group.members.values():
            self._schedule_heartbeat_expiration(group, member)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD)
        self._cancel_join(group)
        self._remove_sync_expiration(group)
        for member_id in list(group.pending_members):
            group.remove_pending_member(member_id)
        if previous is not GroupState.DEAD:
            log.info("unloading group %s with generation %d", group.group_id,
                     group.generation_id)
        for member in group.members.values():
            if member.heartbeat_task is not None:
                member.heartbeat_task.cancel()
                member.heartbeat_task = None
            # The clients look for the coordinator again.
            group.maybe_invoke_join_callback(member, JoinGroupResult(
                member.member_id, ErrorCode.NOT_COORDINATOR))
            group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))

    # ---- checks -----------------------------------------------------------------------

    def _validate_group_status(self, group_id: str | None, api: str) -> int | None:
        if group_id is None or (not group_id and api not in _EMPTY_GROUP_ID_ALLOWED):
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    @staticmethod
    def _validate_current_member(group: GroupMetadata, member_id: str,
                                 group_instance_id: str | None, operation: str) -> int | None:
        """A static member must be the instance's current member id; any member must be
        known."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("%s: static member %s of group %s with instance id %s is fenced "
                         "by %s", operation, member_id, group.group_id, group_instance_id,
                         current)
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ---- JoinGroup --------------------------------------------------------------------

    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, support_skipping_assignment: bool,
                          client_id: str, client_host: str, rebalance_timeout_ms: int,
                          session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]], callback: JoinCallback,
                          reason: str | None = None) -> None:
        error = self._validate_group_status(group_id, "join-group")
        if error is not None:
            callback(JoinGroupResult(member_id, error))
            return
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            callback(JoinGroupResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_group(group_id)
        if group is None:
            if not is_unknown_member:
                callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = self.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, self.time))
        reason = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            removed = group.remove(member_id)
            if removed is not None:
                self._rebalance_after_removal(group, "a member over group.max.size left")
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown_member:
            self._do_new_member_join_group(
                group, group_instance_id, require_known_member_id, support_skipping_assignment,
                client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols, callback, reason)
        else:
            self._do_current_member_join_group(
                group, member_id, group_instance_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback,
                reason)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._check_and_complete_join(group)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        limit = self.config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < limit)
        return group.has(member_id) or group.size < limit

    def _do_new_member_join_group(
            self, group: GroupMetadata, group_instance_id: str | None,
            require_known_member_id: bool, support_skipping_assignment: bool, client_id: str,
            client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
            protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
            reason: str) -> None:
        if group.is_(GroupState.DEAD):
            # Unloaded or deleted meanwhile: the member looks for the coordinator again.
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info("static member with instance id %s joins group %s in state %s: "
                         "it replaces member %s", group_instance_id, group.group_id,
                         group.state, old_member_id)
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, group_instance_id, protocols,
                    rebalance_timeout_ms, session_timeout_ms, callback, reason,
                    support_skipping_assignment)
                return
            self._add_member_and_rebalance(
                group, new_member_id, group_instance_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback,
                reason)
        elif require_known_member_id:
            # KIP-394: the member gets its id first and joins with it, so a client that
            # times out and retries does not leave a ghost member behind.
            group.add_pending_member(new_member_id)
            group.pending_members[new_member_id] = self.timer.schedule(
                session_timeout_ms,
                lambda: self._on_pending_member_expired(group, new_member_id))
            callback(JoinGroupResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(
                group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, callback, reason)

    def _do_current_member_join_group(
            self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
            client_id: str, client_host: str, rebalance_timeout_ms: int,
            session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
            callback: JoinCallback, reason: str) -> None:
        if group.is_(GroupState.DEAD):
            callback(JoinGroupResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinGroupResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:  # pending members are never static
                callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            self._add_member_and_rebalance(
                group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, callback, reason)
            return
        if group.is_static_member_fenced(group_instance_id, member_id):
            callback(JoinGroupResult(member_id, ErrorCode.FENCED_INSTANCE_ID))
            return
        if not group.has(member_id) or (group_instance_id is not None
                                        and not group.has_static_member(group_instance_id)):
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, callback,
                f"member {member_id} joining during {state}; client reason: {reason}")
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member did not get its JoinGroup answer: the same answer again.
                callback(self._join_result(group, member, group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    callback, f"metadata of member {member_id} changed during {state}; "
                    f"client reason: {reason}")
        elif state is GroupState.STABLE:
            if group.is_leader(member_id):
                # A leader rejoins to have the group reassigned (e.g. topic metadata
                # changed): always a rebalance.
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    callback, f"leader {member_id} re-joining group during {state}; "
                    f"client reason: {reason}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    callback, f"metadata of member {member_id} changed during {state}; "
                    f"client reason: {reason}")
            else:
                # A follower with nothing new: the current generation, for its SyncGroup.
                callback(self._join_result(group, member, False))
        else:  # Empty: the member should not be here; it resets and joins anew
            log.warning("member %s joins group %s in state %s with a member id: unknown",
                        member_id, group.group_id, state)
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    @staticmethod
    def _join_result(group: GroupMetadata, member: MemberMetadata, with_members: bool,
                     skip_assignment: bool = False, leader_id: str | None = None
                     ) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member.member_id, error=ErrorCode.NONE,
            generation_id=group.generation_id, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(group.leader_id if leader_id is None else leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata() if with_members else [])

    def _add_member_and_rebalance(
            self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
            client_id: str, client_host: str, rebalance_timeout_ms: int,
            session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
            callback: JoinCallback, reason: str) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                list(protocols), is_new=True)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # the initial delay waits a little longer
        group.add(member, callback)
        # A new member cannot heartbeat before its join completes; if the client gives up
        # and retries, this keeps its ghost from holding the rebalance forever.
        self._schedule_heartbeat_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group, f"adding new member {member_id} with group instance id "
            f"{group_instance_id}; client reason: {reason}")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]],
                                     rebalance_timeout_ms: int, session_timeout_ms: int,
                                     callback: JoinCallback, reason: str) -> None:
        group.update_member(member, list(protocols), rebalance_timeout_ms, session_timeout_ms,
                            callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(
            self, group: GroupMetadata, old_member_id: str, new_member_id: str,
            group_instance_id: str, protocols: list[tuple[str, bytes]],
            rebalance_timeout_ms: int, session_timeout_ms: int, callback: JoinCallback,
            reason: str, support_skipping_assignment: bool) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        self._schedule_heartbeat_expiration(group, member)
        old_protocols = member.supported_protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.update_member(member, list(protocols), rebalance_timeout_ms, session_timeout_ms,
                            callback)
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance(
                    group, f"static member {new_member_id} with instance id "
                    f"{group_instance_id} changes the group's protocol; client reason: "
                    f"{reason}")
                return
            # KIP-345: a restarted static member takes its old place, and its old
            # assignment, without a rebalance; its new member id is stored.
            error = self.manager.store_group(
                group, {m.member_id: m.assignment for m in group.members.values()})
            if error != ErrorCode.NONE:
                log.warning("failed to store group %s after static member %s rejoined: %s",
                            group.group_id, group_instance_id, ErrorCode(error).name)
                group.update_member(member, old_protocols, old_rebalance_timeout,
                                    old_session_timeout, None)
                old = group.replace_static_member(group_instance_id, new_member_id,
                                                  old_member_id)
                self._schedule_heartbeat_expiration(group, old)
                callback(JoinGroupResult(
                    UNKNOWN_MEMBER_ID, error, group.generation_id, group.protocol_type,
                    group.protocol_name, current_leader or ""))
            elif support_skipping_assignment:
                # JoinGroup v9+: the leader learns it leads but does not assign again
                # (KIP-814), so it keeps watching metadata without moving partitions.
                is_leader = group.is_leader(new_member_id)
                group.maybe_invoke_join_callback(member, self._join_result(
                    group, member, is_leader, skip_assignment=is_leader))
            else:
                # Older versions: the old leader id, so a returning leader acts as a
                # follower and does not assign again while the group is stable.
                group.maybe_invoke_join_callback(member, self._join_result(
                    group, member, False, leader_id=current_leader or ""))
        elif state is GroupState.COMPLETING_REBALANCE:
            self._maybe_prepare_rebalance(
                group, f"metadata of static member {new_member_id} with instance id "
                f"{group_instance_id} updated; client reason: {reason}")
        elif state is GroupState.PREPARING_REBALANCE:
            pass  # it waits for the rebalance with the others
        else:  # a group with a static member is never Empty or Dead
            log.error("static member %s rejoined group %s in unexpected state %s",
                      group_instance_id, group.group_id, state)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting for their assignment rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s with old generation %d (%s): %s",
                 group.group_id, group.generation_id, self._where(group), reason)
        if was_empty:
            delay = self.config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(
                group, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms)

    def _where(self, group: GroupMetadata) -> str:
        return f"__consumer_offsets-{self.partition_for(group.group_id)}"

    # The rebalance timers: DelayedJoin and InitialDelayedJoin.

    def _cancel_join(self, group: GroupMetadata) -> None:
        if group.join_task is not None:
            group.join_task.cancel()
            group.join_task = None
        group.initial_join_delay = None

    def _schedule_join(self, group: GroupMetadata, timeout_ms: int) -> None:
        self._cancel_join(group)
        if group.has_all_members_joined():
            self._on_complete_join(group)
            return
        group.join_task = self.timer.schedule(timeout_ms, lambda: self._on_join_expired(group))

    def _schedule_initial_join(self, group: GroupMetadata, delay_ms: int,
                               remaining_ms: int) -> None:
        self._cancel_join(group)
        group.initial_join_delay = (delay_ms, remaining_ms)
        group.join_task = self.timer.schedule(delay_ms, lambda: self._on_join_expired(group))

    def _check_and_complete_join(self, group: GroupMetadata) -> None:
        # The initial delay is never cut short: it waits for more members by design.
        if (group.join_task is not None and group.initial_join_delay is None
                and group.has_all_members_joined()):
            self._cancel_join(group)
            self._on_complete_join(group)

    def _on_join_expired(self, group: GroupMetadata) -> None:
        group.join_task = None
        initial = group.initial_join_delay
        group.initial_join_delay = None
        if initial is not None:
            delay, remaining = initial
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                configured = self.config.group_initial_rebalance_delay_ms
                self._schedule_initial_join(group, min(configured, remaining),
                                            max(remaining - delay, 0))
                return
        self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined_members():
            if not member.is_static_member:
                log.info("group %s removes member %s, which did not rejoin in time",
                         group.group_id, member.member_id)
                group.remove(member.member_id)
        if group.is_(GroupState.DEAD):
            log.info("group %s is dead, skipping rebalance stage", group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined: wait another round; their
            # sessions will expire if they never come back.
            log.error("group %s could not complete rebalance because no members rejoined",
                      group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms)
            return
        group.init_next_generation()
        if group.is_(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty (%s)", group.group_id,
                     group.generation_id, self._where(group))
            error = self.manager.store_group(group, {})
            if error != ErrorCode.NONE:
                # The previous generation comes back after a restart and times out:
                # harmless for a group without members.
                log.warning("failed to write empty metadata for group %s: %s",
                            group.group_id, ErrorCode(error).name)
            return
        log.info("stabilized group %s generation %d (%s) with %d members", group.group_id,
                 group.generation_id, self._where(group), group.size)
        for member in list(group.members.values()):
            result = self._join_result(group, member, group.is_leader(member.member_id))
            group.maybe_invoke_join_callback(member, result)
            self._schedule_heartbeat_expiration(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    # The wait for every member's SyncGroup: DelayedSync.

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self._remove_sync_expiration(group)
        generation = group.generation_id
        group.sync_task = self.timer.schedule(
            group.rebalance_timeout_ms, lambda: self._on_expire_pending_sync(group, generation))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        if group.sync_task is not None:
            group.sync_task.cancel()
            group.sync_task = None

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._remove_sync_expiration(group)

    def _on_expire_pending_sync(self, group: GroupMetadata, generation: int) -> None:
        group.sync_task = None
        if generation != group.generation_id or group.state not in (
                GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.pending_sync_members:
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                group.remove(member_id)
            log.info("group %s removes members %s, which sent no SyncGroup in time",
                     group.group_id, pending)
            self._prepare_rebalance(group, f"removing {pending} on pending sync request "
                                    "expiration")

    # ---- SyncGroup --------------------------------------------------------------------

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          protocol_type: str | None, protocol_name: str | None,
                          group_instance_id: str | None, assignment: dict[str, bytes],
                          callback: SyncCallback) -> None:
        error = self._validate_group_status(group_id, "sync-group")
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state was lost with the partition: the member rejoins, no
            # need to look for the coordinator (older clients do not expect this error).
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        if error is not None:
            callback(SyncGroupResult(error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync_group(group, generation_id, member_id, protocol_type,
                                          protocol_name, group_instance_id)
        if error is not None:
            callback(SyncGroupResult(error))
            return
        state = group.state
        if state is GroupState.EMPTY:
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif state is GroupState.PREPARING_REBALANCE:
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif state is GroupState.COMPLETING_REBALANCE:
            member = group.get(member_id)
            previous = member.awaiting_sync_callback
            member.awaiting_sync_callback = callback
            if previous is not None:  # a retry while the first waits
                previous(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._complete_assignment(group, member_id, assignment)
        elif state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncGroupResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                                     member.assignment))
            self._schedule_heartbeat_expiration(group, member)

    def _complete_assignment(self, group: GroupMetadata, leader_id: str,
                             assignment: dict[str, bytes]) -> None:
        log.info("assignment received from leader %s for group %s for generation %d: %d "
                 "members, %d of them static", leader_id, group.group_id, group.generation_id,
                 group.size, len(group.static_members))
        missing = [m for m in group.members if m not in assignment]
        if missing:
            log.warning("setting empty assignments for members %s of group %s for generation "
                        "%d", missing, group.group_id, group.generation_id)
        full = {m: bytes(assignment.get(m, b"")) for m in group.members}
        generation = group.generation_id
        error = self.manager.store_group(group, full)
        if not (group.is_(GroupState.COMPLETING_REBALANCE)
                and group.generation_id == generation):
            return  # the group moved on while the write went out
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(
                group, f"error storing group assignment during SyncGroup (member {leader_id})")
            return
        for member_id, member in group.members.items():
            member.assignment = full[member_id]
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE)

    def _validate_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str,
                             protocol_type: str | None, protocol_name: str | None,
                             group_instance_id: str | None) -> int | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id,
                                              "sync-group")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ok = error == ErrorCode.NONE
        for member in group.members.values():
            result = SyncGroupResult(
                error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # Sessions restart now: one that lapsed while the member waited for the
                # leader or the write was not counted.
                self._schedule_heartbeat_expiration(group, member)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    # ---- Heartbeat --------------------------------------------------------------------

    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> int:
        error = self._validate_group_status(group_id, "heartbeat")
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # the group is loading: answer blindly, as Kafka does
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat_expiration(group, group.get(member_id))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # Sessions: one timer per member, checking a deadline that heartbeats move.

    def _schedule_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata,
                                       timeout_ms: int | None = None) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline = self.time.milliseconds() + timeout
        if member.heartbeat_task is not None:
            if member.heartbeat_due <= member.heartbeat_deadline:
                return  # the pending check fires first and rearms itself
            member.heartbeat_task.cancel()
        self._arm_heartbeat_check(group, member, timeout)

    def _arm_heartbeat_check(self, group: GroupMetadata, member: MemberMetadata,
                             delay_ms: int) -> None:
        member.heartbeat_due = self.time.milliseconds() + delay_ms
        member.heartbeat_task = self.timer.schedule(
            delay_ms, lambda: self._on_heartbeat_check(group, member))

    def _on_heartbeat_check(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_task = None
        if group.is_(GroupState.DEAD) or group.members.get(member.member_id) is not member:
            return  # the member left, or the group was unloaded
        now = self.time.milliseconds()
        if now < member.heartbeat_deadline:
            self._arm_heartbeat_check(group, member, member.heartbeat_deadline - now)
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return  # waiting in a rebalance counts as alive; the rebalance rearms this
        log.info("member %s in group %s has failed (session timeout), removing it from the "
                 "group", member.member_id, group.group_id)
        self._remove_member_and_update_group(
            group, member, f"removing member {member.member_id} on heartbeat expiration")

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        if group.is_(GroupState.DEAD) or not group.is_pending_member(member_id):
            return
        log.info("pending member %s in group %s has been removed after session timeout "
                 "expiration", member_id, group.group_id)
        group.pending_members.pop(member_id, None)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._check_and_complete_join(group)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata,
                                        reason: str) -> None:
        # A new member may be waiting in JoinGroup: its request fails (remove answers it).
        group.remove(member.member_id)
        self._rebalance_after_removal(group, reason)

    def _rebalance_after_removal(self, group: GroupMetadata, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._check_and_complete_join(group)

    # ---- LeaveGroup -------------------------------------------------------------------

    def handle_leave_group(self, group_id: str, leaving: list[LeavingMember]
                           ) -> tuple[int, list[tuple[LeavingMember, int]]]:
        """The top-level error and each leaving member's."""
        error = self._validate_group_status(group_id, "leave-group")
        if error is not None:
            return error, []
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, ErrorCode.UNKNOWN_MEMBER_ID) for m in leaving]
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[LeavingMember, int]] = []
        for m in leaving:
            reason = m.reason or "not provided"
            if m.member_id == UNKNOWN_MEMBER_ID:
                # An administrator removes a static member by its instance id (KIP-345).
                current = group.current_static_member_id(m.group_instance_id)
                if current is None:
                    results.append((m, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                self._remove_current_member(group, current, reason)
                results.append((m, ErrorCode.NONE))
            elif group.is_pending_member(m.member_id):
                group.remove_pending_member(m.member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._check_and_complete_join(group)
                log.info("pending member %s has left group %s through LeaveGroup; client "
                         "reason: %s", m.member_id, group_id, reason)
                results.append((m, ErrorCode.NONE))
            else:
                error = self._validate_current_member(group, m.member_id, m.group_instance_id,
                                                      "leave-group")
                if error is None:
                    self._remove_current_member(group, m.member_id, reason)
                    error = ErrorCode.NONE
                results.append((m, error))
        return ErrorCode.NONE, results

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}")
        log.info("member %s has left group %s through LeaveGroup; client reason: %s",
                 member_id, group.group_id, reason)

    # ---- offsets ----------------------------------------------------------------------

    def handle_commit_offsets(self, group_id: str, member_id: str,
                              group_instance_id: str | None, generation_id: int,
                              offsets: dict[TopicPartition, OffsetAndMetadata]
                              ) -> dict[TopicPartition, int]:
        error = self._validate_group_status(group_id, "offset-commit")
        if error is not None:
            return {tp: error for tp in offsets}
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator does not know: refused.
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
            # No group management (assign() and commit): the group only stores offsets.
            group = self.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, self.time))
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return {tp: error for tp in offsets}
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE:
            # A member of the new generation that has not synced yet: it should rejoin.
            return {tp: ErrorCode.REBALANCE_IN_PROGRESS for tp in offsets}
        if state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Commits go on during PreparingRebalance: heartbeats tell the members.
            self._schedule_heartbeat_expiration(group, group.get(member_id))
        return self.manager.store_offsets(group, offsets)

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None) -> int | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if (generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID
                or group_instance_id is not None):
            error = self._validate_current_member(group, member_id, group_instance_id,
                                                  "offset-commit")
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not group.is_(GroupState.EMPTY):
            # Only members commit for a group with members (e.g. a reset-offsets tool
            # waits until the group is empty).
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                  member_id: str, group_instance_id: str | None,
                                  generation_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata]
                                  ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit (KIP-98): the offsets are written as the producer's
        transactional batch and stay pending until its transaction ends. From v3 the
        client sends its member id, generation and instance id (KIP-447), checked as an
        offset commit's are, except that a group with members accepts a commit that
        names none (older clients send none)."""
        error = self._validate_group_status(group_id, "txn-offset-commit")
        if error is not None:
            return {tp: error for tp in offsets}
        group = self.manager.get_group(group_id)
        if group is None:
            group = self.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, self.time))
        error = self._validate_txn_offset_commit(group, generation_id, member_id,
                                                 group_instance_id)
        if error is not None:
            return {tp: error for tp in offsets}
        return self.manager.store_offsets(group, offsets, producer_id, producer_epoch)

    def _validate_txn_offset_commit(self, group: GroupMetadata, generation_id: int,
                                    member_id: str, group_instance_id: str | None
                                    ) -> int | None:
        """Kafka 3.9's validateOffsetCommit with isTransactional."""
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # no group management: an Empty group takes the commit
        if (generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID
                or group_instance_id is not None):
            error = self._validate_current_member(group, member_id, group_instance_id,
                                                  "txn-offset-commit")
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        return None

    def on_transaction_completed(self, producer_id: int, partitions: list[TopicPartition],
                                 committed: bool) -> None:
        """A COMMIT (committed) or ABORT marker of the producer was written to these
        partitions of __consumer_offsets (and replicated): the producer's pending
        offsets in their groups become committed, or are dropped (Kafka's
        onTransactionCompleted). txn_markers.TransactionCompletedListener's signature."""
        offsets_partitions = [index for topic, index in partitions
                              if topic == GROUP_METADATA_TOPIC]
        if offsets_partitions:
            self.manager.handle_txn_completion(producer_id, offsets_partitions, committed)

    def handle_fetch_offsets(self, group_id: str, require_stable: bool,
                             partitions: list[TopicPartition] | None
                             ) -> tuple[int, dict[TopicPartition, OffsetFetchResult]]:
        error = self._validate_group_status(group_id, "offset-fetch")
        if error is not None:
            return error, {}
        # Whatever the group's state: it may use Kafka only to store offsets.
        return ErrorCode.NONE, self.manager.get_offsets(group_id, require_stable, partitions)

    def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                              ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: the group error, else each partition's."""
        error = self._validate_group_status(group_id, "offset-delete")
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        errors: dict[TopicPartition, int] = {}
        if group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions
                      if group.is_subscribed_to_topic(tp[0])}
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            removed = self.manager.cleanup_group_metadata(
                [group], lambda g: g.remove_offsets(eligible))
            log.info("deleted %d offsets of group %s", removed, group_id)
            errors.update({tp: ErrorCode.NONE for tp in eligible})
        return ErrorCode.NONE, errors

    # ---- DescribeGroups, ListGroups, DeleteGroups --------------------------------------

    def handle_describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        error = self._validate_group_status(group_id, "describe-groups")
        if error is not None:
            return error, EMPTY_GROUP
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.NONE, DEAD_GROUP
        return ErrorCode.NONE, summary(group)

    def handle_list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()
                           ) -> tuple[int, list[GroupOverview]]:
        """Groups of the partitions loaded here; COORDINATOR_LOAD_IN_PROGRESS (with those
        groups) while some partition still loads. Filters match case-insensitively; a type
        filter without "classic" matches nothing, as Kafka's other types do not exist here."""
        if not self.is_active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading()
                 else ErrorCode.NONE)
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
            return error, []
        overviews = [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.manager.current_groups()
            if not wanted_states or g.state.value.lower() in wanted_states
        ]
        return error, overviews

    def handle_delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self._validate_group_status(group_id, "delete-groups")
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_(GroupState.DEAD):
                errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.is_(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if eligible:
            removed = self.manager.cleanup_group_metadata(
                eligible, lambda g: g.remove_all_offsets())
            for group in eligible:
                errors[group.group_id] = ErrorCode.NONE
            log.info("deleted groups %s and their %d offsets",
                     [g.group_id for g in eligible], removed)
        return errors


def summary(group: GroupMetadata) -> GroupSummary:
    """DescribeGroups' view: members' metadata and assignments only once Stable."""
    if group.is_(GroupState.STABLE) and group.protocol_name is not None:
        protocol = group.protocol_name
        members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.metadata(protocol), m.assignment)
                   for m in group.members.values()]
        return GroupSummary(group.state.value, group.protocol_type or "", protocol, members)
    members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             b"", b"") for m in group.members.values()]
    return GroupSummary(group.state.value, group.protocol_type or "", "", members)
