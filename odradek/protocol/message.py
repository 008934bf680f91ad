"""The base of every generated message class: version dispatch and error translation.

Generated classes (odradek/protocol/messages/) are slotted classes holding the fields;
their module-level functions do the straight-line encoding and decoding of each version.
This class maps a version to those functions and turns the low-level failures of malformed
input into the codec's own DecodeError and EncodeError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, Self

from odradek.protocol.exceptions import DecodeError, EncodeError, UnsupportedVersionError
from odradek.protocol.primitives import Buffer

# What malformed input can raise inside the generated decoders before a check of ours does.
_DECODE_FAILURES = (struct.error, IndexError, ValueError, UnicodeDecodeError, RecursionError)
# What a value of the wrong shape raises inside the generated encoders.
_ENCODE_FAILURES = (struct.error, TypeError, ValueError, AttributeError, OverflowError)


# The default of a field that gets a fresh list or struct per instance (None may be a
# value of its own).
MISSING: Any = object()


class Fields:
    """A generated struct: its __slots__ are its fields, in the spec's order. Equality and
    repr as a dataclass's (the generated classes write their __init__ out instead of
    being dataclasses: much cheaper to import)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__qualname__}({fields})"


class Message(Fields):
    """A request, response, header or data record defined by one of Kafka's JSON specs."""

    __slots__ = ()

    NAME: ClassVar[str]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    # Version -> generated encoder/decoder; versions sharing a layout share functions.
    _ENCODERS: ClassVar[dict[int, Callable[[Any, bytearray], None]]]
    _DECODERS: ClassVar[dict[int, Callable[[Buffer, int], tuple[Any, int]]]]

    def encode(self, version: int) -> bytes:
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int) -> None:
        """Appends this message, encoded in `version`, to `out`."""
        encoder = self._ENCODERS.get(version)
        if encoder is None:
            raise self._unsupported(version)
        try:
            encoder(self, out)
        except _ENCODE_FAILURES as e:
            raise EncodeError(f"cannot encode {self.NAME} v{version}: {e}") from e

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Self:
        """Decodes a whole buffer; bytes left over mean the version or the framing is wrong."""
        message, pos = cls.decode_from(data, 0, version)
        if pos != len(data):
            raise DecodeError(
                f"{cls.NAME} v{version}: {len(data) - pos} bytes left over after decoding"
            )
        return message

    @classmethod
    def decode_from(cls, data: Buffer, pos: int, version: int) -> tuple[Self, int]:
        """Decodes one message starting at `pos`; returns it and the position after it."""
        decoder = cls._DECODERS.get(version)
        if decoder is None:
            raise cls._unsupported(version)
        try:
            return decoder(data, pos)
        except _DECODE_FAILURES as e:
            raise DecodeError(f"malformed {cls.NAME} v{version}: {e}") from e

    @classmethod
    def _unsupported(cls, version: int) -> UnsupportedVersionError:
        return UnsupportedVersionError(
            f"{cls.NAME} has no version {version} (valid: {cls.MIN_VERSION}-{cls.MAX_VERSION})"
        )
