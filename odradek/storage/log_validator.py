"""LogValidator: the leader's check of every record of a produced batch, before any is written.

Kafka's org.apache.kafka.storage.internals.log.LogValidator for magic v2. A batch with a
valid CRC can still carry records that would poison every later reader (a count that
disagrees with the data, offset deltas out of order, garbage compressed bytes), so the
leader inflates each client batch (within a bound) and walks every record. The walk
itself is compiled (odradek/protocol/_record_walker.c); this module is the policy: which
setting asks for which check, and which Kafka error code answers it.

- Structural damage -> CorruptRecordError (CORRUPT_MESSAGE): a compressed body that does
  not inflate, a record count other than the header's, offset deltas other than
  0..n-1, a length or varint that does not add up, a null header key, bytes after the
  last record. Kafka answers INVALID_RECORD for most of these and UNKNOWN_SERVER_ERROR
  for a body it cannot inflate; CORRUPT_MESSAGE says what happened.
- A compressed batch inflating past the bound -> MessageTooLargeError
  (MESSAGE_TOO_LARGE), so a Java producer splits the batch and retries it, as it does
  for a batch over max.message.bytes; a bomb of one record fails.
- Records at fault, listed in Produce v8+'s record_errors (index in the batch, message),
  as Kafka's RecordValidationException: a record without a key on a compacted topic
  (INVALID_RECORD); a CreateTime timestamp outside message.timestamp.before/after.max.ms,
  or any record of a client batch that claims LogAppendTime (INVALID_TIMESTAMP, which wins
  when both occur). A producer then fails exactly those records.
- The header's maxTimestamp is made the records' largest, as Kafka's setMaxTimestamp
  does (the CRC is recomputed only when it changes): retention and the time index trust it.

Followers do not come here: they trust the leader's bytes. `RecordValidation.enabled`
(odradek.record.validation.enable) switches the walk off for benchmarks and diagnosis;
the header and CRC checks of odradek.protocol.records.validate_batch stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from odradek.protocol._record_walker import (
    PROBLEM_NO_KEY,
    WALK_CHECK_TIMESTAMPS,
    WALK_KEY_REQUIRED,
    RecordWalkError,
    walk_records,
)
from odradek.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, decompress
from odradek.protocol.exceptions import (
    CorruptRecordError,
    DecompressionLimitError,
    InvalidRecordError,
)
from odradek.protocol.records import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidTimestampError, MessageTooLargeError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "MAX_RECORD_ERRORS",
    "AppendOrigin",
    "RecordValidation",
    "validate_records",
]

# The broker's default for odradek.batch.max.decompressed.bytes: 64x Kafka's default
# max.message.bytes, far beyond what records compress to in practice, and far from a
# broker's memory.
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = DEFAULT_MAX_DECOMPRESSED_SIZE

# record_errors listed per refused batch; the message counts them all. Kafka lists every
# one, but a 64 MiB batch of keyless records would make a response of millions of entries.
MAX_RECORD_ERRORS: Final = 10_000

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class AppendOrigin(Enum):
    """Who appends, as Kafka's AppendOrigin: what the leader checks depends on it."""

    CLIENT = "client"  # a Produce request: every rule
    COORDINATOR = "coordinator"  # the broker's own coordinators: may write control batches
    REPLICATION = "replication"  # a follower copying its leader: header and CRC only


@dataclass(frozen=True, slots=True)
class RecordValidation:
    """The broker's settings for the record walk (docs/configuration.md)."""

    enabled: bool = True  # odradek.record.validation.enable
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES  # odradek.batch.max...


def validate_records(buf: memoryview, pos: int, header: RecordBatchHeader, config: LogConfig,
                     now: int, validation: RecordValidation, name: str) -> int:
    """Inflates (if compressed) and walks every record of the batch at `pos`, already
    checked by validate_batch; returns the records' largest timestamp (-1 if none has one).

    Raises CorruptRecordError, MessageTooLargeError, InvalidRecordError or
    InvalidTimestampError (the last two with record_errors), as the module says.
    """
    count = header.records_count
    if header.last_offset_delta != count - 1:  # validate_batch checks it for clients only
        raise CorruptRecordError(
            f"record batch at position {pos} of {name}: lastOffsetDelta "
            f"{header.last_offset_delta} with {count} records")
    section = buf[pos + RECORDS_OFFSET : pos + header.batch_length + LOG_OVERHEAD]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec:
        # One broker setting bounds what a batch may cost in memory, whatever the topic.
        try:
            section = decompress(codec, section, max_size=validation.max_decompressed_bytes)
        except DecompressionLimitError as e:
            raise MessageTooLargeError(
                f"record batch at position {pos} of {name}: {e} "
                f"(odradek.batch.max.decompressed.bytes)") from None
        except CorruptRecordError as e:
            raise CorruptRecordError(f"record batch at position {pos} of {name}: {e}") from None
    flags = WALK_KEY_REQUIRED if config.compact else 0
    low = high = 0
    create_time = config.message_timestamp_type == "CreateTime"
    if create_time:
        flags |= WALK_CHECK_TIMESTAMPS
        low = max(now - config.message_timestamp_before_max_ms, _INT64_MIN)
        high = min(now + config.message_timestamp_after_max_ms, _INT64_MAX)
    try:
        largest, problem_count, problems = walk_records(
            section, count, header.base_timestamp, low, high, flags, MAX_RECORD_ERRORS)
    except RecordWalkError as e:
        raise CorruptRecordError(f"record batch at position {pos} of {name}: {e}") from None
    if header.attributes & TIMESTAMP_TYPE_MASK:
        _refuse_log_append_time(header, problems or [], name)
    if problem_count:
        _refuse(problems or [], problem_count, name, low, high)
    return largest


def _refuse(problems: list[tuple[int, int, int]], total: int, name: str, low: int,
            high: int) -> None:
    errors = [(index, _no_key(name) if reason == PROBLEM_NO_KEY else
               f"Timestamp {timestamp} of record {index} is out of range. The timestamp "
               f"should be within [{low}, {high}] (message.timestamp.before/after.max.ms)")
              for index, reason, timestamp in problems]
    if any(reason != PROBLEM_NO_KEY for _, reason, _ in problems):
        raise InvalidTimestampError(
            f"One or more records have been rejected due to invalid timestamp: {total} "
            f"record errors in {name}, the first: {errors[0][1]}", errors)
    raise InvalidRecordError(
        f"One or more records have been rejected due to {total} record errors in total, "
        f"and only showing the first three errors at most: "
        f"{[message for _, message in errors[:3]]}", errors)


def _refuse_log_append_time(header: RecordBatchHeader, problems: list[tuple[int, int, int]],
                            name: str) -> None:
    # Kafka refuses it on LogAppendTime topics and for records without a timestamp, and
    # takes the header's maxTimestamp as every record's on CreateTime topics; no producer
    # sets the flag, so Odradek refuses it everywhere, record by record as Kafka does.
    no_key = {index for index, reason, _ in problems if reason == PROBLEM_NO_KEY}
    message = (f"Invalid timestamp type in a record of {name}: the producer should not "
               f"set the timestamp type to LogAppendTime")
    errors = [(i, _no_key(name) if i in no_key else message)
              for i in range(min(header.records_count, MAX_RECORD_ERRORS))]
    raise InvalidTimestampError(
        f"One or more records have been rejected due to invalid timestamp: {message}", errors)


def _no_key(name: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {name}"
