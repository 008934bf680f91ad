"""GroupCoordinator's state machine, driven by a manual clock: joins, syncs, heartbeats,
leaves, session and rebalance timeouts, the initial rebalance delay, static membership
(KIP-345), member ids required on join (KIP-394), group.max.size, and the errors Kafka
gives for each wrong step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.groups import (
    DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    GroupHarness,
    subscription,
)

from odradek.coordinator.group.group_coordinator import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    GroupConfig,
    LeavingMember,
)
from odradek.coordinator.group.group_metadata import GroupState
from odradek.protocol.errors import ErrorCode

G = "group-a"
EVENTS = ("events", 0)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[GroupHarness]:
    harness = GroupHarness(tmp_path)
    yield harness
    harness.close()


# ---- joining and the first rebalance ----------------------------------------------------


def test_a_member_id_is_required_then_the_group_forms_after_the_initial_delay(
        h: GroupHarness) -> None:
    first = h.join(G, require_known_member_id=True)
    assert first.result.error == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.result.member_id
    assert member_id.startswith("client-")
    assert h.group(G).is_pending_member(member_id)

    join = h.join(G, member_id, require_known_member_id=True)
    assert not join.done and h.group(G).is_(GroupState.PREPARING_REBALANCE)
    h.advance(DELAY_MS - 1)
    assert not join.done  # the initial delay is waited out, not cut short
    h.advance(1)
    result = join.result
    assert result.error == ErrorCode.NONE and result.generation_id == 1
    assert result.leader_id == member_id and result.protocol_name == "range"
    assert [m.member_id for m in result.members] == [member_id]
    assert h.group(G).is_(GroupState.COMPLETING_REBALANCE)

    sync = h.sync(G, member_id, 1, {member_id: b"all of it"})
    assert sync.result.error == ErrorCode.NONE and sync.result.assignment == b"all of it"
    assert sync.result.protocol_type == "consumer" and sync.result.protocol_name == "range"
    assert h.group(G).is_(GroupState.STABLE)


def test_new_members_extend_the_initial_delay_up_to_the_rebalance_timeout(
        h: GroupHarness) -> None:
    a = h.join(G, rebalance_ms=7000)
    h.advance(DELAY_MS - 100)
    b = h.join(G, rebalance_ms=7000)  # a new member: one more delay
    h.advance(100)
    assert not a.done
    h.advance(DELAY_MS - 100)
    c = h.join(G, rebalance_ms=7000)  # another, but only 1 s of the 7 s remains
    h.advance(100)
    assert not a.done
    h.advance(1000)
    assert a.done and b.done and c.done
    assert {x.result.generation_id for x in (a, b, c)} == {1}


def test_the_leader_gets_every_subscription_and_followers_wait_for_its_assignment(
        h: GroupHarness) -> None:
    joins = [h.join(G, client_id=f"c{i}") for i in range(3)]
    h.settle(joins)
    results = [j.result for j in joins]
    leader = results[0].leader_id
    assert all(r.leader_id == leader for r in results)
    for r in results:
        assert len(r.members) == (3 if r.member_id == leader else 0)
    followers = [r.member_id for r in results if r.member_id != leader]
    waiting = [h.sync(G, m, 1) for m in followers]
    assert not any(w.done for w in waiting)
    assignment = {r.member_id: r.member_id.encode() for r in results}
    assert h.sync(G, leader, 1, assignment).result.assignment == leader.encode()
    for member_id, w in zip(followers, waiting, strict=True):
        assert w.result.error == ErrorCode.NONE and w.result.assignment == member_id.encode()


def test_the_protocol_is_one_every_member_supports_with_the_most_votes(h: GroupHarness) -> None:
    s = subscription("events")
    answers = [h.join(G, protocols=[("range", s), ("roundrobin", s), ("sticky", s)]),
               h.join(G, protocols=[("sticky", s), ("roundrobin", s)]),
               h.join(G, protocols=[("roundrobin", s), ("sticky", s)])]
    h.settle([*answers])
    # range is not common to all; roundrobin gets two first choices, sticky one.
    assert h.group(G).protocol_name == "roundrobin"


def test_inconsistent_protocols_and_bad_session_timeouts_are_refused(h: GroupHarness) -> None:
    h.form_group(G, 1)
    s = subscription("events")
    assert h.join(G, protocols=[("cooperative-sticky", s)]).result.error == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert h.join(G, protocol_type="connect").result.error == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert h.join("other", protocols=[]).result.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(G, session_ms=999).result.error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.join("", session_ms=SESSION_MS).result.error == ErrorCode.INVALID_GROUP_ID
    assert h.join(G, "who-is-this").result.error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join("no-such-group", "who").result.error == ErrorCode.UNKNOWN_MEMBER_ID


# ---- heartbeats and sessions ------------------------------------------------------------


def test_heartbeat_answers(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2)
    assert h.heartbeat(G, a, 1) == ErrorCode.NONE
    assert h.heartbeat(G, a, 0) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat(G, "stranger", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nobody", a, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", a, 1) == ErrorCode.INVALID_GROUP_ID
    h.join(G, a)  # a (the leader) rejoins: a rebalance begins
    assert h.heartbeat(G, b, 1) == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_member_that_stops_heartbeating_is_removed_and_the_others_rebalance(
        h: GroupHarness) -> None:
    a, b, c = h.form_group(G, 3)
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(G, a, 1) == ErrorCode.NONE
    assert h.heartbeat(G, b, 1) == ErrorCode.NONE
    h.advance(SESSION_MS // 2 - 1)
    assert h.group(G).has(c)
    h.advance(1)  # c's session ends; a's and b's heartbeats moved theirs on
    group = h.group(G)
    assert not group.has(c) and group.is_(GroupState.PREPARING_REBALANCE)
    assert h.heartbeat(G, a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    ja, jb = h.join(G, a), h.join(G, b)
    # Both known members rejoined: no waiting for the rebalance timeout.
    assert ja.result.generation_id == jb.result.generation_id == 2
    assert sorted(m.member_id for m in (ja.result.members or jb.result.members)) == sorted([a, b])


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(
        h: GroupHarness) -> None:
    a, b = h.form_group(G, 2, session_ms=2 * REBALANCE_MS)  # b's session outlasts it
    ja = h.join(G, a, rebalance_ms=REBALANCE_MS)
    h.advance(REBALANCE_MS - 1)
    assert not ja.done
    h.advance(1)
    assert ja.result.error == ErrorCode.NONE and ja.result.generation_id == 2
    assert [m.member_id for m in ja.result.members] == [a]
    assert not h.group(G).has(b)


def test_a_member_that_does_not_sync_in_time_is_removed(h: GroupHarness) -> None:
    joins = [h.join(G, session_ms=2 * REBALANCE_MS) for _ in range(2)]
    h.settle(joins)
    leader = joins[0].result.leader_id
    other = next(j.result.member_id for j in joins if j.result.member_id != leader)
    h.sync(G, leader, 1, {leader: b"x", other: b"y"})
    assert h.group(G).is_(GroupState.STABLE)
    h.advance(REBALANCE_MS)  # the other never sent its SyncGroup
    assert not h.group(G).has(other)
    assert h.group(G).is_(GroupState.PREPARING_REBALANCE)


def test_a_new_member_waiting_for_its_first_join_expires_after_the_new_member_timeout(
        tmp_path: Path) -> None:
    h = GroupHarness(tmp_path, group_config=GroupConfig(
        group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=DELAY_MS))
    try:
        a, _b = h.form_group(G, 2, session_ms=20 * 60_000)  # b stays, never rejoins
        ja = h.join(G, a, rebalance_ms=10 * 60_000)
        newcomer = h.join(G, rebalance_ms=10 * 60_000)
        h.advance(NEW_MEMBER_JOIN_TIMEOUT_MS)  # b never rejoins; the rebalance waits on
        assert newcomer.result.error == ErrorCode.UNKNOWN_MEMBER_ID
        assert not ja.done
    finally:
        h.close()


def test_a_pending_member_id_is_forgotten_after_the_session_timeout(h: GroupHarness) -> None:
    pending = h.join(G, require_known_member_id=True, session_ms=5000).result.member_id
    h.advance(5000)
    assert not h.group(G).is_pending_member(pending)
    assert h.join(G, pending).result.error == ErrorCode.UNKNOWN_MEMBER_ID


# ---- leaving ----------------------------------------------------------------------------


def test_leave_group_removes_members_one_by_one_or_in_a_batch(h: GroupHarness) -> None:
    a, b, c = h.form_group(G, 3)
    pending = h.join(G, require_known_member_id=True).result.member_id
    error, results = h.coordinator.handle_leave_group(G, [
        LeavingMember(a), LeavingMember(pending), LeavingMember("ghost"),
        LeavingMember(b, "not-its-instance")])
    assert error == ErrorCode.NONE
    assert [code for _, code in results] == [
        ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID]
    group = h.group(G)
    assert set(group.members) == {b, c} and group.is_(GroupState.PREPARING_REBALANCE)
    assert h.coordinator.handle_leave_group("nope", [LeavingMember(a)])[1][0][1] == (
        ErrorCode.UNKNOWN_MEMBER_ID)
    h.coordinator.handle_leave_group(G, [LeavingMember(b), LeavingMember(c)])
    h.advance(REBALANCE_MS)
    assert group.is_(GroupState.EMPTY) and group.generation_id == 2


# ---- static membership (KIP-345) --------------------------------------------------------


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance(
        h: GroupHarness) -> None:
    joins = [h.join(G, instance_id=f"instance-{i}", client_id=f"c{i}") for i in range(3)]
    h.settle(joins)
    ids = [j.result.member_id for j in joins]
    assert ids[1].startswith("instance-1-")
    leader = joins[0].result.leader_id
    assignment = {m: f"partitions of {m}".encode() for m in ids}
    for m in ids:
        h.sync(G, m, 1, assignment if m == leader else None,
               instance_id=f"instance-{ids.index(m)}")
    follower = next(i for i, m in enumerate(ids) if m != leader)
    # The follower's process restarts: a new JoinGroup with no member id, same instance.
    rejoin = h.join(G, instance_id=f"instance-{follower}")
    result = rejoin.result
    assert result.error == ErrorCode.NONE and result.generation_id == 1
    assert result.member_id != ids[follower] and result.members == []
    group = h.group(G)
    assert group.is_(GroupState.STABLE) and group.generation_id == 1
    sync = h.sync(G, result.member_id, 1, instance_id=f"instance-{follower}")
    assert sync.result.assignment == assignment[ids[follower]]
    # The old incarnation is fenced.
    assert h.heartbeat(G, ids[follower], 1, f"instance-{follower}") == (
        ErrorCode.FENCED_INSTANCE_ID)
    assert h.join(G, ids[follower], instance_id=f"instance-{follower}").result.error == (
        ErrorCode.FENCED_INSTANCE_ID)


def test_a_returning_static_leader_skips_assignment_on_v9_and_follows_before(
        h: GroupHarness) -> None:
    a = h.join(G, instance_id="a")
    h.settle([a])
    leader = a.result.member_id
    h.sync(G, leader, 1, {leader: b"all"}, instance_id="a")
    old = h.join(G, instance_id="a").result  # JoinGroup < v9
    assert old.leader_id == leader and old.member_id != leader and not old.members
    new = h.join(G, instance_id="a", skip_assignment=True).result  # v9+
    assert new.skip_assignment and new.leader_id == new.member_id and len(new.members) == 1
    assert h.group(G).generation_id == 1


def test_a_static_member_is_kept_through_a_rebalance_it_misses_until_it_fails_to_sync(
        h: GroupHarness) -> None:
    joins = [h.join(G, instance_id=f"s{i}", session_ms=2 * REBALANCE_MS) for i in range(2)]
    h.settle(joins)
    s0, s1 = (j.result.member_id for j in joins)
    leader = joins[0].result.leader_id
    for i, m in enumerate((s0, s1)):
        h.sync(G, m, 1, {s0: b"p0", s1: b"p1"} if m == leader else None, instance_id=f"s{i}")
    # s0 rejoins with a new subscription; s1's process is down.
    rejoin = h.join(G, s0, instance_id="s0", protocols=[("range", subscription("events", "x"))],
                    session_ms=2 * REBALANCE_MS)
    h.advance(REBALANCE_MS)
    assert rejoin.result.error == ErrorCode.NONE and rejoin.result.generation_id == 2
    group = h.group(G)
    assert group.has(s1)  # a dynamic member would be gone now
    h.sync(G, s0, 2, {s0: b"p0", s1: b"p1"}, instance_id="s0")
    h.advance(REBALANCE_MS)  # s1 never sends its SyncGroup
    assert not group.has(s1)


def test_leave_group_by_instance_id_removes_a_static_member(h: GroupHarness) -> None:
    a = h.join(G, instance_id="i")
    h.settle([a])
    _error, results = h.coordinator.handle_leave_group(G, [LeavingMember("", "i")])
    assert results[0][1] == ErrorCode.NONE and not h.group(G).has(a.result.member_id)


# ---- limits and commits -----------------------------------------------------------------


def test_group_max_size(tmp_path: Path) -> None:
    h = GroupHarness(tmp_path, group_config=GroupConfig(
        group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=DELAY_MS,
        group_max_size=2))
    try:
        h.form_group(G, 2)
        assert h.join(G).result.error == ErrorCode.GROUP_MAX_SIZE_REACHED
    finally:
        h.close()


def test_offset_commits_check_member_and_generation(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2)
    assert h.commit(G, {EVENTS: 5}, member_id=a, generation=1) == {EVENTS: ErrorCode.NONE}
    assert h.commit(G, {EVENTS: 6}, member_id=a, generation=0) == {
        EVENTS: ErrorCode.ILLEGAL_GENERATION}
    assert h.commit(G, {EVENTS: 6}, member_id="ghost", generation=1) == {
        EVENTS: ErrorCode.UNKNOWN_MEMBER_ID}
    # Without member id and generation only while the group is empty (reset tools).
    assert h.commit(G, {EVENTS: 6}) == {EVENTS: ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("unknown", {EVENTS: 1}, member_id="m", generation=3) == {
        EVENTS: ErrorCode.ILLEGAL_GENERATION}
    h.join(G, a)  # the leader rejoins: PreparingRebalance still takes commits
    assert h.commit(G, {EVENTS: 7}, member_id=b, generation=1) == {EVENTS: ErrorCode.NONE}
    h.join(G, b)
    assert h.group(G).is_(GroupState.COMPLETING_REBALANCE)
    assert h.commit(G, {EVENTS: 8}, member_id=b, generation=2) == {
        EVENTS: ErrorCode.REBALANCE_IN_PROGRESS}
    assert h.committed(G) == {EVENTS: 7}


def test_assign_consumers_commit_into_a_group_of_their_own(h: GroupHarness) -> None:
    assert h.commit("standalone", {EVENTS: 42}) == {EVENTS: ErrorCode.NONE}
    group = h.group("standalone")
    assert group.is_(GroupState.EMPTY) and group.protocol_type is None
    assert h.committed("standalone") == {EVENTS: 42}
    error, offsets = h.coordinator.handle_fetch_offsets("never", False, [EVENTS])
    assert error == ErrorCode.NONE and offsets[EVENTS].offset == -1


# ---- describe, list, delete -------------------------------------------------------------


def test_describe_list_and_delete_groups(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2)
    h.commit("empty", {EVENTS: 1})
    error, summary = h.coordinator.handle_describe_group(G)
    assert (error, summary.state, summary.protocol_type, summary.protocol) == (
        ErrorCode.NONE, "Stable", "consumer", "range")
    assert {m.member_id for m in summary.members} == {a, b}
    assert summary.members[0].client_host == "/127.0.0.1"
    assert summary.members[0].assignment.startswith(b"assignment of")
    assert h.coordinator.handle_describe_group("nope")[1].state == "Dead"

    error, groups = h.coordinator.handle_list_groups()
    assert {(g.group_id, g.state) for g in groups} == {(G, "Stable"), ("empty", "Empty")}
    assert [g.group_id for g in h.coordinator.handle_list_groups(["STABLE"])[1]] == [G]
    assert len(h.coordinator.handle_list_groups(types=["Classic"])[1]) == 2
    assert h.coordinator.handle_list_groups(types=["consumer"])[1] == []

    assert h.coordinator.handle_delete_groups([G, "empty", "nope", ""]) == {
        G: ErrorCode.NON_EMPTY_GROUP, "empty": ErrorCode.NONE,
        "nope": ErrorCode.GROUP_ID_NOT_FOUND, "": ErrorCode.GROUP_ID_NOT_FOUND}
    assert h.manager.get_group("empty") is None


def test_offset_delete_refuses_topics_a_stable_group_consumes(h: GroupHarness) -> None:
    a, _ = h.form_group(G, 2)
    h.commit(G, {EVENTS: 1, ("other", 0): 2}, member_id=a, generation=1)
    error, errors = h.coordinator.handle_delete_offsets(G, [EVENTS, ("other", 0)])
    assert error == ErrorCode.NONE
    assert errors == {EVENTS: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): ErrorCode.NONE}
    assert h.committed(G) == {EVENTS: 1}
    assert h.coordinator.handle_delete_offsets("nope", [EVENTS])[0] == (
        ErrorCode.GROUP_ID_NOT_FOUND)


# ---- coordinator status -----------------------------------------------------------------


def test_shutdown_answers_waiting_joins_and_syncs(h: GroupHarness) -> None:
    waiting = h.join(G)
    joins = [h.join("g2") for _ in range(2)]
    h.settle(joins)
    leader = joins[0].result.leader_id
    follower = next(j.result.member_id for j in joins if j.result.member_id != leader)
    sync = h.sync("g2", follower, 1)
    waiting2 = h.join(G)
    h.coordinator.shutdown()
    assert sync.result.error == ErrorCode.NOT_COORDINATOR
    assert waiting.done or waiting2.done
    for w in (waiting, waiting2):
        if w.done:
            assert w.result.error in (ErrorCode.NOT_COORDINATOR, ErrorCode.NONE)
    assert h.heartbeat(G, leader, 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.time.pending == 0  # no timer left behind


def test_groups_of_partitions_not_led_here_are_not_coordinated(h: GroupHarness) -> None:
    h.coordinator.on_resignation(h.coordinator.partition_for(G))
    assert h.join(G).result.error == ErrorCode.NOT_COORDINATOR
    assert h.commit(G, {EVENTS: 1}) == {EVENTS: ErrorCode.NOT_COORDINATOR}
