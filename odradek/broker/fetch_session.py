"""Incremental fetch sessions (KIP-227).

A client that fetches many partitions opens a session with a full fetch (session id 0,
epoch 0); the broker remembers the partitions and what it last told the client about
each. Later fetches (session id, epoch 1, 2, ...) name only partitions that changed, and
the response lists only partitions with news: records, an error, or a new high
watermark, last stable offset or log start offset. A partition that returned records
moves to the end of the session, so every partition gets its turn under max_bytes.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from uuid import UUID

from odradek.broker.replica_manager import FetchPartitionRequest, FetchPartitionResult
from odradek.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
INITIAL_EPOCH = 0
FINAL_EPOCH = -1  # closes a session; with session id 0, a fetch without a session
_EVICTABLE_AFTER_S = 120.0  # an idle session may make room for a new one after this long


@dataclass(slots=True)
class CachedPartition:
    topic_id: UUID
    request: FetchPartitionRequest
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: FetchPartitionResult) -> bool:
        """Whether an incremental response must include this partition; records what the
        client will then know."""
        changed = (result.size > 0 or result.error_code != ErrorCode.NONE
                   or result.high_watermark != self.high_watermark
                   or result.last_stable_offset != self.last_stable_offset
                   or result.log_start_offset != self.log_start_offset)
        self.high_watermark = result.high_watermark
        self.last_stable_offset = result.last_stable_offset
        self.log_start_offset = result.log_start_offset
        return changed


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[TopicPartition, CachedPartition]
    last_used: float


@dataclass(slots=True)
class FetchContext:
    """What one fetch reads, and how its response is built."""

    error_code: int
    session_id: int
    partitions: list[tuple[TopicPartition, CachedPartition]]
    session: FetchSession | None = None
    incremental: bool = False

    def response_partitions(
        self, results: list[FetchPartitionResult]
    ) -> list[tuple[TopicPartition, UUID, FetchPartitionResult]]:
        out = []
        for (tp, cached), result in zip(self.partitions, results, strict=True):
            changed = cached.must_respond(result)
            if self.incremental and not changed:
                continue
            out.append((tp, cached.topic_id, result))
            if self.session is not None and result.size > 0:
                self.session.partitions.move_to_end(tp)
        return out


class FetchSessionCache:
    def __init__(self, max_slots: int, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.clock = clock
        self.rng = rng or random.Random()
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recent first

    def new_context(
        self, session_id: int, epoch: int,
        requested: Iterable[tuple[TopicPartition, UUID, FetchPartitionRequest]],
        forgotten: Iterable[TopicPartition],
    ) -> FetchContext:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self.sessions.pop(session_id, None)  # the client closes or restarts it
            partitions = OrderedDict((tp, CachedPartition(tid, req)) for tp, tid, req in requested)
            if epoch == FINAL_EPOCH:
                return FetchContext(ErrorCode.NONE, 0, list(partitions.items()))
            session = self._create(partitions)
            return FetchContext(ErrorCode.NONE, session.id if session else 0,
                                list(partitions.items()), session)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        if epoch != session.epoch:
            return FetchContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        for tp, tid, req in requested:
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(tid, req)
            else:
                cached.request = req
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        session.last_used = self.clock()
        self.sessions.move_to_end(session.id)
        return FetchContext(ErrorCode.NONE, session.id, list(session.partitions.items()),
                            session, incremental=True)

    def _create(self, partitions: OrderedDict[TopicPartition, CachedPartition]
                ) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        now = self.clock()
        if len(self.sessions) >= self.max_slots:
            oldest = next(iter(self.sessions.values()))
            if now - oldest.last_used < _EVICTABLE_AFTER_S:
                return None  # full of live sessions: this client fetches without one
            del self.sessions[oldest.id]
        while True:
            session_id = self.rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                break
        session = FetchSession(session_id, 1, partitions, now)
        self.sessions[session_id] = session
        return session
