"""The compression codecs of RecordBatch v2, by the attribute id Kafka gives them.

All four codecs come from `cramjam`. What Kafka adds on top of the plain libraries:

* snappy: Java clients write the xerial block framing (a 16-byte header, then blocks each
  prefixed by a big-endian int32 length, each block raw snappy); librdkafka writes raw
  snappy. We read both (xerial is recognised by its magic, as Java and kafka-python do) and
  write xerial, which every client reads.
* lz4: the LZ4 *frame* format with independent blocks. Java's KafkaLZ4BlockInputStream
  refuses linked blocks ("Dependent block stream is unsupported"), and cramjam's one-shot
  `lz4.compress` links them, so we compress through `lz4.Compressor(block_linked=False)`.
* zstd: frames may carry no content size (streaming writers); cramjam decodes those.

Decompression is bounded: the output never grows past `max_size` bytes (default
DEFAULT_MAX_DECOMPRESSED_SIZE), so a small compressed batch cannot exhaust memory
(a "decompression bomb"); past the bound, or on any malformed input, CorruptRecordError.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import Final

import cramjam

from odradek.protocol.exceptions import (
    CorruptRecordError,
    DecompressionLimitError,
    ProtocolError,
    UnsupportedCompressionError,
)

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "XERIAL_BLOCK_SIZE",
    "XERIAL_MAGIC",
    "ZSTD",
    "ZSTD_DEFAULT_LEVEL",
    "compress",
    "decompress",
]

# Kafka's CompressionType ids: the low three bits of a batch's attributes.
NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

CODEC_NAMES: Final[dict[int, str]] = {
    NONE: "none",
    GZIP: "gzip",
    SNAPPY: "snappy",
    LZ4: "lz4",
    ZSTD: "zstd",
}

# Kafka's default max.message.bytes is about 1 MiB; 64 MiB leaves room for a 64x ratio on
# such a batch (records compress 2-10x in practice) while keeping one decompression far from
# exhausting a broker's memory. Callers that allow bigger batches pass their own max_size.
DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 64 * 1024 * 1024

# Kafka's default compression.zstd.level; cramjam's own default (11) is several times slower.
ZSTD_DEFAULT_LEVEL: Final = 3

# xerial snappy-java framing, as written by Java's SnappyOutputStream.
XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible 1
_XERIAL_HEADER_SIZE: Final = len(_XERIAL_HEADER)  # 16
XERIAL_BLOCK_SIZE: Final = 32 * 1024  # SnappyOutputStream's default block size
_INT32 = struct.Struct(">i")

# First output buffer tried: ratio x input, at least _MIN_GUESS. Most batches fit, and a
# bytearray of that size costs little; only when it is too small is a second, lazily
# zeroed buffer of the full max_size mapped (see _decompress_bounded).
_GUESS_RATIO: Final = 4
_MIN_GUESS: Final = 64 * 1024

_Buffer = bytes | bytearray | memoryview


def compress(codec: int, data: _Buffer, *, level: int | None = None) -> bytes:
    """Compress `data` the way Kafka's producers do for attribute id `codec`.

    `level` is the codec's own level (None: gzip 6 and lz4 as Java's defaults, zstd 3).
    """
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return bytes(cramjam.gzip.compress(data, level=level))
        if codec == SNAPPY:
            return _xerial_compress(data)
        if codec == LZ4:
            compressor = cramjam.lz4.Compressor(
                level=level, content_checksum=False, block_linked=False
            )
            compressor.compress(data if isinstance(data, bytes) else bytes(data))  # bytes only
            return bytes(compressor.finish())
        if codec == ZSTD:
            return bytes(
                cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level)
            )
    except cramjam.CompressionError as exc:
        raise ProtocolError(f"{CODEC_NAMES[codec]} compression failed: {exc}") from None
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def decompress(
    codec: int, data: _Buffer, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress a batch's records section; CorruptRecordError if malformed or > max_size."""
    if codec == NONE:
        if len(data) > max_size:
            raise DecompressionLimitError(f"{len(data)} bytes of records: more than {max_size}")
        return bytes(data)
    if codec == SNAPPY:
        if len(data) >= _XERIAL_HEADER_SIZE and bytes(data[:8]) == XERIAL_MAGIC:
            return _xerial_decompress(data, max_size)
        return _snappy_raw_decompress(data, max_size, max_size)
    if codec == GZIP:
        return _decompress_bounded(cramjam.gzip.decompress_into, data, max_size, "gzip",
                                   _gzip_size(data))
    if codec == LZ4:
        return _decompress_bounded(cramjam.lz4.decompress_into, data, max_size, "lz4")
    if codec == ZSTD:
        return _decompress_bounded(cramjam.zstd.decompress_into, data, max_size, "zstd",
                                   _zstd_size(data))
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _gzip_size(data: _Buffer) -> int | None:
    """The size a gzip member's trailer states (ISIZE, mod 2^32): a hint, never trusted."""
    if len(data) < 18:  # a 10-byte header and the 8-byte trailer
        return None
    return int.from_bytes(memoryview(data)[-4:], "little")


_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


def _zstd_size(data: _Buffer) -> int | None:
    """Frame_Content_Size of a zstd frame's header, when the writer put it there (librdkafka
    does, streaming writers such as Java's do not): a hint, never trusted."""
    view = memoryview(data)
    if len(view) < 6 or bytes(view[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    single_segment = descriptor & 0x20
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if fcs_size == 0:
        return None
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if len(view) < start + fcs_size:
        return None
    size = int.from_bytes(view[start : start + fcs_size], "little")
    return size + 256 if fcs_size == 2 else size


def _decompress_bounded(
    decompress_into: Callable[[_Buffer, _Buffer], int],
    data: _Buffer,
    max_size: int,
    name: str,
    hint: int | None = None,
) -> bytes:
    """Decompress into fixed-size buffers, so the output can never exceed max_size bytes.

    cramjam's `decompress_into` streams into the buffer it is given and fails as soon as
    that buffer is full, which is what bounds a bomb. A first try uses a modest bytearray;
    if it fails (too small, or corrupt input) the second and last try uses an anonymous
    mmap of max_size + 1 bytes, which the kernel zeroes lazily page by page, so a large
    allowance costs only the pages actually written. A size the data states (`hint`)
    sizes the first try, so that a batch that compresses well is not inflated twice.
    """
    limit = max_size + 1  # one spare byte tells "exactly max_size" from "more"
    if hint is not None and hint < max_size:
        guess = hint + 1
    else:
        guess = min(limit, max(_MIN_GUESS, len(data) * _GUESS_RATIO))
    out = bytearray(guess)
    try:
        n = decompress_into(data, out)
    except cramjam.DecompressionError as exc:
        if guess == limit:
            raise _decompression_error(name, exc, max_size) from None
    else:
        if n > max_size:
            raise DecompressionLimitError(f"{name} data decompresses to more than {max_size} bytes")
        del out[n:]
        return bytes(out)
    with mmap.mmap(-1, limit) as big:
        try:
            n = decompress_into(data, big)
        except cramjam.DecompressionError as exc:
            raise _decompression_error(name, exc, max_size) from None
        if n > max_size:
            raise DecompressionLimitError(f"{name} data decompresses to more than {max_size} bytes")
        return big[:n]


def _decompression_error(name: str, exc: Exception, max_size: int) -> CorruptRecordError:
    # cramjam reports a full output buffer as an io WriteZero error with the first text;
    # zstd, for a frame whose stated content size is larger than the buffer, the second.
    text = str(exc)
    if "failed to write whole buffer" in text or "Destination buffer is too small" in text:
        return DecompressionLimitError(f"{name} data decompresses to more than {max_size} bytes")
    return CorruptRecordError(f"corrupt {name} data: {exc}")


def _snappy_raw_decompress(data: _Buffer, budget: int, max_size: int) -> bytes:
    """Raw snappy states its decompressed length up front: check it before allocating."""
    try:
        size = cramjam.snappy.decompress_raw_len(data)
        if size > budget:
            raise DecompressionLimitError(f"snappy data decompresses to more than {max_size} bytes")
        out = bytearray(size)
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"corrupt snappy data: {exc}") from None
    if n != size:
        raise CorruptRecordError(f"corrupt snappy data: {n} bytes decoded, header said {size}")
    return bytes(out)


def _xerial_compress(data: _Buffer) -> bytes:
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    parts = [_XERIAL_HEADER]
    pack = _INT32.pack
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: _Buffer, max_size: int) -> bytes:
    """Blocks after the 16-byte header; version fields ignored (some writers get them wrong)."""
    view = memoryview(data).cast("B")
    end = len(view)
    pos = _XERIAL_HEADER_SIZE
    parts: list[bytes] = []
    total = 0
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("corrupt xerial snappy data: truncated block length")
        (block_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_len < 0 or block_len > end - pos:
            raise CorruptRecordError(
                f"corrupt xerial snappy data: block of {block_len} bytes, {end - pos} left"
            )
        part = _snappy_raw_decompress(view[pos : pos + block_len], max_size - total, max_size)
        total += len(part)
        parts.append(part)
        pos += block_len
    return b"".join(parts)
