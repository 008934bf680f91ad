"""How much the broker's append path costs over the CRC-32C it cannot avoid.

Run: python benchmarks/bench_records.py

Prints, for this machine: raw CRC-32C speed of the crc32c library on 1 MiB; the cost of
validating (header walk + CRC + header checks) and assigning offsets to a 1 MiB batch of
~1 KiB records held in a bytearray; and the overhead ratio against the CRC alone (target:
under 10%). A second row does the same for 1 MiB made of 64 batches of 16 KiB, where the
per-batch Python overhead weighs more. Each figure is the best of several timed runs.
"""

from __future__ import annotations

import os
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crc32c import crc32c, hardware_based

from odradek.protocol.records import (
    ATTRIBUTES_OFFSET,
    assign_offsets,
    build_record_batch,
    iter_batch_headers,
    validate_batch,
)

MIB = 1024 * 1024
RECORD_SIZE = 1000  # value bytes; with key and framing a record is ~1 KiB
REPEATS = 7


def best_seconds(fn: Callable[[], object], number: int) -> float:
    """Best per-call time over REPEATS runs of `number` calls (least disturbed by noise)."""
    return min(timeit.repeat(fn, number=number, repeat=REPEATS)) / number


def make_buffer(batch_bytes: int, total_bytes: int) -> bytearray:
    """Concatenated uncompressed batches of ~1 KiB records, as a Produce request holds."""
    out = bytearray()
    per_batch = max(1, batch_bytes // (RECORD_SIZE + 24))
    timestamp = 1_700_000_000_000
    while len(out) + batch_bytes <= total_bytes + batch_bytes // 2:
        records = [
            (b"key-%06d" % i, os.urandom(RECORD_SIZE), (), timestamp + i) for i in range(per_batch)
        ]
        out += build_record_batch(records, producer_id=42, producer_epoch=0, base_sequence=0)
    return out


def append_path(buf: bytearray) -> int:
    """What Log.append does to a Produce request's records: validate, then assign offsets."""
    next_offset = 1_000_000
    for pos, header in iter_batch_headers(buf):
        validate_batch(buf, pos, header)
        assign_offsets(buf, pos, next_offset)
        next_offset += header.last_offset_delta + 1
    return next_offset


def main() -> None:
    print(f"crc32c hardware_based={hardware_based}, Python {sys.version.split()[0]}")
    print()
    header = (
        f"{'buffer':<26}{'size':>10}{'CRC only':>12}{'CRC MB/s':>11}"
        f"{'walk only':>11}{'validate+assign':>17}{'overhead':>10}"
    )
    print(header)
    print("-" * len(header))
    for label, batch_bytes in (("1 batch of 1 MiB", MIB), ("64 batches of 16 KiB", 16 * 1024)):
        buf = make_buffer(batch_bytes, MIB)
        batches = list(iter_batch_headers(buf))
        view = memoryview(buf)
        spans = [(pos + ATTRIBUTES_OFFSET, pos + h.size_in_bytes) for pos, h in batches]

        def crc_only(view: memoryview = view, spans: list[tuple[int, int]] = spans) -> None:
            for start, end in spans:
                crc32c(view[start:end])

        def walk_only(buf: bytearray = buf) -> None:
            for _pos, _header in iter_batch_headers(buf):
                pass

        number = 2000
        t_crc = best_seconds(crc_only, number)
        t_walk = best_seconds(walk_only, number)
        t_full = best_seconds(lambda buf=buf: append_path(buf), number)
        overhead = t_full / t_crc - 1.0
        print(
            f"{label:<26}{len(buf):>10}{t_crc * 1e6:>10.1f}us{len(buf) / t_crc / 1e6:>11.0f}"
            f"{t_walk * 1e6:>9.2f}us{t_full * 1e6:>15.1f}us{overhead:>10.1%}"
        )
    print()
    print("overhead = validate+assign / CRC only - 1 (target for the 1 MiB batch: < 10%)")


if __name__ == "__main__":
    main()
