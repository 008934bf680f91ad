"""The codec's own exceptions.

Everything the protocol package raises on bad input is a ProtocolError, never a bare
IndexError or struct.error, so the server can turn it into a Kafka error code (or close
the connection) without guessing. Each class names the Kafka error code it maps to.
"""

from __future__ import annotations

from collections.abc import Sequence


class KafkaError(Exception):
    """An error that has a Kafka error code: what the wire, the logs and the CLI report."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class ProtocolError(KafkaError):
    """Base of all codec errors. `error_code` is the Kafka error code it maps to."""


class DecodeError(ProtocolError):
    """Bytes that do not decode as the message and version they claim to be."""

    error_code = 2  # CORRUPT_MESSAGE


class EncodeError(ProtocolError):
    """A value that cannot be written in the requested version (wrong type, out of range)."""


class UnsupportedVersionError(ProtocolError):
    """A version outside the range the message (or the API) defines."""

    error_code = 35  # UNSUPPORTED_VERSION


class FrameTooLargeError(ProtocolError):
    """A size prefix beyond socket.request.max.bytes, refused before any allocation."""

    error_code = 2  # CORRUPT_MESSAGE; Kafka closes the connection (InvalidReceiveException)


class CorruptRecordError(ProtocolError):
    """A record batch whose CRC, size or header fields are inconsistent."""

    error_code = 2  # CORRUPT_MESSAGE


class DecompressionLimitError(CorruptRecordError):
    """Compressed records that inflate past the allowed size: a decompression bomb, or a
    batch bigger than the bound. Nothing past the bound was ever allocated."""


class InvalidRecordError(ProtocolError):
    """A well-formed batch that Kafka refuses, such as a legacy (magic 0/1) message set.

    `record_errors` lists the records at fault as (index in the batch, message): Produce
    v8+'s record_errors, so that a producer fails those records and not the whole batch.
    """

    error_code = 87  # INVALID_RECORD

    def __init__(self, message: str = "",
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        super().__init__(message)
        self.record_errors = list(record_errors)


class UnsupportedCompressionError(ProtocolError):
    """A compression codec id that Kafka does not define."""

    error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE
