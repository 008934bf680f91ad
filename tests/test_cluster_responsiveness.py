"""Long admin work off the event loop, without a network (issue 14, part 4): the slices
that long loops yield in, the embedded store's per-topic encoding, and the Controller and
ReplicaManager creating and deleting thousands of partitions while a task on the same
loop keeps running. tests/compat/test_responsiveness.py measures a real broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from odradek.broker.replica_manager import IO_BATCH, ReplicaManager
from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore, _encode
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.slices import Slices
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
# What a task on the loop may wait at most here: the slices' 10 ms and the worker threads'
# hold of the GIL (5 ms at a time), with a wide margin for a loaded CI machine. Before the
# work moved off the loop, creating the partitions below held it for seconds.
MAX_LAG_S = 0.5


def test_slices_yield_once_their_budget_is_used() -> None:
    async def run() -> tuple[int, int]:
        slices = Slices(budget_s=0.005)
        ran = 0

        async def other() -> None:
            nonlocal ran
            while True:
                ran += 1
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(other())
        await asyncio.sleep(0)
        before = ran
        for _ in range(1000):  # cheap steps: no yield until 5 ms have passed
            await slices.pause()
        assert ran == before and slices.yields == 0
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            time.sleep(0.002)  # a step of real work
            await slices.pause()
        task.cancel()
        return slices.yields, ran - before

    yields, ran = asyncio.run(run())
    assert yields >= 5 and ran >= yields  # the other task ran at each yield


def test_a_topic_is_encoded_once_per_change_and_reads_back(tmp_path: Path) -> None:
    big = TopicMetadata("big", uuid.uuid4(),
                        {p: PartitionState([1], 1, 0, [1]) for p in range(1234)},
                        {"retention.ms": "1000"})
    assert json.loads(_encode(big)) == big.to_json()  # the partitions, encoded in slices
    empty = TopicMetadata("empty", uuid.uuid4(), {})
    assert json.loads(_encode(empty)) == empty.to_json()

    store = EmbeddedMetadataStore(tmp_path)
    store.create_topic(big)
    store.create_topic(empty)
    big.partitions[5] = PartitionState([1], 1, 3, [1])
    store.update_topic(big)
    store.delete_topic("empty")
    assert EmbeddedMetadataStore(tmp_path).topics() == {"big": big}
    data = json.loads((tmp_path / "odradek-metadata.json").read_text())
    assert data["topics"]["big"]["partitions"]["5"]["leader_epoch"] == 3
    with pytest.raises(ValueError, match="exists already"):
        store.create_topic(big)


class LagMonitor:
    """A task on the loop that wakes every 5 ms and notes how late it wakes."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.005)
            self.lags.append(loop.time() - before - 0.005)

    async def measure(self, work: Awaitable[T]) -> T:
        self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            return await work
        finally:
            self._task.cancel()


def test_thousands_of_partitions_are_made_and_deleted_off_the_loop(tmp_path: Path) -> None:
    partitions = 3 * IO_BATCH + 7  # several batches, the last one short
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "logs",)), LogConfig())
    logs.startup(background=False)
    manager = ReplicaManager(1, logs)
    told: list[tuple[str, int, list[int], list[int]]] = []
    manager.add_leadership_listener(lambda *args: told.append(args))
    controller = Controller(1, EmbeddedMetadataStore(tmp_path))

    async def run() -> tuple[LagMonitor, LagMonitor]:
        await controller.startup(manager)
        created = LagMonitor()
        topic = await created.measure(controller.create_topic(
            "big", partitions, 1, {"cleanup.policy": "compact"}))
        # Shown once led, and its logs made with its configs (it was not shown yet).
        assert controller.topics["big"] is topic
        assert len(manager.partitions) == partitions
        assert all(p.is_leader and p.log.config.compact for p in manager.partitions.values())
        deleted = LagMonitor()
        await deleted.measure(controller.delete_topic("big"))
        return created, deleted

    try:
        created, deleted = asyncio.run(run())
    finally:
        logs.shutdown()
    assert manager.partitions == {} and logs.logs() == []
    assert not any((tmp_path / "logs").glob("big-*"))
    assert told == [("big", partitions, list(range(partitions)), []),
                    ("big", partitions, [], list(range(partitions)))]
    for monitor in (created, deleted):
        assert monitor.lags and max(monitor.lags) < MAX_LAG_S, max(monitor.lags)
    assert EmbeddedMetadataStore(tmp_path).topics() == {}


def test_a_name_is_taken_once_its_creation_is_done(tmp_path: Path) -> None:
    """Changes run one at a time: a second creation of a name waits for the first and is
    then refused, and a deletion waits for the creation it follows."""
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "logs",)), LogConfig())
    logs.startup(background=False)
    manager = ReplicaManager(1, logs)
    controller = Controller(1, EmbeddedMetadataStore(tmp_path))

    async def run() -> list[object]:
        await controller.startup(manager)
        return await asyncio.gather(
            controller.create_topic("t", 2 * IO_BATCH, 1, {}),
            controller.create_topic("t", 1, 1, {}),
            controller.delete_topic("t"),
            return_exceptions=True)

    try:
        first, second, deleted = asyncio.run(run())
    finally:
        logs.shutdown()
    assert isinstance(first, TopicMetadata) and len(first.partitions) == 2 * IO_BATCH
    assert type(second).__name__ == "TopicExistsError"
    assert deleted is first
    assert controller.topics == {} and manager.partitions == {}
