"""__transaction_state records against Kafka's byte layout (TransactionLogKey.json and
TransactionLogValue.json, each behind an int16 version), and the partition of an id."""

from __future__ import annotations

import struct

import pytest

from odradek.coordinator.transaction.transaction_log import (
    UnknownKey,
    key_to_bytes,
    partition_for,
    read_key,
    read_value,
    value_to_bytes,
)
from odradek.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.exceptions import DecodeError

S = TransactionState


def string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def transit(state: TransactionState, partitions: frozenset[tuple[str, int]] = frozenset(),
            start: int = 1_000) -> TxnTransitMetadata:
    return TxnTransitMetadata(producer_id=4242, last_producer_id=4242, producer_epoch=7,
                              last_producer_epoch=6, txn_timeout_ms=60_000, txn_state=state,
                              topic_partitions=partitions, txn_start_timestamp=start,
                              txn_last_update_timestamp=2_000)


def test_key_bytes() -> None:
    key = key_to_bytes("my-txn")
    assert key == struct.pack(">h", 0) + string("my-txn")
    assert read_key(key) == "my-txn"


def test_key_of_unknown_version_is_skipped() -> None:
    assert read_key(struct.pack(">h", 1) + string("x")) == UnknownKey(1)
    with pytest.raises(DecodeError):
        read_key(b"\x00")


def test_ongoing_value_bytes() -> None:
    value = value_to_bytes(transit(S.ONGOING, frozenset({("b", 2), ("a", 1), ("b", 0)})))
    expected = (
        struct.pack(">h", 0)  # version
        + struct.pack(">qhib", 4242, 7, 60_000, 1)  # producer id, epoch, timeout, Ongoing
        + struct.pack(">i", 2)  # TransactionPartitions: 2 topics
        + string("a") + struct.pack(">ii", 1, 1)
        + string("b") + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 2_000, 1_000))  # last update, start
    assert value == expected
    m = read_value("my-txn", value)
    assert m is not None
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.txn_timeout_ms) == (
        "my-txn", 4242, 7, 60_000)
    assert m.state is S.ONGOING
    assert m.topic_partitions == {("a", 1), ("b", 0), ("b", 2)}
    assert (m.txn_start_timestamp, m.txn_last_update_timestamp) == (1_000, 2_000)
    # Neither is in the record.
    assert (m.last_producer_id, m.last_producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert m.pending_state is None


def test_empty_value_has_null_partitions() -> None:
    value = value_to_bytes(transit(S.EMPTY, start=-1))
    assert value == (struct.pack(">h", 0) + struct.pack(">qhib", 4242, 7, 60_000, 0)
                     + struct.pack(">i", -1) + struct.pack(">qq", 2_000, -1))
    m = read_value("t", value)
    assert m is not None and m.state is S.EMPTY and not m.topic_partitions
    with pytest.raises(ValueError):
        value_to_bytes(transit(S.EMPTY, frozenset({("a", 0)})))


@pytest.mark.parametrize("state", [s for s in S if s is not S.EMPTY])
def test_every_state_round_trips(state: TransactionState) -> None:
    partitions = frozenset({("orders", 3), ("__consumer_offsets", 17)})
    value = value_to_bytes(transit(state, partitions))
    assert value[2 + 14] == state.id  # the status byte
    m = read_value("t", value)
    assert m is not None and m.state is state and m.topic_partitions == partitions


def test_complete_value_has_empty_partitions() -> None:
    value = value_to_bytes(transit(S.COMPLETE_COMMIT))
    assert value[2 + 15:2 + 19] == struct.pack(">i", 0)


def test_tombstone() -> None:
    assert read_value("t", None) is None


def test_flexible_value_v1_is_read() -> None:
    """Kafka 4 with transaction.version 2 writes v1: compact fields and tagged ids."""
    def uvarint(n: int) -> bytes:
        return bytes([n])  # small numbers only

    topic = b"orders"
    value = (struct.pack(">h", 1) + struct.pack(">qhib", 5000, 3, 10_000, 2)
             + uvarint(2)  # one topic
             + uvarint(len(topic) + 1) + topic + uvarint(3) + struct.pack(">ii", 0, 1)
             + b"\x00"  # the topic's tagged fields
             + struct.pack(">qq", 9_000, 8_000)
             + uvarint(2)  # two tagged fields
             + uvarint(0) + uvarint(8) + struct.pack(">q", 4999)  # PreviousProducerId
             + uvarint(2) + uvarint(2) + struct.pack(">h", 2))  # ClientTransactionVersion
    m = read_value("t", value)
    assert m is not None
    assert (m.producer_id, m.producer_epoch, m.state) == (5000, 3, S.PREPARE_COMMIT)
    assert m.topic_partitions == {("orders", 0), ("orders", 1)}
    assert m.last_producer_id == 4999
    assert (m.txn_start_timestamp, m.txn_last_update_timestamp) == (8_000, 9_000)


def test_bad_values() -> None:
    with pytest.raises(DecodeError):
        read_value("t", struct.pack(">h", 2) + b"\x00" * 40)
    bad_state = struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 1, 9) + struct.pack(
        ">iqq", -1, 0, 0)
    with pytest.raises(DecodeError):
        read_value("t", bad_state)


def java_hash(s: str) -> int:
    """String.hashCode for BMP strings, written out independently."""
    h = 0
    for c in s:
        h = (31 * h + ord(c)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize("tid", ["my-txn", "my-group", "transactional-producer-1", "é-txn",
                                 "a", "", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"])
def test_partition_for_is_utils_abs_of_hash_code(tid: str) -> None:
    h = java_hash(tid)
    assert partition_for(tid, 50) == (abs(h) if h != -(2**31) else 0) % 50


def test_partition_for_known_values() -> None:
    # As Kafka computes it (docs/groups.md: the same function places my-group in 12).
    assert partition_for("my-group", 50) == 12
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs gives 0.
    assert java_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    # Outside the BMP: UTF-16 surrogate pairs, as Java hashes them.
    assert partition_for("\U0001F600", 50) == (31 * 0xD83D + 0xDE00) % 50
