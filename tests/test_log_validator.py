"""The leader's record walk (odradek/storage/log_validator.py over the compiled
odradek/protocol/_record_walker.c): every rule, each codec, bombs, and hypothesis-made
damage to the records section, each batch with a correct CRC. A damaged batch is refused
with its Kafka code and never crashes the walker; a valid one from any codec passes."""

from __future__ import annotations

import resource
import struct
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from odradek.protocol import _record_walker
from odradek.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import CorruptRecordError, InvalidRecordError, KafkaError
from odradek.protocol.records import (
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    compute_crc,
    decode_records,
    encode_record,
    encode_varint,
    encode_varlong,
    validate_batch,
)
from odradek.server.config import BrokerConfig
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidTimestampError, MessageTooLargeError
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager, LogManagerConfig
from odradek.storage.log_validator import (
    MAX_RECORD_ERRORS,
    AppendOrigin,
    RecordValidation,
    validate_records,
)

T0 = 1_700_000_000_000
YEAR = 365 * 86_400_000
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
MiB = 1024 * 1024


def clock() -> int:
    return T0


def open_log(tmp_path: Path, validation: RecordValidation | None = None, **props: str) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    log = Log.open(tmp_path / "events-0", config, clock=clock)
    if validation is not None:
        log.validation = validation
    return log


def records(n: int, *, ts: int = T0, key: bool = True, size: int = 20) -> list[SimpleRecord]:
    return [SimpleRecord(f"k{i}".encode() if key else None, b"v" * size,
                         [("h", b"x"), ("n", None)] if i % 3 == 0 else (), ts + i)
            for i in range(n)]


def rebatch(section: bytes, count: int, *, codec: int = NONE, last_offset_delta: int | None = None,
            base_timestamp: int = T0, max_timestamp: int | None = None, attributes: int = 0,
            producer_id: int = -1, base_sequence: int = -1) -> bytearray:
    """A batch around `section` (compressed with `codec` here) with a correct CRC, whatever
    the section holds."""
    body = compress(codec, section)
    batch = bytearray(RECORDS_OFFSET + len(body))
    HEADER_STRUCT.pack_into(
        batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, attributes | codec,
        count - 1 if last_offset_delta is None else last_offset_delta, base_timestamp,
        base_timestamp if max_timestamp is None else max_timestamp, producer_id,
        0 if producer_id >= 0 else -1, base_sequence, count)
    batch[RECORDS_OFFSET:] = body
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return batch


def plain(rs: list[bytes]) -> bytes:
    return b"".join(rs)


def record(offset_delta: int = 0, ts_delta: int = 0, key: bytes | None = b"k",
           value: bytes | None = b"v", headers: list[tuple[str, bytes | None]] | None = None,
           ) -> bytes:
    return encode_record(offset_delta, ts_delta, key, value, headers or [])


def raw_record(body: bytes, length: int | None = None) -> bytes:
    """A record of hand-made body bytes, with its length varint (or a wrong one)."""
    return encode_varint(len(body) if length is None else length) + body


def check(batch: bytearray, config: LogConfig | None = None,
          validation: RecordValidation | None = None) -> int:
    """validate_batch then validate_records, as Log._validate runs them for a client."""
    header = RecordBatchHeader.parse(batch)
    view = memoryview(batch)
    validate_batch(view, 0, header, from_client=True)
    return validate_records(view, 0, header, config or LogConfig(), T0,
                            validation or RecordValidation(), "events-0")


def refused(batch: bytearray, code: int, config: LogConfig | None = None,
            validation: RecordValidation | None = None, match: str | None = None) -> KafkaError:
    with pytest.raises(KafkaError, match=match) as info:
        check(batch, config, validation)
    assert info.value.error_code == code, info.value
    return info.value


# ---- valid batches ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_pass_in_every_codec(codec: int) -> None:
    for n in (1, 2, 100):
        batch = bytearray(build_record_batch(records(n), compression=codec))
        assert check(batch) == T0 + n - 1
    odd = [SimpleRecord(None, None), SimpleRecord(b"", b""),
           SimpleRecord(b"k" * 300, b"v" * 70_000, [("", b""), ("\u00e9", None)] * 70)]
    batch = bytearray(build_record_batch(odd, compression=codec, base_timestamp=T0))
    assert check(batch) == T0


def test_java_style_xerial_and_raw_snappy_both_pass() -> None:
    import cramjam

    section = plain([record(i) for i in range(5)])
    assert check(rebatch(section, 5, codec=SNAPPY)) == T0  # xerial, as Java writes
    raw = bytes(cramjam.snappy.compress_raw(section))  # raw, as librdkafka writes
    assert check(with_body(raw, SNAPPY, 5)) == T0


def test_no_timestamps_give_minus_one() -> None:
    batch = bytearray(build_record_batch([SimpleRecord(b"k", b"v")] * 3))
    assert RecordBatchHeader.parse(batch).base_timestamp == -1
    assert check(batch) == -1


# ---- structure: CORRUPT_MESSAGE -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_record_count_must_match_the_header(codec: int) -> None:
    section = plain([record(i, value=b"v" * 30) for i in range(2)])
    # The case: count 1, two records (they would share one offset).
    refused(rebatch(section, 1, codec=codec), ErrorCode.CORRUPT_MESSAGE, match="follow the last")
    refused(rebatch(section, 3, codec=codec), ErrorCode.CORRUPT_MESSAGE, match="record 2: missing")


@pytest.mark.parametrize("codec", CODECS)
def test_offset_deltas_run_from_zero(codec: int) -> None:
    # The case: deltas 0, 5 (a record read at one offset twice).
    refused(rebatch(plain([record(0), record(5)]), 2, codec=codec), ErrorCode.CORRUPT_MESSAGE,
            match="offset delta 5, expected 1")
    refused(rebatch(plain([record(1), record(0)]), 2, codec=codec), ErrorCode.CORRUPT_MESSAGE)


def test_last_offset_delta_must_match_count() -> None:
    section = plain([record(i) for i in range(3)])
    # A client's batch: INVALID_RECORD from the header check, as Kafka's validateBatch.
    refused(rebatch(section, 3, last_offset_delta=5), ErrorCode.INVALID_RECORD)


def test_lengths_must_match_contents() -> None:
    body = bytes(record())[1:]  # the body without its length varint
    for wrong in (len(body) - 1, len(body) + 1, 5, -1, 2**31 - 1):
        section = raw_record(body, wrong) + (b"\0" if wrong == len(body) + 1 else b"")
        refused(rebatch(section, 1), ErrorCode.CORRUPT_MESSAGE)
    # key and value lengths: -1 is null, below is damage; past the record is damage
    for field in ("key", "value"):
        for n in (-2, -100, 40):
            parts = [b"\0", encode_varlong(0), encode_varint(0)]
            parts += [encode_varint(n), b""] if field == "key" else [encode_varint(1), b"k"]
            parts += [encode_varint(1), b"v"] if field == "key" else [encode_varint(n), b""]
            parts.append(encode_varint(0))
            refused(rebatch(raw_record(b"".join(parts)), 1), ErrorCode.CORRUPT_MESSAGE,
                    match=f"{field} length")


def test_headers_must_be_well_formed() -> None:
    prefix = b"\0" + encode_varlong(0) + encode_varint(0) + encode_varint(1) + b"k" + \
        encode_varint(1) + b"v"
    cases = {
        "header count -1": encode_varint(-1),
        "header count 1000": encode_varint(1000) + b"\0\0",
        "null key": encode_varint(1) + encode_varint(-1) + encode_varint(0),
        "value length -2": encode_varint(1) + encode_varint(1) + b"a" + encode_varint(-2),
        "key past the end": encode_varint(1) + encode_varint(50) + b"ab",
    }
    for tail in cases.values():
        refused(rebatch(raw_record(prefix + tail), 1), ErrorCode.CORRUPT_MESSAGE)
    ok = encode_varint(2) + encode_varint(0) + encode_varint(-1) + encode_varint(1) + b"a" + \
        encode_varint(0)
    assert check(rebatch(raw_record(prefix + ok), 1)) == T0


def test_varints_must_be_well_formed() -> None:
    overlong_varint = b"\x80\x80\x80\x80\x80\x01"  # six bytes
    fifth_byte_bits = b"\x80\x80\x80\x80\x10"  # a 33rd bit
    overlong_varlong = b"\x80" * 10 + b"\x01"
    body = b"\0" + encode_varlong(0) + encode_varint(0) + encode_varint(-1) + encode_varint(-1)
    for bad in (overlong_varint, fifth_byte_bits):
        refused(rebatch(raw_record(body + bad + b"\0" * 6), 1), ErrorCode.CORRUPT_MESSAGE,
                match="header count varint")
        refused(rebatch(bad + b"\0" * 10, 1), ErrorCode.CORRUPT_MESSAGE, match="length varint")
    timestamp = b"\0" + overlong_varlong + encode_varint(0) + b"\x01\x01\0"
    refused(rebatch(raw_record(timestamp), 1), ErrorCode.CORRUPT_MESSAGE,
            match="timestamp delta varint")
    # the widest legal ones pass
    widest = b"\0" + encode_varlong(-(2**63)) + encode_varint(0) + b"\x01\x01\0"
    check(rebatch(raw_record(widest), 1), LogConfig(message_timestamp_type="LogAppendTime"))


def test_trailing_and_truncated_bytes() -> None:
    section = plain([record(i) for i in range(3)])
    refused(rebatch(section + b"\0", 3), ErrorCode.CORRUPT_MESSAGE, match="1 bytes follow")
    for cut in range(1, len(section)):
        refused(rebatch(section[:-cut], 3), ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_garbage_compressed_bodies(codec: int) -> None:
    for garbage in (b"", b"\0", b"garbage" * 60, bytes(range(256)) * 2):
        batch = rebatch(b"", 1, codec=NONE)
        batch = bytearray(batch[:RECORDS_OFFSET] + garbage)
        HEADER_STRUCT.pack_into(batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, codec, 0, T0,
                                T0, -1, -1, -1, 1)
        struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
        refused(batch, ErrorCode.CORRUPT_MESSAGE)
    # well-compressed garbage: the records are what is wrong
    refused(rebatch(b"garbage" * 60, 1, codec=codec), ErrorCode.CORRUPT_MESSAGE)


# ---- bombs: MESSAGE_TOO_LARGE, within the bound ------------------------------------------


def zstd_rle_bomb(total: int) -> bytes:
    """A zstd frame of RLE blocks (4 bytes each for 128 KiB of zeros): 131 KB -> 4 GiB."""
    block = 128 * 1024
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out += b"\x00\x58"  # no content size, not single-segment; a 2 MiB window
    count = total // block
    for i in range(count):
        out += ((block << 3) | (1 << 1) | (i == count - 1)).to_bytes(3, "little") + b"\0"
    return bytes(out)


def with_body(body: bytes, codec: int, count: int = 1) -> bytearray:
    batch = bytearray(RECORDS_OFFSET) + body
    HEADER_STRUCT.pack_into(batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, codec, count - 1,
                            T0, T0, -1, -1, -1, count)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return batch


def test_a_zstd_bomb_is_refused_without_allocating_gigabytes() -> None:
    bomb = zstd_rle_bomb(4 << 30)
    assert len(bomb) < 132_000
    batch = with_body(bomb, ZSTD)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, a high-water mark
    start = time.monotonic()
    error = refused(batch, ErrorCode.MESSAGE_TOO_LARGE,
                    match="odradek.batch.max.decompressed.bytes")
    assert isinstance(error, MessageTooLargeError)
    assert time.monotonic() - start < 5
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200  # the 64 MiB bound, not 4 GiB


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_every_codec_is_bounded(codec: int) -> None:
    section = plain([record(0, value=b"\0" * (3 * MiB))])
    batch = rebatch(section, 1, codec=codec)
    small = RecordValidation(max_decompressed_bytes=MiB)
    refused(batch, ErrorCode.MESSAGE_TOO_LARGE, validation=small)
    # a topic's larger max.message.bytes does not raise it: one setting bounds the memory
    refused(batch, ErrorCode.MESSAGE_TOO_LARGE, LogConfig(max_message_bytes=8 * MiB), small)
    assert check(batch) == T0  # the 64 MiB default


def test_size_hints_that_lie_are_only_hints() -> None:
    # A zstd frame header claiming 100 bytes of content, then 256 MiB of RLE blocks.
    bomb = bytearray(zstd_rle_bomb(256 * MiB))
    bomb[4:6] = b"\x80\x58"  # a 4-byte Frame_Content_Size follows the window descriptor
    bomb[6:6] = (100).to_bytes(4, "little")
    refused(with_body(bytes(bomb), ZSTD), ErrorCode.MESSAGE_TOO_LARGE)
    # gzip's trailer (ISIZE) saying 10 bytes for 3 MiB: inflated in full all the same
    section = plain([record(0, value=b"\0" * (3 * MiB))])
    body = bytearray(compress(GZIP, section))
    body[-4:] = (10).to_bytes(4, "little")
    with pytest.raises(CorruptRecordError):  # the trailer no longer matches: refused
        check(with_body(bytes(body), GZIP))
    body = bytearray(compress(GZIP, section))
    assert check(with_body(bytes(body), GZIP)) == T0


def test_a_gzip_bomb() -> None:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    chunk = bytes(MiB)
    body = b"".join(z.compress(chunk) for _ in range(100)) + z.flush()
    refused(with_body(body, GZIP), ErrorCode.MESSAGE_TOO_LARGE,
            validation=RecordValidation(max_decompressed_bytes=8 * MiB))


# ---- records at fault: record_errors --------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_lists_the_records_without_key(codec: int) -> None:
    # librdkafka's regression test 0011: 100 records, every tenth without a key.
    rs = [SimpleRecord(None if i % 10 == 0 else b"k%d" % i, b"v", (), T0) for i in range(100)]
    batch = bytearray(build_record_batch(rs, compression=codec))
    error = refused(batch, ErrorCode.INVALID_RECORD, LogConfig(cleanup_policy="compact"),
                    match="10 record errors")
    assert isinstance(error, InvalidRecordError)
    assert [i for i, _ in error.record_errors] == list(range(0, 100, 10))
    assert all("without key" in (m or "") for _, m in error.record_errors)
    assert check(batch) == T0  # a topic that is not compacted takes them


def test_record_timestamps_each_in_range() -> None:
    config = LogConfig(message_timestamp_before_max_ms=YEAR,
                       message_timestamp_after_max_ms=3600_000)
    # The case: the header's timestamps fine, one record ten years ahead.
    section = plain([record(0), record(1, ts_delta=10 * YEAR), record(2)])
    batch = rebatch(section, 3, max_timestamp=T0)
    error = refused(batch, ErrorCode.INVALID_TIMESTAMP, config)
    assert isinstance(error, InvalidTimestampError)
    assert [i for i, _ in error.record_errors] == [1]
    assert str(T0 + 10 * YEAR) in (error.record_errors[0][1] or "")
    too_old = rebatch(plain([record(0, ts_delta=-2 * YEAR)]), 1)
    assert refused(too_old, ErrorCode.INVALID_TIMESTAMP, config).record_errors[0][0] == 0
    at_edges = rebatch(plain([record(0, ts_delta=-YEAR), record(1, ts_delta=3600_000)]), 2)
    assert check(at_edges, config) == T0 + 3600_000
    # LogAppendTime topics do not check what the producer stamped
    assert check(batch, LogConfig(message_timestamp_type="LogAppendTime")) == T0 + 10 * YEAR
    # a record without a timestamp (-1) is not checked
    assert check(rebatch(plain([record(0)]), 1, base_timestamp=-1), config) == -1


def test_a_late_record_outranks_a_missing_key_but_not_on_the_same_record() -> None:
    config = LogConfig(cleanup_policy="compact")
    section = plain([record(0, key=None), record(1, ts_delta=10 * YEAR), record(2, key=None,
                                                                               ts_delta=10 * YEAR)])
    error = refused(rebatch(section, 3), ErrorCode.INVALID_TIMESTAMP, config)
    assert [i for i, _ in error.record_errors] == [0, 1, 2]
    messages = [m or "" for _, m in error.record_errors]
    assert "without key" in messages[0] and "out of range" in messages[1]
    assert "without key" in messages[2]  # Kafka checks the key first


def test_a_client_batch_cannot_claim_log_append_time() -> None:
    batch = rebatch(plain([record(i) for i in range(3)]), 3, attributes=TIMESTAMP_TYPE_MASK)
    for topic_type in ("CreateTime", "LogAppendTime"):
        error = refused(batch, ErrorCode.INVALID_TIMESTAMP,
                        LogConfig(message_timestamp_type=topic_type))
        assert [i for i, _ in error.record_errors] == [0, 1, 2]


def test_record_errors_are_capped() -> None:
    n = MAX_RECORD_ERRORS + 5
    batch = rebatch(plain([record(i, key=None, value=None) for i in range(n)]), n)
    error = refused(batch, ErrorCode.INVALID_RECORD, LogConfig(cleanup_policy="compact"),
                    match=f"{n} record errors")
    assert len(error.record_errors) == MAX_RECORD_ERRORS


def test_control_batches_only_from_coordinators(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    marker = build_control_batch(True, producer_id=7, producer_epoch=0, coordinator_epoch=1,
                                 timestamp=T0)
    assert RecordBatchHeader.parse(marker).attributes & CONTROL_FLAG_MASK
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(bytearray(marker))
    assert log.log_end_offset == 0
    info = log.append_as_leader(bytearray(marker), origin=AppendOrigin.COORDINATOR)
    assert (info.first_offset, info.last_offset) == (0, 0)


# ---- through the log ----------------------------------------------------------------------


def test_a_refused_request_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    good = build_record_batch(records(3))
    bad = build_record_batch(records(2, key=False))
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(bytearray(good + bad))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    assert log.append_as_leader(bytearray(good)).last_offset == 2


def test_the_header_max_timestamp_becomes_the_records(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    section = plain([record(0, ts_delta=5), record(1, ts_delta=900), record(2)])
    for claimed in (T0, T0 + 10 * YEAR, -1):  # too small, too large, none
        info = log.append_as_leader(rebatch(section, 3, max_timestamp=claimed))
        assert info.max_timestamp == T0 + 900
    data = log.read(0, 1 << 20).read()
    pos = 0
    while pos < len(data):
        header = RecordBatchHeader.parse(data, pos)
        validate_batch(data, pos, header, from_client=False)  # the CRC follows the change
        assert header.max_timestamp == T0 + 900
        pos += header.size_in_bytes
    # on LogAppendTime topics the broker's clock replaces it, as before
    other = open_log(tmp_path / "b", message_timestamp_type="LogAppendTime")
    assert other.append_as_leader(rebatch(section, 3)).max_timestamp == T0
    assert RecordBatchHeader.parse(other.read(0, 1 << 20).read()).timestamp_type == \
        LOG_APPEND_TIME


def test_followers_trust_the_leader(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    keyless = build_record_batch(records(2, key=False))
    log.append_as_follower(bytearray(keyless))
    assert log.log_end_offset == 2


def test_validation_can_be_switched_off(tmp_path: Path) -> None:
    log = open_log(tmp_path, RecordValidation(enabled=False), cleanup_policy="compact")
    log.append_as_leader(bytearray(build_record_batch(records(2, key=False))))
    # the header and CRC are still checked
    batch = bytearray(build_record_batch(records(2)))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(batch)
    assert log.log_end_offset == 2


def test_the_broker_settings_reach_every_log(tmp_path: Path) -> None:
    broker = BrokerConfig.from_properties({
        "log.dirs": str(tmp_path), "odradek.record.validation.enable": "false",
        "odradek.batch.max.decompressed.bytes": str(MiB)})
    validation = broker.log_manager_config.record_validation
    assert validation == RecordValidation(enabled=False, max_decompressed_bytes=MiB)
    assert BrokerConfig.default().log_manager_config.record_validation == RecordValidation()
    manager = LogManager(LogManagerConfig((tmp_path,), record_validation=validation),
                         LogConfig(), clock=clock)
    manager.startup(background=False)
    try:
        assert manager.get_or_create_log("t", 0).validation is validation
    finally:
        manager.shutdown()
    manager = LogManager(LogManagerConfig((tmp_path,), record_validation=validation),
                         LogConfig(), clock=clock)
    manager.startup(background=False)  # and to the logs it loads
    try:
        assert manager.get_log("t", 0).validation is validation  # type: ignore[union-attr]
    finally:
        manager.shutdown()


# ---- the walker itself ----------------------------------------------------------------------


def test_walker_arguments() -> None:
    walk = _record_walker.walk_records
    section = plain([record(0)])
    assert walk(section, 1, T0, 0, 0, 0, 10) == (T0, 0, None)
    assert walk(memoryview(section), 1, T0, 0, 0, 0, 10) == (T0, 0, None)
    assert walk(bytearray(section), 1, T0, T0 + 1, T0 + 2, 2, 10) == (T0, 1, [(0, 2, T0)])
    assert walk(b"", 0, T0, 0, 0, 0, 10) == (-1, 0, None)
    with pytest.raises(ValueError):
        walk(section, -1, T0, 0, 0, 0, 10)
    with pytest.raises(TypeError):
        walk("text", 1, T0, 0, 0, 0, 10)
    # timestamps wrap as Java's longs do, without undefined behaviour
    wrap = plain([record(0, ts_delta=2**63 - 1)])
    assert walk(wrap, 1, 2**63 - 1, 0, 0, 2, 10) == (-1, 1, [(0, 2, -2)])


# ---- hypothesis: damage with a correct CRC ------------------------------------------------

_record = st.tuples(
    st.none() | st.binary(max_size=8),
    st.none() | st.binary(max_size=30),
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2),
    st.integers(-1000, 1000),
)
_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 6)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("count"), st.integers(-2, 2), st.just(0)),
    st.tuples(st.just("varint"), st.integers(0, 10_000), st.sampled_from(
        [b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x7f", b"\x01", b"\x03", b"\xff\x0f"])),
)


def mutate(section: bytes, count: int, mutation: tuple) -> tuple[bytes, int]:
    kind, where, what = mutation
    data = bytearray(section)
    at = where % (len(data) + 1)
    if kind == "flip" and data:
        data[at % len(data)] ^= what
    elif kind == "insert":
        data[at:at] = what
    elif kind == "delete":
        del data[at : at + what]
    elif kind == "truncate":
        del data[at:]
    elif kind == "count":
        count = max(1, count + where)
    elif kind == "varint":
        data[at : at + 1] = what
    return bytes(data), count


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rs=st.lists(_record, min_size=1, max_size=6), codec=st.sampled_from(CODECS),
       mutations=st.lists(_mutation, min_size=1, max_size=3), compact=st.booleans())
def test_damaged_records_are_refused_with_a_code_never_a_crash(
        rs: list, codec: int, mutations: list, compact: bool) -> None:
    section = plain([encode_record(i, d, k, v, h) for i, (k, v, h, d) in enumerate(rs)])
    count = len(rs)
    for m in mutations:
        section, count = mutate(section, count, m)
    batch = rebatch(section, count, codec=codec)
    config = LogConfig(cleanup_policy="compact" if compact else "delete",
                       message_timestamp_after_max_ms=500)
    try:
        largest = check(batch, config)
    except KafkaError as e:
        assert e.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD,
                                ErrorCode.INVALID_TIMESTAMP), e
        event(f"refused: {ErrorCode(e.error_code).name}")
        return
    event("accepted")
    # Accepted: the reference decoder agrees on every record, at offsets 0..n-1.
    decoded = decode_records(batch)
    assert [r.offset_delta for r in decoded] == list(range(count))
    assert largest == max([-1] + [r.timestamp for r in decoded])
    assert not compact or all(r.key is not None for r in decoded)


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=300), codec=st.sampled_from([GZIP, SNAPPY, LZ4, ZSTD]),
       count=st.integers(1, 5), prefix=st.sampled_from([b"", b"\x82SNAPPY\x00\0\0\0\1\0\0\0\1",
                                                         b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18",
                                                         b"\x1f\x8b\x08\x00"]))
def test_garbage_compressed_bodies_are_refused(body: bytes, codec: int, count: int,
                                               prefix: bytes) -> None:
    batch = with_body(prefix + body, codec, count)
    with pytest.raises(KafkaError) as info:
        check(batch)
    assert info.value.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), count=st.integers(0, 50), flags=st.integers(0, 3),
       base=st.integers(-(2**63), 2**63 - 1))
def test_walker_on_arbitrary_bytes(data: bytes, count: int, flags: int, base: int) -> None:
    try:
        largest, problems, listed = _record_walker.walk_records(data, count, base, -5, 5,
                                                                flags, 3)
    except _record_walker.RecordWalkError:
        return
    assert problems >= len(listed or [])
    assert len(listed or []) <= 3
    assert isinstance(largest, int)
