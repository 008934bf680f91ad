"""AlterPartitionManager: sends leaders' ISR changes to the controller (KIP-497).

A leader's Partition proposes one ISR change at a time; the manager batches whatever is
waiting into one AlterPartition request to the active controller, and hands each
partition's answer back to it. Requests that cannot be answered (no controller known, a
broken connection, NOT_CONTROLLER while the controller moves) are sent again after a
backoff, as Kafka's AlterPartitionManager does; a partition whose leader epoch changed
meanwhile is dropped, since its LeaderAndIsr settled the state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient, RequestBuilder
from odradek.broker.partition import Partition
from odradek.cluster.metadata import PartitionState
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_partition_request as request_schema
from odradek.protocol.messages.alter_partition_response import AlterPartitionResponse

log = logging.getLogger(__name__)

# The active controller's id and inter-broker address, if one is known.
ControllerEndpoint = Callable[[], "tuple[int, tuple[str, int]] | None"]
_Proposal = tuple[Partition, int, int, list[int]]  # leader epoch, partition epoch, new ISR
# (partition, leader epoch and partition epoch proposed in, error, the new state)
Completed = Callable[[Partition, int, int, int, PartitionState | None], None]


class AlterPartitionManager:
    def __init__(self, node_id: int, controller: ControllerEndpoint, client: InterBrokerClient,
                 completed: Completed, *, retry_backoff_ms: int = 100,
                 broker_epoch: Callable[[], int] = lambda: -1) -> None:
        self.node_id = node_id
        self._broker_epoch = broker_epoch  # this broker's, which the controller checks
        self._controller = controller
        self._client = client
        self._completed = completed
        self._retry_backoff_s = retry_backoff_ms / 1000
        # Proposed and not yet sent: partition -> (leader epoch, partition epoch, new ISR).
        self._unsent: dict[tuple[str, int], _Proposal] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="alter-partition-manager")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._client.close()

    def submit(self, partition: Partition, new_isr: list[int]) -> None:
        """Proposes `new_isr` for the partition at its current leader and partition epoch
        (Partition's AlterPartitionSender)."""
        self._unsent[partition.tp] = (partition, partition.leader_epoch,
                                      partition.partition_epoch, list(new_isr))
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Only what is still current: a new leader epoch settled the rest.
            items = {tp: item for tp, item in self._unsent.items()
                     if item[0].leader_epoch == item[1] and item[0].is_leader}
            self._unsent.clear()
            if not items:
                continue
            try:
                retry = await self._send(items)
            except Exception:  # a bug here must not stop every ISR change after it
                log.exception("AlterPartition failed")
                retry = list(items)
            if retry:
                for tp in retry:
                    self._unsent.setdefault(tp, items[tp])
                await asyncio.sleep(self._retry_backoff_s)
                self._wakeup.set()

    async def _send(self, items: dict[tuple[str, int], _Proposal]) -> list[tuple[str, int]]:
        """Sends one request; returns the partitions to send again."""
        controller = self._controller()
        if controller is None:
            return list(items)
        controller_id, address = controller
        if self._client.endpoints.get(controller_id) != address:
            self._client.update_endpoints({controller_id: address})

        def build(version: int) -> Message:
            topics: dict[str, request_schema.TopicData] = {}
            for (topic, index), (partition, leader_epoch, partition_epoch, isr) in items.items():
                data = topics.setdefault(topic, request_schema.TopicData(
                    topic_name=topic, topic_id=partition.topic_id))
                p = request_schema.PartitionData(
                    partition_index=index, leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch)
                if version >= 3:  # KIP-903: with broker epochs (-1: not checked here)
                    p.new_isr_with_epochs = [request_schema.BrokerState(broker_id=b)
                                             for b in isr]
                else:
                    p.new_isr = isr
                data.partitions.append(p)
            return request_schema.AlterPartitionRequest(broker_id=self.node_id,
                                                        broker_epoch=self._broker_epoch(),
                                                        topics=list(topics.values()))

        try:
            response = cast(AlterPartitionResponse, await self._client.send(
                controller_id, RequestBuilder(ApiKey.ALTER_PARTITION, build)))
        except (DisconnectedError, KafkaError) as e:
            log.info("AlterPartition to controller %d failed, retrying: %s", controller_id, e)
            return list(items)
        if response.error_code != ErrorCode.NONE:
            # NOT_CONTROLLER: the controller moved; UpdateMetadata tells us where.
            log.info("AlterPartition to broker %d: %s; retrying", controller_id,
                     ErrorCode(response.error_code).name)
            return list(items)
        by_id = {item[0].topic_id: tp[0] for tp, item in items.items()}
        answered: set[tuple[str, int]] = set()
        for t in response.topics:
            topic = t.topic_name or by_id.get(t.topic_id, "")
            for p in t.partitions:
                tp = (topic, p.partition_index)
                item = items.get(tp)
                if item is None or tp in answered:
                    continue
                answered.add(tp)
                partition, leader_epoch, partition_epoch, _ = item
                state = None
                if p.error_code == ErrorCode.NONE:
                    state = PartitionState(partition.replicas, p.leader_id, p.leader_epoch,
                                           list(p.isr), partition_epoch=p.partition_epoch,
                                           leader_recovery_state=p.leader_recovery_state)
                self._completed(partition, leader_epoch, partition_epoch, p.error_code, state)
        return [tp for tp in items if tp not in answered]
