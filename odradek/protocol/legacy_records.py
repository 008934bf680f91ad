"""Legacy message sets (magic 0 and 1, Kafka before 0.11) <-> RecordBatch v2. Sans-I/O.

Produce v0-v2 and Fetch v0-v3 carry the legacy formats. Kafka 3.x stores only v2, so it
converts in both directions, and so does Odradek:

* Produce: Kafka's LogValidator (convertAndAssignOffsetsNonCompressed,
  validateMessagesAndAssignOffsetsCompressed) reads every message of the set -- outer
  CRCs, wrappers inflated, inner CRCs -- and rebuilds the records as one v2 batch.
  convert_to_batch does that; the batch then takes the ordinary v2 append path, which
  assigns offsets and applies the topic's timestamp and key rules.
* Fetch: RecordsUtil.downConvert (through LazyDownConversionRecords) rewrites the v2
  batches of a fetch's slice in the magic the request can read (Fetch v0-v1: magic 0,
  v2-v3: magic 1). down_convert does that.

A legacy message (Kafka's LegacyRecord; docs/implementation.html, "Old Message Format"):

    offset int64, message_size int32,          <- the 12-byte log overhead
    crc uint32 (CRC-32 of magic .. end), magic int8, attributes int8,
    timestamp int64 (magic 1 only), key (int32 length, -1 null), value (likewise)

attributes: codec in bits 0-2 (0 none, 1 gzip, 2 snappy, 3 lz4), timestamp type in bit 3
(magic 1). A compressed message is a *wrapper*: its value is the compressed bytes of an
inner message set. A magic 1 wrapper's offset is the absolute offset of its last inner
message and the inner offsets are relative (0..n-1 when written correctly); magic 0 inner
offsets are absolute. The magic byte sits at position 16 in both the legacy and the v2
layout, which is how a reader tells them apart (magic_of).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

import xxhash

from odradek.protocol.compression import (
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    LZ4,
    NONE,
    ZSTD,
    compress,
    decompress,
)
from odradek.protocol.exceptions import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
)
from odradek.protocol.records import (
    COMPRESSION_CODEC_MASK,
    CREATE_TIME,
    CURRENT_MAGIC_VALUE,
    HEADER_SIZE_UP_TO_MAGIC,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
    SimpleRecord,
    build_record_batch,
    decode_records,
)

__all__ = [
    "MAGIC_V0",
    "MAGIC_V1",
    "NO_TIMESTAMP_TYPE",
    "RECORD_OVERHEAD_V0",
    "RECORD_OVERHEAD_V1",
    "LegacyRecord",
    "build_message_set",
    "convert_to_batch",
    "down_convert",
    "encode_message",
    "is_legacy",
    "iter_legacy_records",
    "magic_of",
]

MAGIC_V0: Final = 0
MAGIC_V1: Final = 1

# message_size of the smallest message: crc, magic, attributes, key length, value length
# (+ the timestamp for magic 1).
RECORD_OVERHEAD_V0: Final = 14
RECORD_OVERHEAD_V1: Final = 22

NO_TIMESTAMP_TYPE: Final = -1  # magic 0 has no timestamps (Kafka's NO_TIMESTAMP_TYPE)

_SMALLEST_MESSAGE: Final = LOG_OVERHEAD + RECORD_OVERHEAD_V0
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

_OFFSET_AND_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTRIBUTES = struct.Struct(">Ibb")  # read at position 12 of an entry
_UP_TO_MAGIC = struct.Struct(">ixxxxb")  # size/batchLength .. magic, read at position 8
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_MAGIC_POS: Final = MAGIC_OFFSET  # 16, in legacy messages as in v2 batches
_CRC_POS: Final = LOG_OVERHEAD  # 12
_ATTRIBUTES_POS: Final = MAGIC_OFFSET + 1  # 17
_TIMESTAMP_POS: Final = MAGIC_OFFSET + 2  # 18, magic 1 only

Buffer = bytes | bytearray | memoryview


class LegacyRecord(NamedTuple):
    """One record of a legacy message set, as Kafka's deep iterator yields it.

    offset is absolute; timestamp is NO_TIMESTAMP and timestamp_type NO_TIMESTAMP_TYPE for
    magic 0; compression is the codec of the wrapper the record came in (NONE if none).
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    magic: int
    compression: int = NONE


class _Message(NamedTuple):
    """One shallow message: CRC checked, fields parsed, value not inflated."""

    position: int
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


# --- Telling the formats apart -----------------------------------------------------------


def magic_of(data: Buffer) -> int | None:
    """Magic of the first entry of a records field (batch or message); None if too short."""
    if len(data) < HEADER_SIZE_UP_TO_MAGIC:
        return None
    return _UP_TO_MAGIC.unpack_from(data, LOG_OVERHEAD - 4)[1]


def is_legacy(data: Buffer) -> bool:
    """True when the records field starts with a magic 0 or 1 message."""
    return magic_of(data) in (MAGIC_V0, MAGIC_V1)


# --- Reading -----------------------------------------------------------------------------


def _iter_messages(buf: bytes, *, allow_partial: bool, where: str) -> Iterator[_Message]:
    """Walk the shallow messages of a set: framing, magic, CRC, key and value lengths."""
    view = memoryview(buf)
    end = len(buf)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"truncated message at position {pos} of {where}: {remaining} bytes, fewer "
                f"than the {LOG_OVERHEAD}-byte offset and size"
            )
        offset, size = _OFFSET_AND_SIZE.unpack_from(buf, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"message at position {pos} of {where} has size {size}, less than the "
                f"minimum record overhead ({RECORD_OVERHEAD_V0})"
            )
        msg_end = pos + LOG_OVERHEAD + size
        if msg_end > end:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"truncated message at position {pos} of {where}: size {size} needs "
                f"{size + LOG_OVERHEAD} bytes, {remaining} left"
            )
        stored_crc, magic, attributes = _CRC_MAGIC_ATTRIBUTES.unpack_from(buf, pos + _CRC_POS)
        if magic not in (MAGIC_V0, MAGIC_V1):
            if magic == CURRENT_MAGIC_VALUE:
                raise InvalidRecordError(
                    f"entry at position {pos} of {where} is a RecordBatch v2 (magic 2) "
                    "among legacy messages: a message set must use one format"
                )
            raise CorruptRecordError(
                f"invalid magic {magic} in message at position {pos} of {where}"
            )
        crc = zlib.crc32(view[pos + _MAGIC_POS : msg_end])
        if crc != stored_crc:
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos} of {where}) is corrupt: stored "
                f"crc {stored_crc:#010x}, computed {crc:#010x}"
            )
        if magic == MAGIC_V1:
            if size < RECORD_OVERHEAD_V1:
                raise CorruptRecordError(
                    f"message at position {pos} of {where} has size {size}, less than the "
                    f"minimum record overhead of magic 1 ({RECORD_OVERHEAD_V1})"
                )
            timestamp = _INT64.unpack_from(buf, pos + _TIMESTAMP_POS)[0]
            p = pos + _TIMESTAMP_POS + 8
        else:
            timestamp = NO_TIMESTAMP
            p = pos + _TIMESTAMP_POS
        # Sizes checked above leave room for both length fields.
        key_len = _INT32.unpack_from(buf, p)[0]
        p += 4
        key = None
        if key_len >= 0:  # Kafka reads any negative length as null
            if key_len > msg_end - p - 4:
                raise CorruptRecordError(
                    f"message at offset {offset} (position {pos} of {where}): key of "
                    f"{key_len} bytes overruns the {size}-byte message"
                )
            key = buf[p : p + key_len]
            p += key_len
        value_len = _INT32.unpack_from(buf, p)[0]
        p += 4
        value = None
        if value_len >= 0:
            if value_len != msg_end - p:
                raise CorruptRecordError(
                    f"message at offset {offset} (position {pos} of {where}): value of "
                    f"{value_len} bytes where the message size leaves {msg_end - p}"
                )
            value = buf[p:msg_end]
        elif p != msg_end:
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos} of {where}): {msg_end - p} "
                "bytes after its null value"
            )
        yield _Message(pos, offset, magic, attributes, timestamp, key, value)
        pos = msg_end


def _unwrap(wrapper: _Message, max_size: int) -> tuple[list[LegacyRecord], int]:
    """The inner records of a compressed wrapper, and how many bytes they inflated to."""
    codec = wrapper.attributes & COMPRESSION_CODEC_MASK
    magic = wrapper.magic
    where = f"the wrapper message at offset {wrapper.offset}"
    if codec == ZSTD:
        raise InvalidRecordError(
            f"{where} is compressed with zstd, which message format v{magic} does not allow "
            "(zstd needs magic 2, Produce v3 or later)"
        )
    if codec not in CODEC_NAMES:
        raise CorruptRecordError(f"{where} uses unknown compression codec id {codec}")
    if wrapper.value is None:
        raise InvalidRecordError(
            f"found invalid compressed record set with null value (magic = {magic}) in {where}"
        )
    payload = wrapper.value
    if codec == LZ4 and magic == MAGIC_V0:
        # KAFKA-3160: magic 0 writers hashed the LZ4 frame magic into the header checksum,
        # so Kafka ignores that checksum for magic 0; putting the right one in place lets
        # the strict decoder accept both kinds.
        payload = _lz4_with_header_checksum(payload, broken=False)
    data = decompress(codec, payload, max_size=max_size)
    inner_where = f"the message set inside {where}"
    inner = list(_iter_messages(data, allow_partial=False, where=inner_where))
    if not inner:
        raise InvalidRecordError(
            f"found invalid compressed record set with no inner records in {where}"
        )
    for index, message in enumerate(inner):
        if message.magic != magic:
            text = (f"compressed message magic {message.magic} does not match wrapper magic "
                    f"{magic} (message {index} of {where})")
            raise InvalidRecordError(text, [(index, text)])
        inner_codec = message.attributes & COMPRESSION_CODEC_MASK
        if inner_codec not in CODEC_NAMES:
            raise CorruptRecordError(
                f"message {index} of {where} uses unknown compression codec id {inner_codec}"
            )
        if inner_codec != NONE:
            text = (f"inner messages must not be compressed: message {index} of {where} is "
                    "a nested wrapper")
            raise InvalidRecordError(text, [(index, text)])
    if magic == MAGIC_V0:
        records = [LegacyRecord(m.offset, NO_TIMESTAMP, NO_TIMESTAMP_TYPE, m.key, m.value,
                                MAGIC_V0, codec) for m in inner]
        return records, len(data)
    last_inner = inner[-1].offset
    if wrapper.offset == 0:
        base = 0  # some librdkafka versions leave the wrapper offset at 0 on produce
    elif wrapper.offset < last_inner:
        raise InvalidRecordError(
            f"found invalid wrapper offset in compressed v1 message set, wrapper offset "
            f"'{wrapper.offset}' is less than the last inner message offset '{last_inner}' "
            "and it is not zero"
        )
    else:
        base = wrapper.offset - last_inner
    # Kafka does not insist on inner offsets 0..n-1 (older clients got them wrong, and a
    # conversion renumbers them anyway): absolute = wrapper offset - last inner + inner.
    if wrapper.attributes & TIMESTAMP_TYPE_MASK:
        records = [LegacyRecord(_int64(base + m.offset), wrapper.timestamp, LOG_APPEND_TIME,
                                m.key, m.value, MAGIC_V1, codec) for m in inner]
    else:
        records = [LegacyRecord(_int64(base + m.offset), m.timestamp, CREATE_TIME, m.key,
                                m.value, MAGIC_V1, codec) for m in inner]
    return records, len(data)


def _iter_records(
    buf: bytes, *, allow_partial: bool, max_decompressed_size: int, one_magic: bool
) -> Iterator[LegacyRecord]:
    budget = max_decompressed_size  # for all wrappers of the set together
    first_magic: int | None = None
    for message in _iter_messages(buf, allow_partial=allow_partial, where="the message set"):
        if first_magic is None:
            first_magic = message.magic
        elif one_magic and message.magic != first_magic:
            raise InvalidRecordError(
                f"message at offset {message.offset} (position {message.position}) has magic "
                f"{message.magic}, not the magic {first_magic} of the first message of the set"
            )
        codec = message.attributes & COMPRESSION_CODEC_MASK
        if codec != NONE:
            records, used = _unwrap(message, budget)
            budget -= used
            yield from records
        elif message.magic == MAGIC_V1:
            log_append = message.attributes & TIMESTAMP_TYPE_MASK
            yield LegacyRecord(message.offset, message.timestamp,
                               LOG_APPEND_TIME if log_append else CREATE_TIME, message.key,
                               message.value, MAGIC_V1)
        else:
            yield LegacyRecord(message.offset, NO_TIMESTAMP, NO_TIMESTAMP_TYPE, message.key,
                               message.value, MAGIC_V0)


def iter_legacy_records(
    data: Buffer,
    *,
    allow_partial: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[LegacyRecord]:
    """Every record of a legacy message set, wrappers inflated (Kafka's deep iteration).

    Checks every CRC (outer and inner) and length. A fetch may end in the middle of a
    message: allow_partial=True stops quietly there. The set may mix magic 0 and 1, as
    the log of a broker that changed message format did. Errors: CorruptRecordError or
    InvalidRecordError, as convert_to_batch lists them.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    return _iter_records(buf, allow_partial=allow_partial,
                         max_decompressed_size=max_decompressed_size, one_magic=False)


# --- Produce: legacy -> v2 ---------------------------------------------------------------


def convert_to_batch(
    data: Buffer,
    *,
    target_compression: int | None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """A legacy message set from Produce v0-v2 as ONE RecordBatch v2, ready for append.

    The batch has base offset 0, no producer id, epoch or sequence, and CreateTime; keys
    and values are kept byte for byte. Timestamps: NO_TIMESTAMP for magic 0, each
    message's own for magic 1, the wrapper's for the records of a LogAppendTime wrapper
    (what Kafka's reader gives them). Compressed with target_compression (the topic's
    codec) when given, else with the producer's: the first wrapper's codec, none if the
    set has no wrapper. max_decompressed_size bounds all wrappers inflated together.

    CorruptRecordError: a truncated message, a size below the minimum, a bad CRC (outer
    or inner), key or value lengths that do not fill the message exactly, trailing bytes,
    an unknown magic or codec, compressed bytes that do not inflate or inflate past the
    bound. InvalidRecordError: an empty message set, zstd with magic 0/1, a null or empty
    wrapper, a wrapper nested in a wrapper, an inner message whose magic differs from its
    wrapper's, messages of different magics, a v2 batch in the set, a magic 1 wrapper
    offset below its last inner offset (and not 0), a negative timestamp other than -1.
    Nothing else, for any bytes (target_compression itself must be a known codec id:
    UnsupportedCompressionError otherwise).

    Unlike Kafka, which silently drops a partial trailing message of a produced set (it
    then acknowledges fewer messages than were sent), we refuse it; and a set of several
    wrappers, which Kafka refuses ("Compressed outer record has more than one batch"),
    is accepted.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    if not buf:
        raise InvalidRecordError(
            "empty message set: a produce request must carry at least one message"
        )
    items: list[SimpleRecord] = []
    source = NONE
    base = lowest = highest = NO_TIMESTAMP
    for index, record in enumerate(_iter_records(buf, allow_partial=False,
                                                 max_decompressed_size=max_decompressed_size,
                                                 one_magic=True)):
        timestamp = record.timestamp
        if timestamp < NO_TIMESTAMP:
            # Kafka's MemoryRecordsBuilder refuses these ("Invalid negative timestamp").
            text = (f"invalid negative timestamp {timestamp} of message {index} "
                    f"(offset {record.offset})")
            raise InvalidRecordError(text, [(index, text)])
        if source == NONE:
            source = record.compression
        if not items:
            base = lowest = highest = timestamp
        elif timestamp > highest:
            highest = timestamp
        elif timestamp < lowest:
            lowest = timestamp
        items.append(SimpleRecord(record.key, record.value, (), timestamp))
    if highest - base > _INT64_MAX or lowest - base < _INT64_MIN:
        # v2 stores timestamps as deltas from the first: -1 then 2^63-1 does not fit.
        raise InvalidRecordError(
            f"message timestamps {lowest} .. {highest} cannot be stored relative to the "
            f"first message's timestamp {base}"
        )
    codec = source if target_compression is None else target_compression
    return build_record_batch(items, compression=codec)


# --- Fetch: v2 -> legacy -----------------------------------------------------------------


def down_convert(
    data: Buffer,
    to_magic: int,
    *,
    fetch_offset: int,
    max_bytes: int | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """The batches of a fetch's slice as a legacy message set of magic `to_magic` (0 or 1).

    Kafka's RecordsUtil.downConvert: control batches are left out, records below
    fetch_offset are left out, headers are dropped. An uncompressed batch becomes one
    message per record; a compressed one becomes one wrapper with the same codec, whose
    offset is the last record's (magic 1: inner offsets relative to the first record,
    wrapper timestamp the batch's append time or its largest record timestamp; magic 0:
    absolute inner offsets, LZ4 with the old broken header checksum). Entries already at
    a magic <= to_magic are copied as they are. A slice cut short ends at the last whole
    batch. With max_bytes, output stops before the message or wrapper that would pass it,
    but the first one is always whole (a fetch returns at least one message).

    zstd cannot be expressed in magic 0/1: UnsupportedCompressionError if the first batch
    to convert uses it, else the output stops before it (the next fetch gets the error).
    Malformed batches raise CorruptRecordError.
    """
    if to_magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"down-conversion target magic must be 0 or 1, not {to_magic}")
    out = bytearray()
    end = len(data)
    pos = 0
    while pos < end:
        if max_bytes is not None and out and len(out) + _SMALLEST_MESSAGE > max_bytes:
            break  # not even the smallest message fits: spare the decoding
        remaining = end - pos
        if remaining < HEADER_SIZE_UP_TO_MAGIC:
            break
        length, magic = _UP_TO_MAGIC.unpack_from(data, pos + LOG_OVERHEAD - 4)
        size = length + LOG_OVERHEAD
        if magic == CURRENT_MAGIC_VALUE:
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"record batch at position {pos} has batchLength {length}, less than "
                    f"the minimum {MIN_BATCH_LENGTH}"
                )
            if size > remaining:
                break
            header = RecordBatchHeader(*HEADER_STRUCT.unpack_from(data, pos))
            if header.is_control:
                pos += size
                continue
            if header.compression == ZSTD:
                if out:
                    break
                raise UnsupportedCompressionError(
                    "down-conversion of zstandard-compressed batches is not supported: "
                    "fetch with version 10 or later"
                )
            records = decode_records(data, pos, header, max_size=max_decompressed_size)
            items = [(offset, _int64(r.timestamp), r.key, r.value)
                     for r in records if (offset := _int64(r.offset)) >= fetch_offset]
            timestamp_type = header.timestamp_type
            pieces = _encode_legacy(items, to_magic, header.compression, timestamp_type,
                                    header.max_timestamp) if items else []
        elif magic in (MAGIC_V0, MAGIC_V1):
            if length < RECORD_OVERHEAD_V0:
                raise CorruptRecordError(
                    f"message at position {pos} has size {length}, less than the minimum "
                    f"record overhead ({RECORD_OVERHEAD_V0})"
                )
            if size > remaining:
                break
            entry = bytes(data[pos : pos + size])
            if magic <= to_magic:
                pieces = [entry]
            else:  # a magic 1 message or wrapper for a magic 0 reader
                legacy = list(_iter_records(entry, allow_partial=False,
                                            max_decompressed_size=max_decompressed_size,
                                            one_magic=True))
                items = [(r.offset, r.timestamp, r.key, r.value) for r in legacy
                         if r.offset >= fetch_offset]
                pieces = _encode_legacy(items, to_magic, legacy[0].compression, CREATE_TIME,
                                        NO_TIMESTAMP) if items else []
        else:
            raise CorruptRecordError(f"entry at position {pos} has unknown magic {magic}")
        for piece in pieces:
            if max_bytes is not None and out and len(out) + len(piece) > max_bytes:
                return bytes(out)
            out += piece
        pos += size
    return bytes(out)


# --- Writing -----------------------------------------------------------------------------


def _message(
    offset: int, magic: int, attributes: int, timestamp: int, key: Buffer | None,
    value: Buffer | None,
) -> bytearray:
    key_len = -1 if key is None else len(key)
    value_len = -1 if value is None else len(value)
    key_pos = _TIMESTAMP_POS + (8 if magic == MAGIC_V1 else 0)
    out = bytearray(key_pos + 8 + max(key_len, 0) + max(value_len, 0))
    _OFFSET_AND_SIZE.pack_into(out, 0, offset, len(out) - LOG_OVERHEAD)
    out[_MAGIC_POS] = magic
    out[_ATTRIBUTES_POS] = attributes & 0xFF
    if magic == MAGIC_V1:
        _INT64.pack_into(out, _TIMESTAMP_POS, timestamp)
    p = key_pos
    _INT32.pack_into(out, p, key_len)
    p += 4
    if key_len > 0:
        out[p : p + key_len] = key
        p += key_len
    _INT32.pack_into(out, p, value_len)
    p += 4
    if value_len > 0:
        out[p:] = value
    _UINT32.pack_into(out, _CRC_POS, zlib.crc32(memoryview(out)[_MAGIC_POS:]))
    return out


def encode_message(
    offset: int,
    magic: int,
    key: Buffer | None,
    value: Buffer | None,
    *,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """One legacy message with its log overhead and CRC, fields exactly as given.

    attributes go in as they are (a wrapper's codec bits with its value already
    compressed); timestamp is written for magic 1 only.
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    return bytes(_message(offset, magic, attributes, timestamp, key, value))


def _encode_legacy(
    items: list[tuple[int, int, bytes | None, bytes | None]],
    magic: int,
    codec: int,
    timestamp_type: int,
    log_append_time: int,
) -> list[bytearray]:
    """Kafka's MemoryRecordsBuilder for magic 0/1: a message per record, or one wrapper."""
    log_append = magic == MAGIC_V1 and timestamp_type == LOG_APPEND_TIME
    type_bit = TIMESTAMP_TYPE_MASK if log_append else 0
    if codec == NONE:
        if log_append:
            return [_message(o, magic, type_bit, log_append_time, k, v) for o, _, k, v in items]
        return [_message(o, magic, 0, t, k, v) for o, t, k, v in items]
    inner = bytearray()
    base = items[0][0] if magic == MAGIC_V1 else 0  # magic 0 keeps absolute offsets
    largest = NO_TIMESTAMP
    for offset, timestamp, key, value in items:
        if log_append:
            timestamp = log_append_time
        elif timestamp > largest:
            largest = timestamp
        inner += _message(offset - base, magic, type_bit, timestamp, key, value)
    payload = compress(codec, inner)
    if codec == LZ4 and magic == MAGIC_V0:
        # What Kafka's Lz4BlockOutputStream(useBrokenFlagDescriptorChecksum) writes for
        # magic 0: 0.8/0.9 clients check the checksum their own broken way.
        payload = _lz4_with_header_checksum(payload, broken=True)
    wrapper_timestamp = log_append_time if log_append else largest
    return [_message(items[-1][0], magic, codec | type_bit, wrapper_timestamp, None, payload)]


def build_message_set(
    records: Iterable[tuple[int, int, bytes | None, bytes | None]],
    magic: int,
    *,
    compression: int = NONE,
    timestamp_type: int = CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
) -> bytes:
    """A legacy message set from (offset, timestamp, key, value) tuples, as Kafka writes one.

    Uncompressed: one message per record. Compressed: one wrapper at the last record's
    offset (magic 1: inner offsets relative to the first record; magic 0: absolute).
    LOG_APPEND_TIME (magic 1) stamps every message and the wrapper with log_append_time.
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    if compression not in CODEC_NAMES or compression == ZSTD:
        raise UnsupportedCompressionError(
            f"compression codec id {compression} cannot be used with magic {magic}"
        )
    items = list(records)
    if not items:
        return b""
    return b"".join(_encode_legacy(items, magic, compression, timestamp_type, log_append_time))


def _int64(value: int) -> int:
    """Wrap to a signed 64-bit value, as Java's long arithmetic does."""
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN


# --- LZ4 frame header checksum (KAFKA-3160) ----------------------------------------------

_LZ4_FRAME_MAGIC: Final = b"\x04\x22\x4d\x18"


def _lz4_with_header_checksum(frame: bytes, *, broken: bool) -> bytes:
    """The frame with its header checksum (HC) byte set the right or the broken way.

    HC is the second byte of XXH32 over the frame descriptor (FLG, BD and the optional
    content size and dictionary id); Kafka's magic 0 writers also hashed the 4-byte frame
    magic. Anything that is not an LZ4 frame is returned as it is, for the decoder to
    reject.
    """
    if len(frame) < 7 or frame[:4] != _LZ4_FRAME_MAGIC:
        return frame
    flg = frame[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_pos >= len(frame):
        return frame
    hc = (xxhash.xxh32_intdigest(frame[0 if broken else 4 : hc_pos]) >> 8) & 0xFF
    if frame[hc_pos] == hc:
        return frame
    fixed = bytearray(frame)
    fixed[hc_pos] = hc
    return bytes(fixed)
