"""RecordBatch v2 (magic 2): batch headers, CRC-32C, in-place rewrites, records. Sans-I/O.

Batches stay bytes. The broker's hot path (append, fetch) touches only the 61-byte batch
header: iter_batch_headers walks a buffer of concatenated batches with one struct call per
batch, validate_batch checks the CRC-32C on a memoryview slice (no copy), and
assign_offsets / set_partition_leader_epoch / set_log_append_time rewrite fields in place.
Decoding and building individual records (decode_records, build_record_batch) is for tools,
tests and the coordinators' own small batches, never for serving user data.

Layout and names follow Kafka's DefaultRecordBatch and DefaultRecord; see
docs/implementation.html section 5.3 ("Message Format").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, NamedTuple

from crc32c import crc32c

from odradek.protocol.compression import (
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    compress,
    decompress,
)
from odradek.protocol.exceptions import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "CONTROL_FLAG_MASK",
    "CONTROL_RECORD_KEY_VERSION",
    "CRC_OFFSET",
    "CREATE_TIME",
    "CURRENT_MAGIC_VALUE",
    "DELETE_HORIZON_FLAG_MASK",
    "END_TXN_MARKER_VERSION",
    "HEADER_SIZE_UP_TO_MAGIC",
    "HEADER_STRUCT",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "ControlRecordType",
    "Record",
    "RecordBatchHeader",
    "SimpleRecord",
    "assign_offsets",
    "build_control_batch",
    "build_record_batch",
    "compute_crc",
    "decode_control_record",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_record",
    "encode_varint",
    "encode_varlong",
    "iter_batch_headers",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "validate_batch",
    "validate_crc",
]

# --- Header layout (DefaultRecordBatch) -----------------------------------------------------

HEADER_STRUCT: Final = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength: bytes after this field
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc: CRC-32C of attributes .. end of batch
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)

BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
BASE_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
PRODUCER_EPOCH_OFFSET: Final = 51
BASE_SEQUENCE_OFFSET: Final = 53
RECORDS_COUNT_OFFSET: Final = 57
RECORDS_OFFSET: Final = 61
RECORD_BATCH_OVERHEAD: Final = RECORDS_OFFSET  # the 61-byte header
assert HEADER_STRUCT.size == RECORD_BATCH_OVERHEAD

LOG_OVERHEAD: Final = 12  # baseOffset + batchLength, the part batchLength does not count
HEADER_SIZE_UP_TO_MAGIC: Final = 17  # enough to tell a v2 batch from a legacy message
MIN_BATCH_LENGTH: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49

CURRENT_MAGIC_VALUE: Final = 2

# --- Attributes ---------------------------------------------------------------------------

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

CREATE_TIME: Final = 0
LOG_APPEND_TIME: Final = 1

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

_INT32_MAX: Final = 0x7FFFFFFF
# Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength, headersCount, one byte each.
_MIN_RECORD_SIZE: Final = 7

_UP_TO_MAGIC = struct.Struct(">ixxxxb")  # batchLength .. magic, read at LENGTH_OFFSET
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_ATTRS_AND_LENGTH = struct.Struct(">ixxxxxxxxxh")  # batchLength, attributes

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview


class ControlRecordType(IntEnum):
    """The `type` in a control record's key (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


# --- Batch header -------------------------------------------------------------------------


@dataclass(slots=True)
class RecordBatchHeader:
    """The 61 header bytes of one batch, as parsed; the batch itself stays in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: Buffer, pos: int = 0) -> RecordBatchHeader:
        """Parse the header at `pos`; legacy magic -> InvalidRecordError, else Corrupt."""
        remaining = len(buf) - pos
        if remaining < RECORD_BATCH_OVERHEAD:
            if remaining >= HEADER_SIZE_UP_TO_MAGIC:
                _check_magic(_UP_TO_MAGIC.unpack_from(buf, pos + LENGTH_OFFSET)[1], pos)
            raise CorruptRecordError(
                f"truncated record batch at position {pos}: {remaining} bytes, "
                f"fewer than the {RECORD_BATCH_OVERHEAD}-byte header"
            )
        header = cls(*HEADER_STRUCT.unpack_from(buf, pos))
        _check_magic(header.magic, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise _short_batch_error(header.batch_length, pos)
        return header

    @property
    def size_in_bytes(self) -> int:
        """Whole batch, header included (batchLength does not count its first 12 bytes)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Codec id (see odradek.protocol.compression)."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        """A control batch (transaction marker); never handed to applications."""
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by compaction: baseTimestamp then holds the delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at int32 max, as Kafka's do."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        delta = self.last_offset_delta
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta


def _check_magic(magic: int, pos: int) -> None:
    if magic == CURRENT_MAGIC_VALUE:
        return
    if magic in (0, 1):
        raise InvalidRecordError(
            f"legacy message format (magic v{magic}, Kafka before 0.11) at position {pos} is "
            "not supported: only RecordBatch v2 (magic 2) is accepted; upgrade the client "
            "or set its message format / api version to 0.11 or later"
        )
    raise CorruptRecordError(f"record batch at position {pos} has unknown magic {magic}")


def _short_batch_error(batch_length: int, pos: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record batch at position {pos} has batchLength {batch_length}, less than the "
        f"minimum {MIN_BATCH_LENGTH} (a {RECORD_BATCH_OVERHEAD}-byte header)"
    )


def iter_batch_headers(
    buf: Buffer, *, allow_partial: bool = False
) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Yield (position, header) for each batch in a buffer of concatenated batches.

    Checks what the walk needs: a whole header, magic 2 (legacy v0/v1 ->
    InvalidRecordError), a sane batchLength that fits in the buffer. A Fetch response may
    end with a partial batch (the broker cuts at the byte limit); allow_partial=True stops
    quietly there instead of raising CorruptRecordError. Does not check CRCs (see
    validate_batch) and never copies the buffer.
    """
    unpack_from = HEADER_STRUCT.unpack_from
    make = RecordBatchHeader
    end = len(buf)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining >= RECORD_BATCH_OVERHEAD:
            fields = unpack_from(buf, pos)
            batch_length = fields[1]
            magic = fields[3]
        elif remaining >= HEADER_SIZE_UP_TO_MAGIC:
            fields = None
            batch_length, magic = _UP_TO_MAGIC.unpack_from(buf, pos + LENGTH_OFFSET)
        else:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"truncated record batch at position {pos}: {remaining} trailing bytes"
            )
        if magic != CURRENT_MAGIC_VALUE:
            _check_magic(magic, pos)
        if batch_length < MIN_BATCH_LENGTH:
            raise _short_batch_error(batch_length, pos)
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"truncated record batch at position {pos}: batchLength {batch_length} "
                f"needs {size} bytes, {remaining} left"
            )
        yield pos, make(*fields)  # size >= 61 and size <= remaining, so fields is set
        pos += size


# --- Validation ---------------------------------------------------------------------------


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of attributes .. end of the batch of `size` bytes at `pos`, without copying."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def validate_crc(buf: Buffer, pos: int, header: RecordBatchHeader) -> None:
    """CorruptRecordError unless the stored CRC matches the batch bytes."""
    size = header.batch_length + LOG_OVERHEAD
    if header.batch_length < MIN_BATCH_LENGTH or pos + size > len(buf):
        raise CorruptRecordError(f"record batch at position {pos} does not fit in the buffer")
    actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} is corrupt: stored CRC {header.crc:#010x}, "
            f"computed {actual:#010x}"
        )


def validate_batch(
    buf: Buffer, pos: int, header: RecordBatchHeader, *, from_client: bool = True
) -> None:
    """Check a batch before it is appended: CRC, then what its header alone can tell.

    Always (CorruptRecordError): the CRC, recordsCount >= 0, lastOffsetDelta covering the
    records, an uncompressed records section big enough for recordsCount records; an
    unknown codec is UnsupportedCompressionError. With from_client (a Produce request,
    Kafka's AppendOrigin.CLIENT) also Kafka's LogValidator rules (InvalidRecordError): at
    least one record, lastOffsetDelta == recordsCount - 1, no control batches, a sequence
    when there is a producer id, a producer id when transactional. Replicated or recovered
    batches (from_client=False) may legitimately be emptied by compaction, which keeps
    lastOffsetDelta.
    """
    validate_crc(buf, pos, header)
    count = header.records_count
    delta = header.last_offset_delta
    if count < 0:
        raise CorruptRecordError(f"record batch at position {pos} has recordsCount {count}")
    if delta < count - 1:
        raise CorruptRecordError(
            f"record batch at position {pos}: lastOffsetDelta {delta} is too small "
            f"for {count} records"
        )
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(
            f"record batch at position {pos} uses unknown compression codec id {codec}"
        )
    if codec == 0 and count * _MIN_RECORD_SIZE > header.batch_length - MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at position {pos}: {header.batch_length - MIN_BATCH_LENGTH} "
            f"bytes cannot hold {count} records"
        )
    if not from_client:
        return
    if count == 0:
        raise InvalidRecordError(f"record batch at position {pos} has no records")
    if delta != count - 1:
        raise InvalidRecordError(
            f"record batch at position {pos}: inconsistent offset range (lastOffsetDelta "
            f"{delta}) and count of records {count}"
        )
    if header.attributes & CONTROL_FLAG_MASK:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.producer_id >= 0:
        if header.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence number {header.base_sequence} in record batch with "
                f"producerId {header.producer_id}"
            )
    elif header.attributes & TRANSACTIONAL_FLAG_MASK:
        raise InvalidRecordError("transactional record batch without a producer id")


# --- In-place rewrites (the broker's side of append) --------------------------------------


def assign_offsets(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Set baseOffset; it is outside the CRC, so the batch stays valid as it is."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Set partitionLeaderEpoch; also outside the CRC."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: WritableBuffer, pos: int, timestamp_type: int, max_timestamp: int
) -> None:
    """Set the timestamp type bit and maxTimestamp, then recompute the CRC in place.

    Kafka's DefaultRecordBatch.setMaxTimestamp: a no-op when nothing changes. Validate the
    batch first: the new CRC vouches for whatever bytes are there.
    """
    batch_length, attributes = _ATTRS_AND_LENGTH.unpack_from(buf, pos + LENGTH_OFFSET)
    if timestamp_type == LOG_APPEND_TIME:
        new_attributes = attributes | TIMESTAMP_TYPE_MASK
    elif timestamp_type == CREATE_TIME:
        new_attributes = attributes & ~TIMESTAMP_TYPE_MASK
    else:
        raise ValueError(f"timestamp type must be 0 or 1, not {timestamp_type}")
    if (
        new_attributes == attributes
        and _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)[0] == max_timestamp
    ):
        return
    size = batch_length + LOG_OVERHEAD
    if batch_length < MIN_BATCH_LENGTH or pos + size > len(buf):
        raise CorruptRecordError(f"record batch at position {pos} does not fit in the buffer")
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, new_attributes)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def set_log_append_time(buf: WritableBuffer, pos: int, timestamp: int) -> None:
    """Stamp the batch with the broker's clock (a topic with LogAppendTime)."""
    set_max_timestamp(buf, pos, LOG_APPEND_TIME, timestamp)


# --- Varints (protobuf zigzag, as Kafka's ByteUtils) --------------------------------------

_ONE_BYTE: Final = tuple(bytes((i,)) for i in range(128))


def encode_varint(value: int) -> bytes:
    """Zigzag varint of an int32 (1 to 5 bytes)."""
    if not -0x80000000 <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    v = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    return _encode_unsigned(v)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of an int64 (1 to 10 bytes)."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of int64 range: {value}")
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    return _encode_unsigned(v)


def _encode_unsigned(v: int) -> bytes:
    if v < 0x80:
        return _ONE_BYTE[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at pos; at most 5 bytes, as Java's int.

    Bits past 32 in a fifth byte are dropped, as Java's ByteUtils.readVarint does.
    """
    return _decode_zigzag(buf, pos, 32, "varint")


def decode_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag varlong at pos; at most 10 bytes."""
    return _decode_zigzag(buf, pos, 64, "varlong")


def _decode_zigzag(buf: Buffer, pos: int, bits: int, what: str) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        value = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift >= bits:
                raise CorruptRecordError(f"{what} is longer than {(bits + 6) // 7} bytes")
    except IndexError:
        raise CorruptRecordError(f"truncated {what}") from None
    value &= (1 << bits) - 1
    return (value >> 1) ^ -(value & 1), pos


# --- Records ------------------------------------------------------------------------------

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Record:
    """One record of a batch. offset and timestamp are absolute, set by decode_records."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0
    offset: int = 0
    timestamp: int = 0


class SimpleRecord(NamedTuple):
    """What build_record_batch takes; a plain (key, value[, headers[, timestamp]]) works too.

    timestamp None means the batch's base timestamp.
    """

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int | None = None


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Header] = (),
    attributes: int = 0,
) -> bytes:
    """One record as it sits in a batch: varint length, then the body (DefaultRecord)."""
    body = bytearray()
    body.append(attributes)
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _put_bytes(body, key)
    _put_bytes(body, value)
    headers = list(headers)
    body += encode_varint(len(headers))
    for h_key, h_value in headers:
        raw_key = h_key.encode("utf-8", "surrogateescape")
        body += encode_varint(len(raw_key))
        body += raw_key
        _put_bytes(body, h_value)
    return encode_varint(len(body)) + body


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1): null
    else:
        out += encode_varint(len(data))
        out += data


def decode_records(
    buf: Buffer,
    pos: int = 0,
    header: RecordBatchHeader | None = None,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Decompress (at most max_size bytes) and parse every record of the batch at pos.

    Does not check the CRC (validate_batch does). Anything inconsistent -- truncated
    fields, lengths past the record, a count that does not match the data -- raises
    CorruptRecordError. Header keys that are not UTF-8 decode with surrogateescape, so
    they round-trip through encode_record byte for byte (Java would substitute U+FFFD).
    """
    if header is None:
        header = RecordBatchHeader.parse(buf, pos)
    end = pos + header.batch_length + LOG_OVERHEAD
    if header.batch_length < MIN_BATCH_LENGTH or end > len(buf):
        raise CorruptRecordError(f"record batch at position {pos} does not fit in the buffer")
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"record batch at position {pos} has recordsCount {count}")
    section = memoryview(buf)[pos + RECORDS_OFFSET : end]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    data = bytes(section) if codec == 0 else decompress(codec, section, max_size=max_size)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.timestamp_type == LOG_APPEND_TIME
    max_timestamp = header.max_timestamp
    records: list[Record] = []
    p = 0
    size = len(data)
    for _ in range(count):
        if p >= size:
            raise CorruptRecordError(
                f"record batch at position {pos}: recordsCount {count}, data for only "
                f"{len(records)}"
            )
        record, p = _decode_record(data, p)
        record.offset = base_offset + record.offset_delta
        record.timestamp = (
            max_timestamp if log_append_time else base_timestamp + record.timestamp_delta
        )
        records.append(record)
    if p != size:
        raise CorruptRecordError(
            f"record batch at position {pos}: {size - p} bytes left after {count} records"
        )
    return records


def _decode_record(data: bytes, p: int) -> tuple[Record, int]:
    length, p = decode_varint(data, p)
    if length < _MIN_RECORD_SIZE - 1 or length > len(data) - p:
        raise CorruptRecordError(f"record length {length} with {len(data) - p} bytes left")
    body_end = p + length
    attributes = data[p]
    timestamp_delta, p = decode_varlong(data, p + 1)
    offset_delta, p = decode_varint(data, p)
    key, p = _get_bytes(data, p, body_end, "key")
    value, p = _get_bytes(data, p, body_end, "value")
    header_count, p = decode_varint(data, p)
    if header_count < 0 or header_count * 2 > body_end - p:
        raise CorruptRecordError(f"invalid number of record headers {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        key_len, p = decode_varint(data, p)
        if key_len < 0 or key_len > body_end - p:
            raise CorruptRecordError(f"invalid record header key size {key_len}")
        h_key = data[p : p + key_len].decode("utf-8", "surrogateescape")
        h_value, p = _get_bytes(data, p + key_len, body_end, "header value")
        headers.append((h_key, h_value))
    if p != body_end:
        raise CorruptRecordError(
            f"invalid record size: {length} bytes declared, {length + p - body_end} read"
        )
    return Record(offset_delta, timestamp_delta, key, value, headers, attributes), p


def _get_bytes(data: bytes, p: int, body_end: int, what: str) -> tuple[bytes | None, int]:
    n, p = decode_varint(data, p)
    if n < 0:
        return None, p  # Kafka reads any negative length as null
    if n > body_end - p:
        raise CorruptRecordError(f"record {what} of {n} bytes overruns its record")
    return data[p : p + n], p + n


# --- Building -----------------------------------------------------------------------------


def build_record_batch(
    records: Iterable[SimpleRecord | tuple],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
) -> bytes:
    """A complete batch with its CRC; offset deltas 0..n-1, as a producer writes them.

    base_timestamp defaults to the first record's timestamp (NO_TIMESTAMP if it has none);
    a record without a timestamp gets the base timestamp. max_timestamp defaults to the
    largest record timestamp (pass the append time with LOG_APPEND_TIME).
    """
    items = [r if isinstance(r, SimpleRecord) else SimpleRecord(*r) for r in records]
    if not items:
        raise ValueError("a record batch needs at least one record")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp type must be 0 or 1, not {timestamp_type}")
    if base_timestamp is None:
        first = items[0].timestamp
        base_timestamp = NO_TIMESTAMP if first is None else first
    body = bytearray()
    largest = base_timestamp
    for offset_delta, r in enumerate(items):
        ts = base_timestamp if r.timestamp is None else r.timestamp
        largest = max(largest, ts)
        body += encode_record(offset_delta, ts - base_timestamp, r.key, r.value, r.headers)
    records_section = compress(compression, body, level=compression_level)  # checks the id
    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(records_section))
    HEADER_STRUCT.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        CURRENT_MAGIC_VALUE,
        0,  # crc, computed below over the finished bytes
        attributes,
        len(items) - 1,
        base_timestamp,
        largest if max_timestamp is None else max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    batch[RECORDS_OFFSET:] = records_section
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


# --- Control batches (transaction markers) ------------------------------------------------

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_RECORD_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0


def build_control_batch(
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker: a transactional control batch with one control record."""
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    key = _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)
    value = _END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_record_batch(
        [SimpleRecord(key, value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def decode_control_record(record: Record) -> tuple[int, int | None]:
    """(control type, coordinator epoch) of a control record; the epoch only for markers.

    Newer key or value versions are read by their version-0 prefix, as Kafka does.
    """
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(
            f"control record key must have at least {_CONTROL_KEY.size} bytes, "
            f"found {0 if key is None else len(key)}"
        )
    _version, control_type = _CONTROL_KEY.unpack_from(key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return control_type, None
    value = record.value
    if value is None or len(value) < _END_TXN_MARKER_VALUE.size:
        raise CorruptRecordError(
            f"end transaction marker value must have at least {_END_TXN_MARKER_VALUE.size} "
            f"bytes, found {0 if value is None else len(value)}"
        )
    _version, coordinator_epoch = _END_TXN_MARKER_VALUE.unpack_from(value)
    return control_type, coordinator_epoch
