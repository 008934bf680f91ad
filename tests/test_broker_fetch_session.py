"""Incremental fetch sessions (KIP-227) as pure logic: which partitions a fetch reads and
which its response lists."""

from __future__ import annotations

import random
import uuid

from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.replica_manager import FetchPartitionRequest, FetchPartitionResult
from odradek.protocol.errors import ErrorCode

TID = uuid.uuid4()


def req(offset: int) -> FetchPartitionRequest:
    return FetchPartitionRequest(fetch_offset=offset, max_bytes=1 << 20)


def result(hw: int, size: int = 0, error: int = 0) -> FetchPartitionResult:
    return FetchPartitionResult(error, hw, hw, 0, [], size)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_full_then_incremental_fetches_list_only_what_changed() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    a, b = ("t", 0), ("t", 1)
    full = cache.new_context(0, 0, [(a, TID, req(0)), (b, TID, req(0))], [])
    assert full.session_id != 0 and not full.incremental
    assert [tp for tp, _, _ in full.response_partitions([result(5, 100), result(0)])] == [a, b]

    # Epoch 1: the client names only `a` (its offset moved); `b` is read from the session.
    inc = cache.new_context(full.session_id, 1, [(a, TID, req(5))], [])
    assert inc.incremental and [tp for tp, _ in inc.partitions] == [b, a]  # `a` moved last
    assert inc.partitions[1][1].request.fetch_offset == 5
    # Nothing new for `a`, `b` got records: only `b` is listed.
    listed = inc.response_partitions([result(3, 50), result(5)])
    assert [tp for tp, _, _ in listed] == [b]

    # Epoch 2: no changes anywhere: an empty response; then a high watermark change shows.
    inc2 = cache.new_context(full.session_id, 2, [], [])
    assert inc2.response_partitions([result(5), result(3)]) == []
    inc3 = cache.new_context(full.session_id, 3, [], [b])  # `b` forgotten
    assert [tp for tp, _ in inc3.partitions] == [a]
    assert [tp for tp, _, _ in inc3.response_partitions([result(6)])] == [a]


def test_session_errors() -> None:
    cache = FetchSessionCache(10, rng=random.Random(2))
    assert cache.new_context(12345, 1, [], []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    full = cache.new_context(0, 0, [(("t", 0), TID, req(0))], [])
    stale = cache.new_context(full.session_id, 5, [], [])
    assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # Epoch -1 closes the session: the fetch is served without one.
    closing = cache.new_context(full.session_id, -1, [(("t", 0), TID, req(0))], [])
    assert closing.error_code == 0 and closing.session_id == 0
    assert full.session_id not in cache.sessions


def test_sessionless_fetches_list_everything() -> None:
    cache = FetchSessionCache(10)
    ctx = cache.new_context(0, -1, [(("t", 0), TID, req(0))], [])
    assert ctx.session_id == 0 and not cache.sessions
    assert len(ctx.response_partitions([result(0)])) == 1


def test_a_full_cache_evicts_only_idle_sessions() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock, rng=random.Random(3))
    first = cache.new_context(0, 0, [], []).session_id
    cache.new_context(0, 0, [], [])
    assert cache.new_context(0, 0, [], []).session_id == 0  # both slots live: no session
    clock.now = 121.0
    third = cache.new_context(0, 0, [], []).session_id
    assert third != 0 and first not in cache.sessions  # the idle one made room
