"""ControllerChannelManager: the controller's requests to the brokers, in order.

Kafka's ControllerChannelManager keeps a queue and a sender per broker: requests to one
broker (LeaderAndIsr, UpdateMetadata, StopReplica) must arrive in the order the controller
made them, and one that fails is sent again until it is answered or the broker leaves the
cluster. Here each broker's queue is drained by an asyncio task over one InterBrokerClient.

Each request carries the broker epoch of the registration it is meant for (the
`broker_epoch` field of these requests), so that a broker that registered again since
refuses it (STALE_BROKER_EPOCH) rather than acting on what was meant for its predecessor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from odradek.broker.inter_broker_client import (
    DisconnectedError,
    InterBrokerClient,
    RequestBuilder,
)
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.message import Message

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1

Callback = Callable[[Message], None]
Request = Message | RequestBuilder


class ControllerChannelManager:
    def __init__(self, client: InterBrokerClient) -> None:
        self.client = client
        self._queues: dict[int, asyncio.Queue[tuple[Request, Callback | None]]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}

    def update_brokers(self, endpoints: Mapping[int, tuple[str, int]],
                       epochs: Mapping[int, int] | None = None) -> None:
        """The live brokers, with their broker epochs: senders start for new ones and stop
        for those gone (their queued requests are dropped; a broker that comes back gets
        fresh state)."""
        self.client.update_endpoints(endpoints)
        self._epochs = dict(epochs or {})
        for broker_id in list(self._senders):
            if broker_id not in endpoints:
                self._senders.pop(broker_id).cancel()
                del self._queues[broker_id]
        for broker_id in endpoints:
            if broker_id not in self._senders:
                self._queues[broker_id] = asyncio.Queue()
                self._senders[broker_id] = asyncio.get_running_loop().create_task(
                    self._send_loop(broker_id), name=f"controller-to-broker-{broker_id}")

    def send(self, broker_id: int, request: Request, callback: Callback | None = None) -> None:
        queue = self._queues.get(broker_id)
        if queue is None:
            log.debug("no channel to broker %d: %s dropped", broker_id, _name(request))
            return
        queue.put_nowait((request, callback))

    async def _send_loop(self, broker_id: int) -> None:
        queue = self._queues[broker_id]
        while True:
            request, callback = await queue.get()
            while True:
                try:
                    response = await self.client.send(
                        broker_id, self._with_epoch(request, self._epochs.get(broker_id, -1)))
                except DisconnectedError as e:
                    log.debug("controller request to broker %d failed, retrying: %s",
                              broker_id, e)
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue
                except KafkaError as e:  # the broker does not support it: nothing to retry
                    log.error("controller request %s to broker %d refused: %s",
                              _name(request), broker_id, e)
                    break
                if callback is not None:
                    try:
                        callback(response)
                    except Exception:
                        log.exception("handling broker %d's answer to %s failed", broker_id,
                                      _name(request))
                break

    @staticmethod
    def _with_epoch(request: Request, epoch: int) -> Request:
        """The request with the recipient's broker epoch, in whichever version goes out."""
        if isinstance(request, RequestBuilder):
            build = request.build

            def stamped(version: int) -> Message:
                message = build(version)
                if hasattr(message, "broker_epoch"):
                    message.broker_epoch = epoch
                return message

            return RequestBuilder(request.api_key, stamped, request.max_version)
        if hasattr(request, "broker_epoch"):
            request.broker_epoch = epoch
        return request

    async def close(self) -> None:
        for task in self._senders.values():
            task.cancel()
        self._senders.clear()
        self._queues.clear()
        await self.client.close()


def _name(request: Request) -> str:
    return ApiKey(request.api_key).name if isinstance(request, RequestBuilder) else request.NAME
