"""The protocol's primitive types, as the generated message code reads and writes them.

Readers take a buffer (bytes, bytearray or memoryview) and a position and return the value
and the next position; they check every length against the buffer, so a truncated or lying
input raises DecodeError (or struct.error, which Message.decode turns into DecodeError)
instead of reading past the end or allocating what a length field claims. Writers append to
a bytearray.

"Compact" is the flexible-version encoding (KIP-482): lengths as unsigned varints of
length + 1, so that 0 means null.
"""

from __future__ import annotations

from struct import Struct
from typing import Any
from uuid import UUID

from odradek.protocol.exceptions import DecodeError

Buffer = bytes | bytearray | memoryview

INT8 = Struct(">b")
INT16 = Struct(">h")
INT32 = Struct(">i")
INT64 = Struct(">q")
UINT16 = Struct(">H")
UINT32 = Struct(">I")
FLOAT64 = Struct(">d")

NULL_INT16 = b"\xff\xff"
NULL_INT32 = b"\xff\xff\xff\xff"
ZERO_UUID = UUID(int=0)

# Unsigned varints of protocol lengths and tags fit in 32 bits: 5 bytes at most.
_MAX_UVARINT_BYTES = 5


# ---- unsigned varints ---------------------------------------------------------------------


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 32 bits; longer or truncated input is a DecodeError."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    for i in range(1, _MAX_UVARINT_BYTES):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, pos + i + 1
        shift += 7
    raise DecodeError("unsigned varint longer than 32 bits")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
        return
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# ---- lengths --------------------------------------------------------------------------------


def _checked_end(buf: Buffer, pos: int, length: int) -> int:
    end = pos + length
    if end > len(buf):
        raise DecodeError(f"length {length} at position {pos} runs past the end ({len(buf)} bytes)")
    return end


def read_array_length(buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    """An INT32 array length; -1 (null) comes back as -1 when the field is nullable."""
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    return _checked_count(buf, pos, n, nullable), pos


def read_compact_array_length(buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    """A compact array length (unsigned varint of N + 1); null comes back as -1."""
    n, pos = read_uvarint(buf, pos)
    return _checked_count(buf, pos, n - 1, nullable), pos


def _checked_count(buf: Buffer, pos: int, n: int, nullable: bool) -> int:
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise DecodeError(f"invalid array length {n} at position {pos}")
    # Every element takes at least one byte: a count beyond the bytes left is a lie, and
    # refusing it here bounds what decoding allocates by the size of the frame.
    if n > len(buf) - pos:
        raise DecodeError(f"array of {n} elements at {pos} but only {len(buf) - pos} bytes left")
    return n


def read_struct_marker(buf: Buffer, pos: int) -> tuple[bool, int]:
    """A nullable struct's INT8 presence marker: -1 for null, 1 for present."""
    (marker,) = INT8.unpack_from(buf, pos)
    if marker == -1:
        return False, pos + 1
    if marker == 1:
        return True, pos + 1
    raise DecodeError(f"invalid nullable struct marker {marker} at position {pos}")


# ---- strings ------------------------------------------------------------------------------


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        raise DecodeError(f"null or negative length {n} for a non-nullable string at {pos - 2}")
    end = _checked_end(buf, pos, n)
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"invalid string length {n} at {pos - 2}")
    end = _checked_end(buf, pos, n)
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError(f"null for a non-nullable compact string at {pos - 1}")
    end = _checked_end(buf, pos, n - 1)
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _checked_end(buf, pos, n - 1)
    return str(buf[pos:end], "utf-8"), end


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes exceeds the INT16 length limit")
    out += INT16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += NULL_INT16
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    write_uvarint(out, len(data) + 1)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


# ---- bytes and records --------------------------------------------------------------------
# Byte fields come back as slices of the input buffer: when the input is a memoryview (as
# the server passes whole frames), a record batch is never copied on its way to the log.


def read_bytes(buf: Buffer, pos: int) -> tuple[Buffer, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        raise DecodeError(f"null or negative length {n} for non-nullable bytes at {pos - 4}")
    end = _checked_end(buf, pos, n)
    return buf[pos:end], end


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[Buffer | None, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"invalid bytes length {n} at {pos - 4}")
    end = _checked_end(buf, pos, n)
    return buf[pos:end], end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[Buffer, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError(f"null for non-nullable compact bytes at {pos - 1}")
    end = _checked_end(buf, pos, n - 1)
    return buf[pos:end], end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[Buffer | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _checked_end(buf, pos, n - 1)
    return buf[pos:end], end


def write_bytes(out: bytearray, value: Buffer) -> None:
    out += INT32.pack(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out += NULL_INT32
    else:
        out += INT32.pack(len(value))
        out += value


def write_compact_bytes(out: bytearray, value: Buffer) -> None:
    write_uvarint(out, len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_uvarint(out, len(value) + 1)
        out += value


# ---- uuid ---------------------------------------------------------------------------------


def read_uuid(buf: Buffer, pos: int) -> tuple[UUID, int]:
    end = _checked_end(buf, pos, 16)
    return UUID(bytes=bytes(buf[pos:end])), end


# ---- tagged fields ------------------------------------------------------------------------


def read_tag_header(buf: Buffer, pos: int) -> tuple[int, int, int]:
    """A tagged field's tag and size; returns (tag, start of its data, end of its data)."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    return tag, pos, _checked_end(buf, pos, size)


def check_tag_end(pos: int, end: int, tag: int) -> None:
    if pos != end:
        raise DecodeError(f"tagged field {tag} should end at {end} but its value ends at {pos}")


def write_tagged_fields(
    out: bytearray,
    known: list[tuple[int, Buffer]],
    unknown: list[tuple[int, bytes]] | None,
) -> None:
    """Writes a tagged-field section: count, then (tag, size, data) in ascending tag order."""
    fields: list[tuple[int, Buffer]] = [*known, *unknown] if unknown else known
    if len(fields) > 1:
        fields = sorted(fields, key=_tag_of)
    write_uvarint(out, len(fields))
    for tag, data in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def _tag_of(field: tuple[int, Any]) -> int:
    return field[0]


def read_unknown_tagged_fields(buf: Buffer, pos: int) -> tuple[list[tuple[int, bytes]] | None, int]:
    """A tagged-field section of which this version knows no tag: all are kept as raw bytes."""
    count, pos = read_uvarint(buf, pos)
    if count == 0:
        return None, pos
    fields = []
    for _ in range(count):
        tag, start, end = read_tag_header(buf, pos)
        fields.append((tag, bytes(buf[start:end])))
        pos = end
    return fields, pos
