"""Producer ids for idempotent producers, handed out from blocks reserved in the store.

Kafka's ProducerIdManager reserves blocks of 1000 ids in ZooKeeper (or from the KRaft
controller) so that brokers never hand out the same id and a restart never reuses one:
ids of an unfinished block are skipped, not reissued. A block is reserved in a worker
thread (a ZooKeeper round trip, or the metadata file's write), off the event loop.
"""

from __future__ import annotations

import asyncio

from odradek.cluster.metadata import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore, block_size: int = BLOCK_SIZE) -> None:
        self.store = store
        self.block_size = block_size
        self._next = 0
        self._end = 0
        self._reserving = asyncio.Lock()  # one reservation at a time, for every waiter

    async def generate(self) -> int:
        if self._next >= self._end:
            async with self._reserving:
                if self._next >= self._end:  # not reserved by the one before
                    first = await asyncio.to_thread(self.store.allocate_producer_ids,
                                                    self.block_size)
                    self._next, self._end = first, first + self.block_size
        producer_id = self._next
        self._next += 1
        return producer_id
