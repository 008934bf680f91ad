"""The leader side of replication: odradek.broker.partition (Partition, FollowerReplica)
and odradek.broker.replica_manager (ReplicaManager), over real logs in tmp_path.

This broker is node 1 throughout. Time is a fake millisecond clock the test moves, so
replica.lag.time.max.ms is exact; the AlterPartition sender only records the proposed
ISRs, and the test plays the controller by answering them (alter_partition_completed).
Followers are played by calling the leader's fetch path with their replica ids.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

import pytest

from odradek.broker.partition import FollowerReplica, Partition
from odradek.broker.replica_fetcher import InitialFetchState, ReplicaFetcherManager
from odradek.broker.replica_manager import (
    HIGH_WATERMARK_CHECKPOINT,
    READ_COMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    ProducePartitionResult,
    ReplicaManager,
)
from odradek.cluster.metadata import PartitionState
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    iter_batch_headers,
)
from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.leader_epoch import EpochEntry
from odradek.storage.log_manager import LogManager, LogManagerConfig
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
TOPIC = "events"
TP = (TOPIC, 0)
TOPIC_ID = UUID(int=0xE7E7)
ME, F2, F3 = 1, 2, 3  # this broker and its two followers
LAG_MS = 10_000  # replica.lag.time.max.ms
START_MS = 1_000_000  # the fake clock's start: distinct from the 0 of "never"
CONSUMER = -1  # Fetch's replica id for consumers


# ---- helpers ------------------------------------------------------------------------------


class FakeClock:
    """Milliseconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


class Controller:
    """The AlterPartition sender: notes each proposal (the test answers it)."""

    def __init__(self) -> None:
        self.proposals: list[list[int]] = []

    def __call__(self, partition: Partition, isr: list[int]) -> None:
        self.proposals.append(list(isr))


def batch(count: int, *, base_offset: int = 0, epoch: int = -1) -> bytearray:
    """One batch of `count` records, as a producer (or, with offsets and an epoch, a
    leader) writes it."""
    now = int(time.time() * 1000)
    return bytearray(build_record_batch(
        [SimpleRecord(None, f"v{i}".encode(), timestamp=now) for i in range(count)],
        base_offset=base_offset, partition_leader_epoch=epoch))


def state(*, leader: int = ME, epoch: int = 0, isr: tuple[int, ...] = (ME, F2, F3),
          replicas: tuple[int, ...] = (ME, F2, F3), partition_epoch: int = 0) -> PartitionState:
    return PartitionState(replicas=list(replicas), leader=leader, leader_epoch=epoch,
                          isr=list(isr), partition_epoch=partition_epoch)


def open_logs(log_dir: Path, min_isr: int | None = None) -> LogManager:
    overrides = None if min_isr is None else LogConfig().with_overrides(
        {"min.insync.replicas": str(min_isr)})
    logs = LogManager(LogManagerConfig(log_dirs=(log_dir,)), LogConfig(),
                      topic_config=lambda topic: overrides)
    logs.startup(background=False)
    return logs


def new_partition(logs: LogManager, clock: FakeClock, controller: Controller | None
                  ) -> Partition:
    return Partition(TOPIC, 0, TOPIC_ID, logs.get_or_create_log(TOPIC, 0), node_id=ME,
                     clock=clock, replica_lag_time_max_ms=LAG_MS, alter_partition=controller)


def leader(logs: LogManager, clock: FakeClock, controller: Controller | None = None,
           **kwargs: Any) -> Partition:
    partition = new_partition(logs, clock, controller)
    partition.make_leader(state(**kwargs))
    return partition


def append(partition: Partition, count: int) -> None:
    partition.append_records_to_leader(batch(count), required_acks=1)


def fetched(partition: Partition, replica: int, offset: int) -> bool:
    """Follower `replica` fetches from `offset` (so has everything below it)."""
    return partition.update_follower_fetch_state(replica, offset, 0, partition.log_end_offset)


def batch_epochs(partition: Partition) -> list[tuple[int, int, int]]:
    """(base offset, last offset, leader epoch) of each batch in the partition's log."""
    data = partition.log.read(partition.log_start_offset, 1 << 20).read()
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch)
            for _, h in iter_batch_headers(data)]


def new_replica_manager(logs: LogManager, clock: FakeClock,
                        controller: Controller | None = None) -> ReplicaManager:
    manager = ReplicaManager(ME, logs, clock=clock, replica_lag_time_max_ms=LAG_MS)
    manager.alter_partition = controller
    return manager


async def fetch(manager: ReplicaManager, replica: int, offset: int,
                leader_epoch: int = -1) -> FetchPartitionResult:
    """One Fetch of TP that answers at once (a follower's when replica >= 0)."""
    (result,) = await manager.fetch_messages(
        replica_id=replica, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        isolation_level=0,
        requests=[(TP, FetchPartitionRequest(offset, 1 << 20, leader_epoch))])
    return result


def produce_task(manager: ReplicaManager, count: int, *, acks: int = -1,
                 timeout_ms: int = 5_000) -> asyncio.Task[dict[Any, ProducePartitionResult]]:
    return asyncio.create_task(manager.produce(acks, timeout_ms, {TP: batch(count)}))


async def settle() -> None:
    """Lets every ready task run (loop turns, no wall time)."""
    for _ in range(10):
        await asyncio.sleep(0)


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 10))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def logs(log_dir: Path) -> Iterator[LogManager]:
    manager = open_logs(log_dir)
    yield manager
    manager.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def controller() -> Controller:
    return Controller()


# ---- 1. the high watermark follows the ISR's log ends -------------------------------------


def test_hw_waits_for_every_isr_follower(logs: LogManager, clock: FakeClock) -> None:
    p = leader(logs, clock)
    append(p, 10)
    assert (p.log_end_offset, p.high_watermark) == (10, 0)  # no follower has fetched yet
    assert fetched(p, F2, 10) is False
    assert p.high_watermark == 0  # 3 has not fetched
    assert fetched(p, F3, 5) is True
    assert p.high_watermark == 5
    assert fetched(p, F3, 10) is True
    assert p.high_watermark == 10


def test_hw_never_goes_back(logs: LogManager, clock: FakeClock) -> None:
    p = leader(logs, clock)
    append(p, 10)
    fetched(p, F2, 10)
    fetched(p, F3, 10)
    # A follower that fetches from lower down (it truncated, say) does not pull it back.
    assert fetched(p, F3, 4) is False
    assert p.high_watermark == 10
    assert p.followers[F3].log_end_offset == 4


def test_follower_fetches_move_the_hw_through_the_replica_manager(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    manager.append_records(1, {TP: batch(10)})

    async def body() -> None:
        # A follower reads past the HW; its fetch tells the leader where it is.
        to_f2 = await fetch(manager, F2, 0)
        assert (to_f2.error_code, to_f2.high_watermark) == (ErrorCode.NONE, 0)
        assert to_f2.size > 0
        assert (await fetch(manager, F2, 10)).high_watermark == 0
        assert (await fetch(manager, F3, 6)).high_watermark == 6
        assert (await fetch(manager, F3, 10)).high_watermark == 10

    run(body)
    assert manager.partitions[TP].followers[F3].log_end_offset == 10


def test_consumers_see_only_records_below_the_hw(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    manager.append_records(1, {TP: batch(10)})

    async def body() -> tuple[FetchPartitionResult, FetchPartitionResult]:
        before = await fetch(manager, CONSUMER, 0)
        await fetch(manager, F2, 10)
        await fetch(manager, F3, 10)
        return before, await fetch(manager, CONSUMER, 0)

    before, after = run(body)
    assert (before.error_code, before.high_watermark, before.size) == (ErrorCode.NONE, 0, 0)
    assert after.high_watermark == 10
    assert after.size == sum(s.length for s in after.slices) > 0


def test_a_fenced_follower_fetch_does_not_move_the_hw(logs: LogManager,
                                                      clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state(epoch=4, isr=(ME, F2), replicas=(ME, F2)))
    manager.append_records(1, {TP: batch(10)})

    # A follower still in leader epoch 3 (a zombie fetch) is answered, not counted.
    result = run(lambda: fetch(manager, F2, 10, leader_epoch=3))
    assert result.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert manager.partitions[TP].high_watermark == 0
    assert manager.partitions[TP].followers[F2].log_end_offset == -1


# ---- 2. the followers' fetch state (Kafka's Replica.updateFetchState) ---------------------


def test_a_fetch_from_the_leaders_end_is_caught_up_now(logs: LogManager,
                                                        clock: FakeClock) -> None:
    p = leader(logs, clock)
    append(p, 10)
    clock.now += 2_000
    fetched(p, F2, 10)
    assert p.followers[F2] == FollowerReplica(
        F2, log_end_offset=10, log_start_offset=0, last_caught_up_time_ms=clock.now,
        last_fetch_leader_log_end_offset=10, last_fetch_time_ms=clock.now)


def test_a_fetch_behind_keeps_the_previous_fetch_time_if_it_reached_the_end_then(
        logs: LogManager, clock: FakeClock) -> None:
    # Follower 3 is outside the ISR, so nothing made it caught up at the leadership.
    p = leader(logs, clock, isr=(ME, F2))
    assert p.followers[F3].last_caught_up_time_ms == 0
    append(p, 10)
    clock.now += 1_000
    first_fetch = clock.now
    fetched(p, F3, 4)  # behind: not caught up
    assert p.followers[F3].last_caught_up_time_ms == 0
    append(p, 5)
    clock.now += 1_000
    # From 10, where the leader's end was at its previous fetch: it was caught up then.
    fetched(p, F3, 10)
    assert p.followers[F3].last_caught_up_time_ms == first_fetch
    clock.now += 1_000
    # From 12, short of 15 (the leader's end at its previous fetch): no progress.
    fetched(p, F3, 12)
    assert p.followers[F3].last_caught_up_time_ms == first_fetch
    clock.now += 1_000
    fetched(p, F3, 15)
    assert p.followers[F3].last_caught_up_time_ms == clock.now


def test_a_new_leadership_gives_isr_followers_a_full_lag_period(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller)
    assert [p.followers[b].last_caught_up_time_ms for b in (F2, F3)] == [START_MS, START_MS]
    clock.now += LAG_MS  # exactly the lag: still in sync (Kafka drops only past it)
    p.maybe_shrink_isr()
    assert controller.proposals == []
    clock.now += 1
    p.maybe_shrink_isr()
    assert controller.proposals == [[ME]]


# ---- 3. ISR shrink ------------------------------------------------------------------------


def lagging_follower_3(logs: LogManager, clock: FakeClock, controller: Controller
                       ) -> Partition:
    """A leader of 10 records whose follower 2 is caught up and 3 has not fetched for
    longer than replica.lag.time.max.ms."""
    p = leader(logs, clock, controller)
    append(p, 10)
    clock.now += LAG_MS + 1
    fetched(p, F2, 10)
    return p


def test_a_follower_that_stops_fetching_is_proposed_out(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    assert controller.proposals == [[ME, F2]]
    assert (p.isr, p.pending_isr) == ([ME, F2, F3], [ME, F2])


def test_a_follower_that_fetches_but_stays_behind_is_proposed_out(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller)
    append(p, 10)
    # 3 keeps fetching, but never reaches where the leader's end was at its previous fetch.
    for offset in (5, 9, 13):
        clock.now += LAG_MS // 2
        fetched(p, F2, p.log_end_offset)
        fetched(p, F3, offset)
        append(p, 10)
    assert p.followers[F3].last_caught_up_time_ms == START_MS
    p.maybe_shrink_isr()
    assert controller.proposals == [[ME, F2]]


def test_a_pending_shrink_still_holds_the_hw(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    # Until the controller confirms, 3 may still count as in sync for someone (maximal ISR).
    assert p.maximal_isr == [ME, F2, F3]
    assert p.maybe_increment_high_watermark() is False
    assert p.high_watermark == 0


def test_a_confirmed_shrink_lets_the_hw_advance(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    fetched(p, F2, 8)  # 2 has 8 of 10: the new HW is min(10, 8)
    p.maybe_shrink_isr()
    moved = p.alter_partition_completed(
        0, 0, ErrorCode.NONE, state(isr=(ME, F2), partition_epoch=1))
    assert moved is True
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([ME, F2], None, 1)
    assert p.high_watermark == 8


def test_only_one_isr_proposal_is_in_flight(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    clock.now += LAG_MS + 1
    p.maybe_shrink_isr()  # now 2 lags too, but the first proposal is unanswered
    fetched(p, F3, 10)  # and 3 is back, but no expansion either
    assert controller.proposals == [[ME, F2]]


def test_no_expansion_is_proposed_while_another_is_in_flight(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller, isr=(ME,))
    fetched(p, F2, 0)
    fetched(p, F3, 0)  # caught up too, but 2's proposal is unanswered
    assert controller.proposals == [[ME, F2]]


def test_a_confirmed_shrink_completes_a_waiting_acks_all_produce(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    manager = new_replica_manager(logs, clock, controller)
    p = manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    manager.append_records(1, {TP: batch(10)})

    async def body() -> dict[Any, ProducePartitionResult]:
        produce = produce_task(manager, 5)
        await settle()
        clock.now += LAG_MS + 1
        await fetch(manager, F2, 15)
        manager.maybe_shrink_isrs()
        assert controller.proposals == [[ME, F2]]
        await settle()
        assert not produce.done()  # the HW still waits for 3
        manager.alter_partition_completed(p, 0, 0, ErrorCode.NONE,
                                          state(isr=(ME, F2), partition_epoch=1))
        return await produce

    result = run(body)[TP]
    assert (result.error_code, result.base_offset, result.last_offset) == (ErrorCode.NONE, 10, 14)
    assert p.high_watermark == 15


# ---- 4. ISR expansion ---------------------------------------------------------------------


def test_a_caught_up_follower_is_proposed_into_the_isr(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller, isr=(ME, F2))
    append(p, 10)
    fetched(p, F2, 10)
    assert p.high_watermark == 10
    fetched(p, F3, 9)  # below the HW: not in sync
    assert controller.proposals == []
    fetched(p, F3, 10)
    assert controller.proposals == [[ME, F2, F3]]
    assert p.maximal_isr == [ME, F2, F3]  # the HW waits for 3 from now on
    assert p.alter_partition_completed(
        0, 0, ErrorCode.NONE, state(isr=(ME, F2, F3), partition_epoch=1)) is False
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([ME, F2, F3], None, 1)


def test_a_joining_follower_needs_the_leader_epochs_start(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller, isr=(ME, F2))
    append(p, 10)
    fetched(p, F2, 4)
    assert p.high_watermark == 4
    # Elected again in epoch 1 at offset 10; the HW stays at 4.
    p.make_leader(state(epoch=1, isr=(ME, F2)))
    assert (p.leader_epoch_start_offset, p.high_watermark) == (10, 4)
    fetched(p, F3, 6)  # >= the HW, but short of this epoch's start
    assert controller.proposals == []
    fetched(p, F3, 10)
    assert controller.proposals == [[ME, F2, F3]]


def test_a_pending_expansion_holds_the_hw_for_the_joining_follower(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = leader(logs, clock, controller, isr=(ME, F2))
    append(p, 10)
    fetched(p, F2, 10)
    fetched(p, F3, 10)  # proposed into the ISR
    append(p, 5)
    fetched(p, F2, 15)
    assert p.high_watermark == 10  # 3, joining, has only 10


# ---- 5. refused and stale answers ---------------------------------------------------------


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH,
                                   ErrorCode.INVALID_UPDATE_VERSION])
def test_a_refused_proposal_clears_the_pending_state(
        logs: LogManager, clock: FakeClock, controller: Controller, error: ErrorCode) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    assert p.alter_partition_completed(0, 0, error, None) is False
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([ME, F2, F3], None, 0)
    p.maybe_shrink_isr()  # free to propose again
    assert controller.proposals == [[ME, F2], [ME, F2]]


def test_an_answer_for_an_older_leader_epoch_is_ignored(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    p.make_leader(state(epoch=1))  # elected again: the epoch-0 proposal is moot
    assert p.pending_isr is None
    clock.now += LAG_MS + 1
    fetched(p, F2, 10)
    p.maybe_shrink_isr()
    assert controller.proposals == [[ME, F2], [ME, F2]]
    # The epoch-0 answer arrives late: neither settles the epoch-1 proposal nor the ISR.
    assert p.alter_partition_completed(
        0, 0, ErrorCode.NONE, state(isr=(ME, F2), partition_epoch=1)) is False
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([ME, F2, F3], [ME, F2], 0)


def test_a_success_naming_another_leader_is_not_adopted(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()
    assert p.alter_partition_completed(
        0, 0, ErrorCode.NONE, state(leader=F2, epoch=1, isr=(F2,), partition_epoch=1)) is False
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([ME, F2, F3], None, 0)


def test_without_a_controller_proposals_are_answered_not_controller(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)  # alter_partition None: a single node
    p = manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    clock.now += LAG_MS + 1
    manager.maybe_shrink_isrs()
    assert (p.isr, p.pending_isr) == ([ME, F2, F3], None)


def test_an_answer_for_a_partition_no_longer_hosted_is_dropped(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    manager = new_replica_manager(logs, clock, controller)
    old = manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    clock.now += LAG_MS + 1
    manager.maybe_shrink_isrs()
    asyncio.run(manager.stop_replicas([(TP, True)]))  # deleted, then created again
    new = manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    manager.alter_partition_completed(old, 0, 0, ErrorCode.NONE,
                                      state(isr=(ME,), partition_epoch=1))
    assert (old.isr, old.pending_isr) == ([ME, F2, F3], [ME])
    assert (new.isr, new.pending_isr) == ([ME, F2, F3], None)


def test_an_answer_to_a_superseded_proposal_does_not_settle_the_pending_one(
        logs: LogManager, clock: FakeClock, controller: Controller) -> None:
    p = lagging_follower_3(logs, clock, controller)
    p.maybe_shrink_isr()  # proposal A, in partition epoch 0
    # A new controller re-sends the state (same leader epoch, newer partition epoch): A is
    # moot, and the leader proposes B from the new state.
    p.make_leader(state(isr=(ME, F2, F3), partition_epoch=1))
    p.maybe_shrink_isr()
    assert controller.proposals == [[ME, F2], [ME, F2]]
    # A's refusal (its partition epoch is stale) arrives, then B's success.
    p.alter_partition_completed(0, 0, ErrorCode.INVALID_UPDATE_VERSION, None)  # A's
    p.alter_partition_completed(0, 1, ErrorCode.NONE, state(isr=(ME, F2), partition_epoch=2))
    # The controller committed B: the leader must know it, or its next proposals carry
    # a stale partition epoch (refused) and its HW keeps waiting for 3.
    assert (p.isr, p.partition_epoch, p.high_watermark) == ([ME, F2], 2, 10)


# ---- 6. acks=all (Kafka's DelayedProduce) -------------------------------------------------


def test_acks_all_completes_once_followers_fetch_past_the_records(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())

    async def body() -> dict[Any, ProducePartitionResult]:
        produce = produce_task(manager, 10)
        await settle()
        assert manager.partitions[TP].log_end_offset == 10  # appended, waiting
        await fetch(manager, F2, 10)
        await fetch(manager, F3, 9)
        await settle()
        assert not produce.done()  # 3 lacks the last record
        await fetch(manager, F3, 10)
        return await produce

    result = run(body)[TP]
    assert (result.error_code, result.base_offset, result.last_offset) == (ErrorCode.NONE, 0, 9)


def test_acks_all_times_out_when_a_follower_does_not_fetch(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())

    async def body() -> dict[Any, ProducePartitionResult]:
        produce = produce_task(manager, 10, timeout_ms=30)
        await settle()
        await fetch(manager, F2, 10)
        return await produce

    assert run(body)[TP].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert manager.partitions[TP].log_end_offset == 10  # the records stay (as Kafka)


def test_acks_all_below_min_insync_replicas_is_refused_before_the_append(
        log_dir: Path, clock: FakeClock) -> None:
    logs = open_logs(log_dir, min_isr=2)
    try:
        manager = new_replica_manager(logs, clock)
        p = manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME,)))
        assert p.log.config.min_insync_replicas == 2
        refused = run(lambda: manager.produce(-1, 5_000, {TP: batch(3)}))[TP]
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert p.log_end_offset == 0
        # acks=1 does not care about the ISR.
        accepted = run(lambda: manager.produce(1, 5_000, {TP: batch(3)}))[TP]
        assert (accepted.error_code, p.log_end_offset) == (ErrorCode.NONE, 3)
    finally:
        logs.shutdown()


def test_acks_all_fails_after_the_append_when_the_isr_shrinks_below_min(
        log_dir: Path, clock: FakeClock, controller: Controller) -> None:
    logs = open_logs(log_dir, min_isr=2)
    try:
        manager = new_replica_manager(logs, clock, controller)
        p = manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME, F2), replicas=(ME, F2)))

        async def body() -> dict[Any, ProducePartitionResult]:
            produce = produce_task(manager, 4)
            await settle()
            clock.now += LAG_MS + 1
            manager.maybe_shrink_isrs()
            manager.alter_partition_completed(p, 0, 0, ErrorCode.NONE,
                                              state(isr=(ME,), replicas=(ME, F2),
                                                    partition_epoch=1))
            return await produce

        result = run(body)[TP]
        assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert (p.high_watermark, p.log_end_offset) == (4, 4)
    finally:
        logs.shutdown()


def test_acks_all_fails_when_the_partition_becomes_a_follower_meanwhile(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())

    async def body() -> dict[Any, ProducePartitionResult]:
        produce = produce_task(manager, 10)
        await settle()
        errors = await manager.become_leader_or_follower(
            [(TOPIC, TOPIC_ID, 0, state(leader=F2, epoch=1))], {TOPIC: 1})
        assert errors == {}
        return await produce

    assert run(body)[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_acks_all_fails_when_the_partition_is_deleted_meanwhile(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    told: list[tuple[str, int, list[int], list[int]]] = []
    manager.add_leadership_listener(lambda *args: told.append(args))

    async def body() -> dict[Any, ProducePartitionResult]:
        produce = produce_task(manager, 10)
        await settle()
        assert await manager.stop_replicas([(TP, True)]) == {}
        return await produce

    assert run(body)[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert TP not in manager.partitions and logs.get_log(TOPIC, 0) is None
    assert told == [(TOPIC, 0, [], [0])]


def test_stop_replica_without_delete_keeps_the_partition(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    p = manager.make_leader(TOPIC, 0, TOPIC_ID, state())
    assert asyncio.run(manager.stop_replicas([(TP, False)])) == {}
    assert manager.partitions[TP] is p and logs.get_log(TOPIC, 0) is p.log


# ---- 7. the follower side -----------------------------------------------------------------


def follower(logs: LogManager, clock: FakeClock) -> Partition:
    """This broker following broker 2 in leader epoch 3, with 5 records of epoch 3 and 3
    of epoch 4 from it."""
    p = new_partition(logs, clock, None)
    assert p.make_follower(state(leader=F2, epoch=3)) is True
    p.append_records_as_follower(batch(5, base_offset=0, epoch=3))
    p.append_records_as_follower(batch(3, base_offset=5, epoch=4))
    return p


def test_make_follower_reports_a_leader_or_epoch_change(logs: LogManager,
                                                        clock: FakeClock) -> None:
    p = new_partition(logs, clock, None)
    assert p.make_follower(state(leader=F2, epoch=3)) is True
    assert p.make_follower(state(leader=F2, epoch=3, isr=(F2, ME), partition_epoch=1)) is False
    assert p.make_follower(state(leader=F3, epoch=3)) is True
    assert p.make_follower(state(leader=F3, epoch=4)) is True
    assert (p.is_leader, p.leader_id, p.followers) == (False, F3, {})


def test_follower_appends_keep_the_leaders_offsets_and_epochs(logs: LogManager,
                                                              clock: FakeClock) -> None:
    p = follower(logs, clock)
    assert batch_epochs(p) == [(0, 4, 3), (5, 7, 4)]
    assert p.log.leader_epoch_cache.entries == [EpochEntry(3, 0), EpochEntry(4, 5)]
    assert (p.log_end_offset, p.latest_epoch, p.high_watermark) == (8, 4, 0)
    assert p.end_offset_for_epoch(3) == (3, 5)


def test_follower_hw_is_the_leaders_capped_at_its_log_end(logs: LogManager,
                                                          clock: FakeClock) -> None:
    p = follower(logs, clock)
    p.update_follower_high_watermark(6, 0)
    assert p.high_watermark == 6
    p.update_follower_high_watermark(20, 0)  # the leader has more than this follower
    assert p.high_watermark == 8
    p.update_follower_high_watermark(2, 0)  # a new leader behind: follows it down (Kafka)
    assert p.high_watermark == 2


def test_follower_takes_the_leaders_log_start(logs: LogManager, clock: FakeClock) -> None:
    p = follower(logs, clock)
    p.update_follower_high_watermark(8, 3)
    assert (p.log_start_offset, p.high_watermark) == (3, 8)


def test_truncation_lowers_the_follower_hw(logs: LogManager, clock: FakeClock) -> None:
    p = follower(logs, clock)
    p.update_follower_high_watermark(8, 0)
    p.truncate_to(5)
    assert (p.log_end_offset, p.high_watermark) == (5, 5)
    assert p.log.leader_epoch_cache.entries == [EpochEntry(3, 0)]
    p.truncate_to(7)  # beyond the end: nothing to remove
    assert (p.log_end_offset, p.high_watermark) == (5, 5)


def test_a_follower_refuses_consumers_and_producers(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    assert asyncio.run(manager.become_leader_or_follower(
        [(TOPIC, TOPIC_ID, 0, state(leader=F2, epoch=3))], {TOPIC: 1})) == {}
    assert run(lambda: fetch(manager, CONSUMER, 0)).error_code == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    for acks in (1, -1):
        result = asyncio.run(manager.produce(acks, 1_000, {TP: batch(2)}))[TP]
        assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert manager.partitions[TP].log_end_offset == 0


# ---- 8. LeaderAndIsr (become_leader_or_follower) ------------------------------------------


class FakeFetchers:
    """What the ReplicaManager asks of its ReplicaFetcherManager."""

    def __init__(self) -> None:
        self.following: dict[tuple[str, int], InitialFetchState] = {}

    def leader_of(self, tp: tuple[str, int]) -> int | None:
        initial = self.following.get(tp)
        return None if initial is None else initial.leader_id

    def add_partitions(self, states: dict[tuple[str, int], InitialFetchState]) -> None:
        self.following.update(states)

    def remove_partitions(self, tps: Any) -> None:
        for tp in tps:
            self.following.pop(tp, None)


def lead_or_follow(manager: ReplicaManager, s: PartitionState, topic_id: UUID | None = TOPIC_ID,
                   index: int = 0) -> dict[tuple[str, int], int]:
    return asyncio.run(manager.become_leader_or_follower([(TOPIC, topic_id, index, s)],
                                                         {TOPIC: 2}))


def test_a_stale_leader_epoch_is_refused(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    assert lead_or_follow(manager, state(epoch=3)) == {}
    assert lead_or_follow(manager, state(leader=F2, epoch=2)) == {
        TP: ErrorCode.STALE_CONTROLLER_EPOCH}
    p = manager.partitions[TP]
    assert (p.is_leader, p.leader_epoch) == (True, 3)


def test_a_partition_without_this_broker_is_refused(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    assert lead_or_follow(manager, state(leader=F2, isr=(F2, F3), replicas=(F2, F3))) == {
        TP: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert TP not in manager.partitions and logs.get_log(TOPIC, 0) is None


def test_another_topic_id_is_refused(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    lead_or_follow(manager, state())
    assert lead_or_follow(manager, state(epoch=1), topic_id=UUID(int=99)) == {
        TP: ErrorCode.INCONSISTENT_TOPIC_ID}
    assert manager.partitions[TP].leader_epoch == 0


def test_a_new_leader_epoch_starts_at_the_log_end(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    lead_or_follow(manager, state(epoch=0))
    manager.append_records(1, {TP: batch(4)})
    lead_or_follow(manager, state(epoch=2))
    p = manager.partitions[TP]
    assert p.log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 4)]
    assert p.leader_epoch_start_offset == 4
    manager.append_records(1, {TP: batch(1)})
    assert batch_epochs(p) == [(0, 3, 0), (4, 4, 2)]  # new records carry the new epoch


def test_the_same_leader_epoch_with_a_new_isr_keeps_the_followers(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    lead_or_follow(manager, state())
    manager.append_records(1, {TP: batch(4)})
    run(lambda: fetch(manager, F2, 4))
    assert lead_or_follow(manager, state(isr=(ME, F2), partition_epoch=1)) == {}
    p = manager.partitions[TP]
    assert (p.isr, p.partition_epoch, p.leader_epoch_start_offset) == ([ME, F2], 1, 0)
    assert p.followers[F2].log_end_offset == 4  # not a new leadership: kept
    assert p.high_watermark == 4  # 3 left the ISR
    # An older partition epoch of the same leader epoch changes nothing, quietly.
    assert lead_or_follow(manager, state(partition_epoch=0)) == {}
    assert (p.isr, p.partition_epoch) == ([ME, F2], 1)


def test_leadership_listeners_hear_led_and_resigned(logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    told: list[tuple[str, int, list[int], list[int]]] = []
    manager.add_leadership_listener(lambda *args: told.append(args))
    errors = asyncio.run(manager.become_leader_or_follower([
        (TOPIC, TOPIC_ID, 0, state(epoch=1)),
        (TOPIC, TOPIC_ID, 1, state(leader=F2, epoch=1)),
    ], {TOPIC: 2}))
    assert errors == {}
    assert told == [(TOPIC, 2, [0], [])]  # 1 was never led: nothing resigned
    lead_or_follow(manager, state(leader=F3, epoch=2))
    assert told[1:] == [(TOPIC, 2, [], [0])]


def test_leadership_listeners_hear_only_of_a_new_leadership(logs: LogManager,
                                                            clock: FakeClock) -> None:
    # A LeaderAndIsr of the same leader and leader epoch (a new ISR, or the controller
    # sending the state again) is no new leadership: a transaction coordinator told again
    # would drop the markers it is still sending (issue 16), as Kafka's makeLeaders tells
    # onLeadershipChange only of partitions that became leaders.
    manager = new_replica_manager(logs, clock)
    told: list[tuple[str, int, list[int], list[int]]] = []
    manager.add_leadership_listener(lambda *args: told.append(args))
    assert lead_or_follow(manager, state(epoch=1)) == {}
    assert lead_or_follow(manager, state(epoch=1)) == {}
    assert lead_or_follow(manager, state(epoch=1, isr=(ME, F2), partition_epoch=1)) == {}
    assert told == [(TOPIC, 2, [0], [])]
    assert lead_or_follow(manager, state(epoch=2, isr=(ME, F2), partition_epoch=2)) == {}
    assert told[1:] == [(TOPIC, 2, [0], [])]  # a new leader epoch: the state is reloaded


def test_followers_are_handed_to_the_fetchers_and_leaders_taken_back(
        logs: LogManager, clock: FakeClock) -> None:
    fetchers = FakeFetchers()
    manager = ReplicaManager(ME, logs, clock=clock, replica_lag_time_max_ms=LAG_MS,
                             fetcher_manager=cast(ReplicaFetcherManager, fetchers))
    lead_or_follow(manager, state(leader=F2, epoch=5))
    assert fetchers.following == {TP: InitialFetchState(F2, 5, manager.partitions[TP])}
    lead_or_follow(manager, state(epoch=6))
    assert fetchers.following == {}


# ---- 9. the high watermark checkpoint -----------------------------------------------------


def leader_with_hw_4_of_10(logs: LogManager, clock: FakeClock) -> ReplicaManager:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME, F2), replicas=(ME, F2)))
    manager.append_records(1, {TP: batch(10)})
    run(lambda: fetch(manager, F2, 4))
    assert manager.partitions[TP].high_watermark == 4
    return manager


def test_the_hw_checkpoint_is_written_in_the_log_dir(
        logs: LogManager, log_dir: Path, clock: FakeClock) -> None:
    leader_with_hw_4_of_10(logs, clock).checkpoint_high_watermarks()
    assert OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).read() == {TP: 4}


def test_a_restarted_broker_starts_from_the_checkpointed_hw(
        logs: LogManager, log_dir: Path, clock: FakeClock) -> None:
    leader_with_hw_4_of_10(logs, clock).checkpoint_high_watermarks()
    logs.shutdown()
    reopened = open_logs(log_dir)
    try:
        p = new_replica_manager(reopened, clock).get_or_create_partition(TOPIC, 0, TOPIC_ID)
        assert (p.high_watermark, p.log_end_offset) == (4, 10)
    finally:
        reopened.shutdown()


def test_a_checkpointed_hw_past_the_log_end_is_clamped(
        logs: LogManager, log_dir: Path, clock: FakeClock) -> None:
    leader_with_hw_4_of_10(logs, clock)
    logs.shutdown()
    OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).write({TP: 50})
    reopened = open_logs(log_dir)
    try:
        p = new_replica_manager(reopened, clock).get_or_create_partition(TOPIC, 0, TOPIC_ID)
        assert p.high_watermark == 10
    finally:
        reopened.shutdown()


def test_without_a_checkpoint_the_hw_starts_at_the_log_start(
        logs: LogManager, log_dir: Path, clock: FakeClock) -> None:
    leader_with_hw_4_of_10(logs, clock)  # never checkpointed
    logs.shutdown()
    reopened = open_logs(log_dir)
    try:
        p = new_replica_manager(reopened, clock).get_or_create_partition(TOPIC, 0, TOPIC_ID)
        assert (p.high_watermark, p.log_end_offset) == (0, 10)
    finally:
        reopened.shutdown()


def test_a_checkpoint_before_the_partitions_are_created_keeps_their_hw(
        logs: LogManager, log_dir: Path, clock: FakeClock) -> None:
    leader_with_hw_4_of_10(logs, clock).checkpoint_high_watermarks()
    logs.shutdown()
    restarted = open_logs(log_dir)
    try:
        # Restarted, it checkpoints (periodic task or shutdown) before any LeaderAndIsr.
        new_replica_manager(restarted, clock).checkpoint_high_watermarks()
    finally:
        restarted.shutdown()
    again = open_logs(log_dir)
    try:
        p = new_replica_manager(again, clock).get_or_create_partition(TOPIC, 0, TOPIC_ID)
        assert p.high_watermark == 4
    finally:
        again.shutdown()


# ---- transactions: the last stable offset and read_committed fetches ----------------------

TXN_PID, OTHER_PID = 4000, 5000


def txn_batch(count: int, seq: int, pid: int = TXN_PID) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_record_batch(
        [SimpleRecord(None, f"t{i}".encode(), timestamp=now) for i in range(count)],
        producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True))


def end_marker(commit: bool, pid: int = TXN_PID, coordinator_epoch: int = 0) -> bytearray:
    return bytearray(build_control_batch(commit, pid, 0, coordinator_epoch,
                                         int(time.time() * 1000)))


async def fetch_committed(manager: ReplicaManager, offset: int) -> FetchPartitionResult:
    (result,) = await manager.fetch_messages(
        replica_id=CONSUMER, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        isolation_level=READ_COMMITTED,
        requests=[(TP, FetchPartitionRequest(offset, 1 << 20))])
    return result


def fetched_offsets(result: FetchPartitionResult) -> list[tuple[int, int]]:
    data = b"".join(s.read() for s in result.slices)
    return [(h.base_offset, h.last_offset) for _, h in iter_batch_headers(data)]


def test_the_lso_is_the_hw_without_transactions_and_held_by_an_open_one(
        logs: LogManager, clock: FakeClock) -> None:
    partition = leader(logs, clock, isr=(ME, F2), replicas=(ME, F2))
    append(partition, 3)
    assert partition.last_stable_offset == partition.high_watermark == 0
    fetched(partition, F2, 3)
    assert partition.last_stable_offset == 3
    partition.append_records_to_leader(txn_batch(2, 0), required_acks=1)  # 3-4
    append(partition, 1)  # 5
    fetched(partition, F2, 6)
    assert (partition.high_watermark, partition.last_stable_offset) == (6, 3)
    # The marker decides the transaction, but only its replication makes it stable.
    partition.append_records_to_leader(end_marker(True), required_acks=-1,
                                       origin=AppendOrigin.COORDINATOR)  # 6
    assert partition.last_stable_offset == 3
    fetched(partition, F2, 7)
    assert (partition.high_watermark, partition.last_stable_offset) == (7, 7)


def test_a_read_committed_fetch_stops_at_the_lso_with_the_aborted_list(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME,), replicas=(ME,)))
    manager.append_records(1, {TP: batch(2)})  # 0-1
    manager.append_records(1, {TP: txn_batch(2, 0)})  # 2-3
    manager.append_records(1, {TP: txn_batch(1, 0, OTHER_PID)})  # 4: stays open
    (result,) = manager.append_records(
        -1, {TP: end_marker(False)}, origin=AppendOrigin.COORDINATOR).values()  # 5
    assert (result.error_code, result.base_offset) == (ErrorCode.NONE, 5)
    manager.append_records(1, {TP: batch(1)})  # 6

    async def body() -> tuple[FetchPartitionResult, FetchPartitionResult]:
        return await fetch_committed(manager, 0), await fetch(manager, CONSUMER, 0)

    committed, uncommitted = run(body)
    assert committed.error_code == ErrorCode.NONE
    assert (committed.high_watermark, committed.last_stable_offset) == (7, 4)
    assert fetched_offsets(committed) == [(0, 1), (2, 3)]
    assert committed.aborted_transactions == [(TXN_PID, 2)]
    # read_uncommitted: up to the HW, no aborted list.
    assert fetched_offsets(uncommitted)[-1] == (6, 6)
    assert uncommitted.aborted_transactions is None
    assert uncommitted.last_stable_offset == 4
    manager.append_records(-1, {TP: end_marker(True, OTHER_PID)},
                           origin=AppendOrigin.COORDINATOR)  # 7

    async def after() -> FetchPartitionResult:
        return await fetch_committed(manager, 4)

    result = run(after)
    assert result.last_stable_offset == 8
    assert fetched_offsets(result) == [(4, 4), (5, 5), (6, 6), (7, 7)]
    assert result.aborted_transactions == [(TXN_PID, 2)]  # it overlaps the range (to 5)


def test_clients_cannot_append_markers_through_the_replica_manager(
        logs: LogManager, clock: FakeClock) -> None:
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME,), replicas=(ME,)))
    manager.append_records(1, {TP: txn_batch(1, 0)})
    (result,) = manager.append_records(1, {TP: end_marker(True)}).values()
    assert result.error_code == ErrorCode.INVALID_RECORD
    assert manager.partitions[TP].last_stable_offset == 0


def test_the_lso_survives_a_restart_with_the_checkpointed_hw(
        log_dir: Path, clock: FakeClock) -> None:
    logs = open_logs(log_dir)
    manager = new_replica_manager(logs, clock)
    manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME,), replicas=(ME,)))
    manager.append_records(1, {TP: batch(1)})  # 0
    manager.append_records(1, {TP: txn_batch(2, 0)})  # 1-2
    manager.append_records(-1, {TP: end_marker(False)}, origin=AppendOrigin.COORDINATOR)
    manager.append_records(1, {TP: txn_batch(1, 0, OTHER_PID)})  # 4
    assert manager.partitions[TP].last_stable_offset == 4
    manager.shutdown()
    logs.shutdown()
    logs = open_logs(log_dir)
    try:
        manager = new_replica_manager(logs, clock)
        manager.make_leader(TOPIC, 0, TOPIC_ID, state(isr=(ME,), replicas=(ME,)))
        partition = manager.partitions[TP]
        assert (partition.high_watermark, partition.last_stable_offset) == (5, 4)
        assert partition.log.collect_aborted_transactions(0, 5) == [
            AbortedTxn(TXN_PID, 1, 3, 4)]
    finally:
        logs.shutdown()
