"""A group coordinator on real logs and a manual clock, for unit tests and benchmarks.

`GroupHarness` builds what the broker builds (LogManager, ReplicaManager, Controller,
GroupMetadataManager, GroupCoordinator) in a directory, with one MockTime as clock and
timer: `advance(ms)` moves time and fires the session, rebalance and expiry timers that
fall due. `restart()` builds them again from the same directory, as a broker restart
does. The join/sync helpers return `Answer`s, filled when the coordinator calls back.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.coordinator.group.group_metadata import (
    GroupMetadata,
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
)
from odradek.coordinator.group.group_metadata_manager import GroupMetadataManager, OffsetConfig
from odradek.coordinator.timer import MockTime
from odradek.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

T = TypeVar("T")

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000


def subscription(*topics: str) -> bytes:
    """A consumer's JoinGroup metadata: ConsumerProtocolSubscription v0, version-prefixed."""
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=list(topics)).encode(0)


@dataclass
class Answer(Generic[T]):
    """A JoinGroup or SyncGroup answer, once the coordinator gives it."""

    results: list[T] = field(default_factory=list)

    def __call__(self, result: T) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def result(self) -> T:
        assert len(self.results) == 1, f"{len(self.results)} answers: {self.results}"
        return self.results[0]


class GroupHarness:
    def __init__(self, directory: Path, *, partitions: int = 4,
                 group_config: GroupConfig | None = None,
                 offset_config: OffsetConfig | None = None,
                 time: MockTime | None = None, create_topic: bool = True) -> None:
        self.directory = directory
        self.partitions = partitions
        self.group_config = group_config or GroupConfig(
            group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=DELAY_MS)
        self.offset_config = offset_config or OffsetConfig()
        self.offset_config = replace(self.offset_config, offsets_topic_num_partitions=partitions)
        self.time = time or MockTime()
        self._build()
        if create_topic and GROUP_METADATA_TOPIC not in self.controller.topics:
            async def create() -> None:
                await self.controller.create_topic(GROUP_METADATA_TOPIC, partitions, 1,
                                                   {"cleanup.policy": "compact"})
                await self.controller.create_topic("events", 6, 1, {})

            asyncio.run(create())
            self.time.run_pending()

    def _build(self) -> None:
        self.log_manager = LogManager(LogManagerConfig(log_dirs=(self.directory,)), LogConfig(),
                                      clock=self.time.milliseconds)
        self.log_manager.startup(background=False)
        self.replica_manager = ReplicaManager(1, self.log_manager)
        self.controller = Controller(1, EmbeddedMetadataStore(self.directory))
        self.manager = GroupMetadataManager(self.offset_config, self.replica_manager,
                                            self.time, self.time)
        self.coordinator = GroupCoordinator(self.group_config, self.manager, self.time,
                                            self.time)
        self.coordinator.startup()
        asyncio.run(self.controller.startup(self.replica_manager))

    def restart(self, *, load: bool = True) -> None:
        """Stops everything and builds it again from the same directory; with `load`, runs
        the partition loads to the end."""
        self.coordinator.shutdown()
        self.log_manager.shutdown()
        self.time = MockTime(self.time.now)
        self._build()
        if load:
            self.time.run_pending()

    def close(self) -> None:
        self.coordinator.shutdown()
        self.log_manager.shutdown()

    def advance(self, ms: int) -> None:
        self.time.advance(ms)

    def group(self, group_id: str) -> GroupMetadata:
        group = self.manager.get_group(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def settle(self, answers: list[Answer[Any]]) -> None:
        """Moves time on, one initial rebalance delay at a time (more members extend it),
        until every answer is in."""
        for _ in range(100):
            if all(a.done for a in answers):
                return
            self.advance(self.group_config.group_initial_rebalance_delay_ms)
        raise AssertionError("no answer")

    # ---- requests ---------------------------------------------------------------------

    def join(self, group_id: str, member_id: str = "", *, instance_id: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session_ms: int = SESSION_MS,
             rebalance_ms: int = REBALANCE_MS, require_known_member_id: bool = False,
             skip_assignment: bool = False, protocol_type: str = "consumer",
             client_id: str = "client") -> Answer[JoinGroupResult]:
        answer: Answer[JoinGroupResult] = Answer()
        self.coordinator.handle_join_group(
            group_id, member_id, instance_id, require_known_member_id, skip_assignment,
            client_id, "/127.0.0.1", rebalance_ms, session_ms, protocol_type,
            protocols if protocols is not None else [("range", subscription("events"))],
            answer)
        return answer

    def sync(self, group_id: str, member_id: str, generation: int,
             assignment: dict[str, bytes] | None = None, *, instance_id: str | None = None
             ) -> Answer[SyncGroupResult]:
        answer: Answer[SyncGroupResult] = Answer()
        self.coordinator.handle_sync_group(group_id, generation, member_id, None, None,
                                           instance_id, assignment or {}, answer)
        return answer

    def heartbeat(self, group_id: str, member_id: str, generation: int,
                  instance_id: str | None = None) -> int:
        return self.coordinator.handle_heartbeat(group_id, member_id, instance_id, generation)

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int], *,
               member_id: str = "", generation: int = -1, metadata: str = "",
               instance_id: str | None = None, **kwargs: Any) -> dict[tuple[str, int], int]:
        now = self.time.milliseconds()
        return self.coordinator.handle_commit_offsets(
            group_id, member_id, instance_id, generation,
            {tp: OffsetAndMetadata(o, metadata=metadata, commit_timestamp=now, **kwargs)
             for tp, o in offsets.items()})

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        error, offsets = self.coordinator.handle_fetch_offsets(group_id, False, None)
        assert error == 0, error
        return {tp: r.offset for tp, r in offsets.items()}

    def form_group(self, group_id: str, count: int, **join_args: Any) -> list[str]:
        """`count` members join, rebalance and sync (the first leader); their member ids."""
        answers = [self.join(group_id, **join_args) for _ in range(count)]
        self.settle(answers)
        results = [a.result for a in answers]
        assert all(r.error == 0 for r in results), results
        members = [r.member_id for r in results]
        generation = results[0].generation_id
        leader = results[0].leader_id
        assignment = {m: f"assignment of {m}".encode() for m in members}
        syncs = [self.sync(group_id, m, generation, assignment if m == leader else None)
                 for m in members]
        assert all(s.result.error == 0 for s in syncs)
        return members
