"""Random sequences of joins, syncs, heartbeats, commits, leaves and clock moves against
one group: whatever happens, every JoinGroup and SyncGroup is answered exactly once (by
shutdown at the latest), the bookkeeping of who waits stays exact, generations only go
up, and a Stable group's members each have an assignment the leader gave."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.groups import Answer, GroupHarness

from odradek.coordinator.group.group_metadata import GroupState

G = "prop"
ops = st.lists(st.tuples(
    st.sampled_from(["join_new", "join_static", "rejoin", "sync", "heartbeat", "commit",
                     "leave", "advance"]),
    st.integers(0, 7), st.integers(0, 40_000)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_every_request_is_answered_once_and_the_books_stay_exact(
        steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        h = GroupHarness(Path(d), partitions=1)
        answers: list[Answer[Any]] = []
        known: list[str] = []  # member ids handed out
        generation = 0
        for op, pick, ms in steps:
            member = known[pick % len(known)] if known else ""
            group = h.manager.get_group(G)
            gen = group.generation_id if group else 0
            if op == "join_new":
                answers.append(h.join(G, session_ms=5000 + ms % 20_000, rebalance_ms=15_000))
            elif op == "join_static":
                answers.append(h.join(G, instance_id=f"i{pick % 3}", rebalance_ms=15_000))
            elif op == "rejoin" and member:
                answers.append(h.join(G, member, rebalance_ms=15_000))
            elif op == "sync" and member and group is not None:
                assignment = {m: m.encode() for m in group.members}
                answers.append(h.sync(G, member, gen, assignment, instance_id=next(
                    (i for i, m in group.static_members.items() if m == member), None)))
            elif op == "heartbeat" and member:
                h.heartbeat(G, member, gen)
            elif op == "commit":
                h.commit(G, {("events", pick % 6): ms}, member_id=member, generation=gen)
            elif op == "leave" and member:
                from odradek.coordinator.group.group_coordinator import LeavingMember
                h.coordinator.handle_leave_group(G, [LeavingMember(member)])
            elif op == "advance":
                h.advance(ms)
            for a in answers:
                assert len(a.results) <= 1
                member_id = getattr(a.results[0], "member_id", "") if a.done else ""
                if member_id and member_id not in known:
                    known.append(member_id)
            group = h.manager.get_group(G)
            if group is not None:
                assert group.generation_id >= generation
                generation = group.generation_id
                assert group.num_members_awaiting_join == sum(
                    m.is_awaiting_join for m in group.members.values())
                assert set(group.static_members.values()) <= set(group.members)
                if group.is_(GroupState.STABLE):
                    assert not any(m.is_awaiting_join for m in group.members.values())
                    assert all(m.assignment == m.member_id.encode()
                               for m in group.members.values())
        h.close()
        assert all(len(a.results) == 1 for a in answers), [a for a in answers if not a.done]
        assert h.time.pending == 0
