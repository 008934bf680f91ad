"""Compression codecs: round trips, the framings Kafka clients write, bombs, garbage."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    ZSTD,
    compress,
    decompress,
)
from odradek.protocol.exceptions import (
    CorruptRecordError,
    ProtocolError,
    UnsupportedCompressionError,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]

TEXT = b"".join(
    b'{"user": %d, "event": "click", "page": "/p/%d"}\n' % (i, i % 7) for i in range(5000)
)
SAMPLES = {
    "empty": b"",
    "one byte": b"x",
    "text": TEXT,
    "random": os.urandom(100_000),
    "zeros 1MiB": bytes(1024 * 1024),
    "just over a xerial block": os.urandom(XERIAL_BLOCK_SIZE + 1),
}
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_round_trip(codec: int, name: str) -> None:
    data = SAMPLES[name]
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_accepts_any_buffer(codec: int) -> None:
    backing = bytearray(b"--" + TEXT + b"--")
    for data in (TEXT, bytearray(TEXT), memoryview(TEXT), memoryview(backing)[2:-2]):
        packed = compress(codec, data)
        assert isinstance(packed, bytes)
        for view in (packed, bytearray(packed), memoryview(packed)):
            out = decompress(codec, view)
            assert isinstance(out, bytes)
            assert out == TEXT


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionError):
        decompress(codec, b"x")


# --- gzip ---------------------------------------------------------------------------------


def test_gzip_interoperates_with_stdlib() -> None:
    assert gzip.decompress(compress(GZIP, TEXT)) == TEXT
    assert decompress(GZIP, gzip.compress(TEXT, compresslevel=9)) == TEXT


def test_gzip_multiple_members() -> None:
    assert decompress(GZIP, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


# --- snappy -------------------------------------------------------------------------------


def xerial(blocks: list[bytes], header: bytes = XERIAL_MAGIC + struct.pack(">ii", 1, 1)) -> bytes:
    """xerial framing written by hand: header, then (BE int32 length, raw snappy) blocks."""
    out = bytearray(header)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


def test_snappy_writes_xerial_framing() -> None:
    packed = compress(SNAPPY, TEXT)
    assert packed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    # Walk the blocks independently: each is raw snappy of at most 32 KiB.
    pos, out = 16, bytearray()
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        assert len(block) <= XERIAL_BLOCK_SIZE
        out += block
        pos += 4 + n
    assert pos == len(packed)
    assert out == TEXT


def test_snappy_reads_raw_as_librdkafka_writes() -> None:
    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(SNAPPY, raw) == TEXT


def test_snappy_reads_xerial_as_java_writes() -> None:
    blocks = [TEXT[i : i + XERIAL_BLOCK_SIZE] for i in range(0, len(TEXT), XERIAL_BLOCK_SIZE)]
    assert len(blocks) > 1
    assert decompress(SNAPPY, xerial(blocks)) == TEXT


def test_snappy_xerial_ignores_version_fields() -> None:
    # Some writers (redpanda) put version/compat little-endian; Java and kafka-python ignore them.
    header = XERIAL_MAGIC + struct.pack("<ii", 1, 1)
    assert decompress(SNAPPY, xerial([b"abc", b"def"], header=header)) == b"abcdef"


def test_snappy_xerial_header_only_is_empty() -> None:
    assert decompress(SNAPPY, xerial([])) == b""


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00\x00",  # truncated block length
        struct.pack(">i", 100) + b"abc",  # block longer than what is left
        struct.pack(">i", -5),  # negative block length
        struct.pack(">i", 3) + b"\xff\xff\xff",  # block that is not snappy
    ],
)
def test_snappy_xerial_corrupt(tail: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(SNAPPY, xerial([b"abc"]) + tail)


def test_snappy_raw_bomb_refused_before_allocating() -> None:
    # A raw snappy preamble claiming 4 GiB: refused from the header alone.
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)


def test_snappy_xerial_bomb_counts_all_blocks() -> None:
    block = bytes(XERIAL_BLOCK_SIZE)
    packed = xerial([block] * 4)
    assert len(decompress(SNAPPY, packed, max_size=4 * XERIAL_BLOCK_SIZE)) == 4 * XERIAL_BLOCK_SIZE
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(SNAPPY, packed, max_size=4 * XERIAL_BLOCK_SIZE - 1)


# --- lz4 ----------------------------------------------------------------------------------


def test_lz4_writes_frames_java_can_read() -> None:
    packed = compress(LZ4, TEXT * 4)  # several 64 KiB blocks
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # independent blocks: KafkaLZ4BlockInputStream refuses linked ones
    assert flg & 0x03 == 0  # reserved bits, which Java checks
    assert (bd >> 4) & 0x07 in (4, 5, 6, 7)  # a block size Java knows (64 KiB .. 4 MiB)
    assert decompress(LZ4, packed) == TEXT * 4


def test_lz4_reads_hand_made_frame() -> None:
    # What KafkaLZ4BlockOutputStream writes: FLG 0x60 (v1, independent), BD 0x40 (64 KiB),
    # header checksum 0x82, no content size; here one uncompressed block (high bit set).
    payload = TEXT[:1000]
    frame = (
        b"\x04\x22\x4d\x18\x60\x40\x82"
        + struct.pack("<I", 0x80000000 | len(payload))
        + payload
        + b"\x00\x00\x00\x00"
    )
    assert decompress(LZ4, frame) == payload


def test_lz4_reads_linked_blocks_and_checksums() -> None:
    # cramjam's one-shot compress writes linked blocks with content checksums.
    assert decompress(LZ4, bytes(cramjam.lz4.compress(TEXT * 4))) == TEXT * 4


# --- zstd ---------------------------------------------------------------------------------


def zstd_raw_frame(data: bytes, block: int = 1000) -> bytes:
    """A zstd frame by hand: no content size, window 128 KiB, raw blocks."""
    out = bytearray(b"\x28\xb5\x2f\xfd") + bytes([0x00, 0x38])  # FHD: no FCS; window desc
    chunks = [data[i : i + block] for i in range(0, len(data), block)] or [b""]
    for i, chunk in enumerate(chunks):
        last = 1 if i == len(chunks) - 1 else 0
        out += (last | len(chunk) << 3).to_bytes(3, "little") + chunk
    return bytes(out)


def test_zstd_streaming_frame_without_content_size() -> None:
    compressor = cramjam.zstd.Compressor()
    compressor.compress(TEXT)
    frame = bytes(compressor.finish())
    fhd = frame[4]
    assert fhd >> 6 == 0 and not fhd & 0x20  # no Frame_Content_Size field at all
    assert decompress(ZSTD, frame) == TEXT


def test_zstd_hand_made_frame_without_content_size() -> None:
    assert decompress(ZSTD, zstd_raw_frame(TEXT)) == TEXT
    assert decompress(ZSTD, zstd_raw_frame(b"")) == b""


def test_zstd_concatenated_frames() -> None:
    assert decompress(ZSTD, zstd_raw_frame(b"abc") + compress(ZSTD, b"def")) == b"abcdef"


# --- bounds -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_max_size_is_inclusive(codec: int) -> None:
    data = bytes(1024 * 1024)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(codec, packed, max_size=len(data) - 1)


@pytest.mark.parametrize("codec", COMPRESSED, ids=CODEC_NAMES.get)
def test_high_ratio_needs_the_second_buffer(codec: int) -> None:
    # 8 MiB of zeros compress far beyond the first output guess (4x input, >= 64 KiB):
    # the bounded retry must still return everything.
    data = bytes(8 * 1024 * 1024)
    packed = compress(codec, data)
    assert len(packed) * 4 < len(data)
    assert decompress(codec, packed) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=CODEC_NAMES.get)
def test_bomb_refused_with_default_limit(codec: int) -> None:
    if codec == ZSTD:
        # 1 GiB in 32 KiB, by hand: 8192 RLE blocks (type 1) of 128 KiB each.
        rle = (1 << 1 | (128 * 1024) << 3).to_bytes(3, "little") + b"\x00"
        last = (1 | 1 << 1 | (128 * 1024) << 3).to_bytes(3, "little") + b"\x00"
        bomb = b"\x28\xb5\x2f\xfd\x00\x38" + rle * 8191 + last
        assert len(bomb) == 32 * 1024 + 6
    else:
        bomb = compress(codec, bytes(65 * 1024 * 1024))
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(codec, bomb)


# --- garbage ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=CODEC_NAMES.get)
@pytest.mark.parametrize("data", [b"", b"\x00", b"garbage garbage garbage", os.urandom(64)])
def test_garbage_is_corrupt(codec: int, data: bytes) -> None:
    if codec == SNAPPY and data == b"\x00":
        assert decompress(codec, data) == b""  # a valid raw snappy stream of zero bytes
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, data)


@pytest.mark.parametrize("codec", COMPRESSED, ids=CODEC_NAMES.get)
def test_truncated_is_corrupt(codec: int) -> None:
    packed = compress(codec, TEXT)
    for cut in (1, 2, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])


@FUZZ
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=512))
def test_fuzz_random_input(codec: int, data: bytes) -> None:
    try:
        out = decompress(codec, data, max_size=1024 * 1024)
    except ProtocolError:
        return
    assert len(out) <= 1024 * 1024


@FUZZ
@given(
    codec=st.sampled_from(COMPRESSED),
    payload=st.binary(max_size=2000),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 64),
)
def test_fuzz_mutated_streams(
    codec: int, payload: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    packed = bytearray(compress(codec, payload))
    for where, byte in edits:
        packed[where % len(packed)] = byte
    del packed[max(0, len(packed) - cut) :]
    with contextlib.suppress(ProtocolError):
        decompress(codec, bytes(packed), max_size=64 * 1024)
