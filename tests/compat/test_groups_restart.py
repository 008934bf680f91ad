"""Groups across broker restarts, beyond what test_groups.py covers (committed offsets with
their metadata after SIGTERM and SIGKILL, a static member returning after SIGKILL):

- a live group of dynamic and static members of all three clients carries on through a
  restart, SIGTERM or SIGKILL, without a rebalance: none on the broker, no rebalance
  callback in any client, the same members with the same assignments;
- an empty group keeps its metadata: its protocol type, and its generation, which the
  next rebalance continues;
- a commit acknowledged just before a SIGKILL is there after the restart: commits are
  written before they are acknowledged.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from group_wire import GroupWire, assignment, subscription
from support.broker import BrokerProcess
from test_groups import SETTINGS, Member, create_topic, spread, wait_for

from odradek.protocol.errors import ErrorCode

SESSION_MS = 10_000  # room for a restart under load; the test waits it out


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", SETTINGS).start()
    yield process
    process.kill()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        if m.process.poll() is None:
            m.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_live_group_carries_on_through_a_broker_restart_without_a_rebalance(
        broker: BrokerProcess, members: list[Member], sig: int) -> None:
    topic = group = "carries-on"
    create_topic(broker, topic)
    for library, options in [("confluent-kafka", {}), ("kafka-python", {"instance_id": "kp"}),
                             ("aiokafka", {})]:
        members.append(Member(library, broker, topic, group, session_ms=SESSION_MS,
                              **options))
    wait_for(lambda: spread(members, [2, 2, 2]), "three members with two partitions each")
    observer = GroupWire(broker.port)
    before = observer.describe(group)
    observer.close()
    assert before.group_state == "Stable"
    events = [len(m.events) for m in members]

    broker.stop(sig)
    broker.start()
    restarted = time.monotonic()
    wire = GroupWire(broker.port)
    try:
        wait_for(lambda: wire.loaded(group), "the group to load")
        # Past every session the load started: had a member not come back and
        # heartbeated, it would have been removed and the group would rebalance.
        while time.monotonic() - restarted < SESSION_MS / 1000 + 1:
            time.sleep(0.2)
        after = wire.describe(group)
    finally:
        wire.close()
    assert "preparing to rebalance group" not in broker.log_text()
    assert after.group_state == "Stable"
    assert [(m.member_id, m.group_instance_id, bytes(m.member_assignment))
            for m in after.members] == [
        (m.member_id, m.group_instance_id, bytes(m.member_assignment)) for m in before.members]
    assert [len(m.events) for m in members] == events  # no member saw a rebalance
    assert all(m.process.poll() is None for m in members)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_an_empty_group_keeps_its_metadata_and_generation_across_a_restart(
        broker: BrokerProcess, sig: int) -> None:
    topic = group = "empty-but-known"
    create_topic(broker, topic, 2)
    wire = GroupWire(broker.port)
    joined = wire.join(group, protocols=[("roundrobin", subscription(topic))])
    member, generation = joined.member_id, joined.generation_id
    assert wire.sync(group, member, generation, {member: assignment(topic, [0, 1])},
                     protocol="roundrobin").error_code == ErrorCode.NONE
    assert wire.commit(group, {(topic, 1): (17, "before")}, member_id=member,
                       generation=generation) == {(topic, 1): ErrorCode.NONE}
    assert wire.leave(group, member).error_code == ErrorCode.NONE
    wire.close()

    broker.stop(sig)
    broker.start()
    wire = GroupWire(broker.port)
    try:
        wait_for(lambda: wire.loaded(group), "the group to load")
        described = wire.describe(group)
        assert (described.group_state, described.protocol_type, described.members) == (
            "Empty", "consumer", [])
        assert wire.fetch(group) == {(topic, 1): (17, "before")}
        # Leaving made generation + 1 (the empty one); the next rebalance goes on from it.
        rejoined = wire.join(group, protocols=[("range", subscription(topic))])
        assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.NONE,
                                                                 generation + 2)
    finally:
        wire.close()


def test_a_commit_acknowledged_just_before_a_sigkill_survives_it(
        broker: BrokerProcess) -> None:
    topic = group = "acknowledged"
    create_topic(broker, topic, 3)
    rng = random.Random(20261122)
    wire = GroupWire(broker.port)
    joined = wire.join(group, protocols=[("range", subscription(topic))])
    member, generation = joined.member_id, joined.generation_id
    assert wire.sync(group, member, generation, {member: b""}).error_code == ErrorCode.NONE
    last: dict[tuple[str, int], tuple[int, str]] = {}
    for i in range(rng.randrange(50, 150)):  # commits, one after another, acknowledged
        tp = (topic, rng.randrange(3))
        last[tp] = (i, f"commit {i}")
        assert wire.commit(group, {tp: last[tp]}, member_id=member,
                           generation=generation) == {tp: ErrorCode.NONE}
    broker.stop(signal.SIGKILL)  # at once, after the last acknowledgement
    wire.close()
    broker.start()
    wire = GroupWire(broker.port)
    try:
        wait_for(lambda: wire.loaded(group), "the group to load")
        assert wire.fetch(group) == last
    finally:
        wire.close()
