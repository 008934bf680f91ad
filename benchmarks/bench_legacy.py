"""What the old API versions cost: converting legacy message sets (Produce v0-v2) to v2 and
down-converting v2 batches for Fetch v0-v3, against the v2 paths they replace.

Run: python benchmarks/bench_legacy.py

For 1 MiB of records (small ~100-byte and ~1 KiB values), uncompressed and gzip, prints:
the v2 append path (header checks, CRC-32C, the record walk, offsets: what a current
client's produce costs),
convert_to_batch of the same records as a magic 1 message set, and down_convert of the v2
batch to magic 0 and magic 1 (what a current fetch, sent with sendfile, does not pay at
all). Figures are MB/s and records/s, best of several runs, with the ratio to the v2 path.
"""

from __future__ import annotations

import os
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odradek.protocol.compression import GZIP, NONE
from odradek.protocol.legacy_records import build_message_set, convert_to_batch, down_convert
from odradek.protocol.records import (
    assign_offsets,
    build_record_batch,
    iter_batch_headers,
    validate_batch,
)
from odradek.storage.config import LogConfig
from odradek.storage.log_validator import RecordValidation, validate_records

MIB = 1024 * 1024
REPEATS = 5


def best_seconds(fn: Callable[[], object]) -> float:
    return min(timeit.repeat(fn, number=1, repeat=REPEATS))


CONFIG = LogConfig()
VALIDATION = RecordValidation()


def v2_append(buf: bytearray) -> None:
    """What Log.append does to a current client's batch: header and CRC checks, the
    record walk (inflating a compressed batch), offsets."""
    view = memoryview(buf)
    for pos, header in iter_batch_headers(buf):
        validate_batch(buf, pos, header)
        validate_records(view, pos, header, CONFIG, header.max_timestamp, VALIDATION, "bench")
        assign_offsets(buf, pos, 1_000_000)


def main() -> None:
    print(f"{'records':<22} {'path':<34} {'MB/s':>8} {'records/s':>11} {'vs v2':>7}")
    for value_size in (100, 1000):
        count = MIB // (value_size + 30)
        now = 1_700_000_000_000
        items = [(b"key-%06d" % i, os.urandom(value_size // 2) * 2) for i in range(count)]
        for codec, name in ((NONE, "none"), (GZIP, "gzip")):
            batch = build_record_batch([(k, v, (), now + i) for i, (k, v) in enumerate(items)],
                                       compression=codec)
            legacy = build_message_set([(i, now + i, k, v) for i, (k, v) in enumerate(items)],
                                       1, compression=codec)
            base = best_seconds(lambda: v2_append(bytearray(batch)))  # noqa: B023
            rows = [
                ("v2 append (validate, walk, offsets)", base),
                ("Produce v2: magic 1 -> v2", best_seconds(
                    lambda: convert_to_batch(legacy, target_compression=None))),  # noqa: B023
                ("Fetch v1: v2 -> magic 0", best_seconds(
                    lambda: down_convert(batch, 0, fetch_offset=0))),  # noqa: B023
                ("Fetch v3: v2 -> magic 1", best_seconds(
                    lambda: down_convert(batch, 1, fetch_offset=0))),  # noqa: B023
            ]
            label = f"{count} x {value_size} B, {name}"
            for path, seconds in rows:
                print(f"{label:<22} {path:<34} {MIB / seconds / 1e6:>8.1f} "
                      f"{count / seconds:>11,.0f} {seconds / base:>6.1f}x")


if __name__ == "__main__":
    main()
