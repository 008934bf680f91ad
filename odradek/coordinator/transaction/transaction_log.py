"""__transaction_state as Kafka writes it (Kafka's TransactionLog): which partition holds a
transactional id, and the records.

Each record's key and value are an int16 version followed by the struct of Kafka's schema
(TransactionLogKey.json, TransactionLogValue.json), so Kafka's tools (kafka-dump-log
--transaction-log-decoder) read what Odradek writes and Odradek loads what Kafka wrote:

- key: TransactionLogKey v0 (the transactional id). A key of another version is skipped
  when loading, as Kafka does (a leftover of an aborted upgrade).
- value: TransactionLogValue v0, as Kafka writes it without transaction version 2
  (KIP-890); v1 (flexible, tagged previous/next producer ids) is read too. The
  partitions are null in state Empty. A null value is a tombstone: the id expired.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.coordinator.group.offsets_topic import java_string_hash
from odradek.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.exceptions import DecodeError
from odradek.protocol.messages.transaction_log_key import TransactionLogKey
from odradek.protocol.messages.transaction_log_value import (
    PartitionsSchema,
    TransactionLogValue,
)
from odradek.protocol.primitives import INT16

KEY_VERSION = 0
VALUE_VERSION = 0  # Kafka writes 1 only with transaction.version 2 (KIP-890)


def partition_for(transactional_id: str, partitions: int) -> int:
    """The __transaction_state partition of a transactional id: Kafka's
    Utils.abs(transactionalId.hashCode) % partitions, where abs(Integer.MIN_VALUE) is 0."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


# ---- writing ------------------------------------------------------------------------------


def key_to_bytes(transactional_id: str) -> bytes:
    out = bytearray(INT16.pack(KEY_VERSION))
    TransactionLogKey(transactional_id=transactional_id).encode_into(out, KEY_VERSION)
    return bytes(out)


def value_to_bytes(transit: TxnTransitMetadata, version: int = VALUE_VERSION) -> bytes:
    if transit.txn_state is TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError(f"a transaction in state Empty has no partitions: {transit}")
    partitions: list[PartitionsSchema] | None = None
    if transit.txn_state is not TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(transit.topic_partitions):
            by_topic.setdefault(topic, []).append(index)
        partitions = [PartitionsSchema(topic=t, partition_ids=ids) for t, ids in by_topic.items()]
    value = TransactionLogValue(
        producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=transit.txn_state.id, transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp)
    out = bytearray(INT16.pack(version))
    value.encode_into(out, version)
    return bytes(out)


# ---- reading ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of a version Kafka's TransactionLog does not know: skipped."""

    version: int


def read_key(key: bytes) -> str | UnknownKey:
    """The transactional id; raises DecodeError for a key that does not parse."""
    version = _version(key, "key")
    if version < TransactionLogKey.MIN_VERSION or version > TransactionLogKey.MAX_VERSION:
        return UnknownKey(version)
    message, _ = TransactionLogKey.decode_from(key, 2, version)
    return message.transactional_id


def read_value(transactional_id: str, value: bytes | None) -> TransactionMetadata | None:
    """The id's metadata as the record says; None for a tombstone. The last producer
    epoch is not in the record: -1, as Kafka loads it."""
    if value is None:
        return None
    version = _version(value, "value")
    if version < TransactionLogValue.MIN_VERSION or version > TransactionLogValue.MAX_VERSION:
        raise DecodeError(f"unknown version {version} of a transaction log value")
    v, _ = TransactionLogValue.decode_from(value, 2, version)
    try:
        state = TransactionState.from_id(v.transaction_status)
    except ValueError as e:
        raise DecodeError(str(e)) from None
    metadata = TransactionMetadata(
        transactional_id=transactional_id, producer_id=v.producer_id,
        last_producer_id=(v.previous_producer_id if v.previous_producer_id != -1
                          else NO_PRODUCER_ID),
        producer_epoch=v.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=v.transaction_timeout_ms, state=state,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms)
    if state is not TransactionState.EMPTY and v.transaction_partitions:
        partitions: set[TopicPartition] = set()
        for p in v.transaction_partitions:
            partitions.update((p.topic, i) for i in p.partition_ids)
        metadata.add_partitions(partitions)
    return metadata


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise DecodeError(f"a transaction log {what} of {len(data)} bytes has no version")
    (version,) = INT16.unpack_from(data, 0)
    return int(version)
