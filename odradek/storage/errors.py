"""The storage layer's exceptions, each carrying the Kafka error code the broker answers with.

They all derive from StorageError so that callers can catch "anything the storage layer
refused"; a handler that takes a log directory offline must look for exactly StorageError
(or `error_code == KAFKA_STORAGE_ERROR`), not at its subclasses, which are the client's fault.
"""

from __future__ import annotations

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
    """A CreateTime batch timestamp further from the broker's clock than
    message.timestamp.before.max.ms / message.timestamp.after.max.ms allow."""

    error_code = ErrorCode.INVALID_TIMESTAMP


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch whose first sequence does not follow the last one the
    log has for that producer and epoch (a gap, or a retry older than the last 5 batches),
    or a new epoch that does not start at sequence 0."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of a producer than the log has seen: a fenced (zombie)
    producer instance."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH
