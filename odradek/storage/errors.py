"""The storage layer's exceptions, each carrying the Kafka error code the broker answers with.

They all derive from StorageError so that callers can catch "anything the storage layer
refused"; a handler that takes a log directory offline must look for exactly StorageError
(or `error_code == KAFKA_STORAGE_ERROR`), not at its subclasses, which are the client's fault.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError


class StorageError(KafkaError):
    """A log directory, segment, index or checkpoint that cannot be read or written as it should."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class OffsetOutOfRangeError(StorageError):
    """A fetch or truncation at an offset outside [log start offset, log end offset]."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class MessageTooLargeError(StorageError):
    """A record batch larger than the topic's max.message.bytes."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    """A record batch that could never fit in one segment (larger than segment.bytes)."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidConfigError(StorageError):
    """A topic or broker log setting with an unknown name or a value Kafka would refuse.

    `key` is the offending setting's name, so CreateTopics and AlterConfigs can say which.
    """

    error_code = ErrorCode.INVALID_CONFIG

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class InvalidTimestampError(StorageError):
    """A CreateTime record timestamp further from the broker's clock than
    message.timestamp.before.max.ms / message.timestamp.after.max.ms allow, or a client
    batch that claims LogAppendTime. `record_errors`: the records at fault as (index in the
    batch, message), as InvalidRecordError's (Produce v8+)."""

    error_code = ErrorCode.INVALID_TIMESTAMP

    def __init__(self, message: str = "",
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        super().__init__(message)
        self.record_errors = list(record_errors)


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch whose first sequence does not follow the last one the
    log has for that producer and epoch (a gap, or a retry older than the last 5 batches),
    or a new epoch that does not start at sequence 0."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of a producer than the log has seen: a fenced (zombie)
    producer instance."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class DiskFullError(StorageError):
    """An append refused for lack of space: the log dir is below its free-space reserve
    (log.dir.min.free.bytes), or a write ran out of space and was undone. Nothing was
    written; the producer retries (KAFKA_STORAGE_ERROR is retriable) and succeeds once
    space returns."""


class LogDirOfflineError(StorageError):
    """The partition's log dir (or the partition's own files) failed an I/O operation and
    was taken offline: no more appends there until an operator repairs it and restarts."""


class SegmentChangedError(StorageError):
    """A segment file is not what the broker wrote: deleted, or shorter or longer than it
    believes (changed by something else). Its partition goes offline."""
