"""Partition log speed on this machine, next to the machine's own limits measured in the same run.

Run: .venv/bin/python benchmarks/bench_storage.py [MIB] [--partitions N] [--repeats N]
     [--only append,read,recovery,partitions]

MIB (default 1024, or the BENCH_STORAGE_MIB environment variable) is how much each case
writes. Files go to a temporary directory under .bench-tmp/ in the project (the same disk
as the project, not tmpfs), removed at the end. Run as root, the script also drops the
page cache (/proc/sys/vm/drop_caches) to measure cold reads, cold recovery and a cold
start-up; without root those rows are skipped.

1. Append of ~1 KiB records in 16 KiB and in 1 MiB batches through Log.append_as_leader,
   next to os.write() of the same bytes in the same chunks into a plain file (the limit),
   and to os.write() preceded by a CRC-32C of each batch (the floor for an append that
   validates); without fsync (page cache: CPU cost of the write path) and with the final
   fsync counted (the device). Target: Log >= 0.8x raw for 1 MiB batches.
2. Sequential read of those logs through Log.read(offset, 1 MiB).read(), as a consumer
   fetching from offset 0 to the end, next to os.pread() of the file in 1 MiB steps.
3. Recovery of the whole log as one segment after an unclean shutdown
   (Log.open(clean_shutdown=False, recovery_point=0)), next to the least work it must
   do: read the file and CRC-32C every batch. Target: recovery <= 2x that.
4. Start-up of a broker with N (default 10,000) partitions of one small segment each
   (LogManager.startup after a clean shutdown when it exists, else Log.open of each), in
   a fresh process, with its resident memory growth; then the first log_end_offset of
   each log (which opens its files) and the descriptors that holds. Targets: < 5 s,
   < 300 MiB.

Each figure is the best of --repeats runs (default 3; writes rotate their order, after an
untimed warm-up write). Throughputs are in MB/s of 10^6 bytes. Batches are built once;
append rewrites their baseOffset in place, which is what it does to a Produce request's
buffer anyway.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import platform
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crc32c import crc32c, hardware_based

from odradek.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    build_record_batch,
)
from odradek.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    write_clean_shutdown_marker,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

try:  # being written alongside this benchmark: use it when it is there
    from odradek.storage.log_manager import LogManager, LogManagerConfig
except ImportError:  # pragma: no cover - depends on the tree
    LogManager = LogManagerConfig = None  # type: ignore[assignment,misc]

KIB = 1024
MIB = 1024 * KIB
MB = 1e6
RECORD_VALUE = 1000  # value bytes; with key and framing a record is ~1 KiB on disk
POOL_BYTES = 16 * MIB  # distinct batches built once and cycled
READ_STEP = MIB  # a consumer's max_bytes per fetch
SCAN_CHUNK = 8 * MIB  # the CRC baseline reads in chunks as large as recovery's
BENCH_ROOT = Path(__file__).resolve().parents[1] / ".bench-tmp"
CASES = (("16 KiB batches", 16 * KIB), ("1 MiB batches", MIB))
SECTIONS = ("append", "read", "recovery", "partitions")

_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")


# ---- machine ------------------------------------------------------------------------------


def drop_caches() -> bool:
    """Writes back dirty pages, then drops the page cache if we may; False if we may not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def meminfo(field: str) -> int:
    """A /proc/meminfo field, in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * KIB
    return 0


def vm_setting(name: str) -> int:
    try:
        return int(Path(f"/proc/sys/vm/{name}").read_text())
    except (OSError, ValueError):
        return -1


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    return 0


def filesystem_of(path: Path) -> str:
    """'ext4 on /dev/vda' for the mount holding `path`."""
    best = ("?", "?", "")
    resolved = str(path.resolve())
    with open("/proc/mounts") as f:
        for line in f:
            device, mount, fstype = line.split()[:3]
            if (resolved == mount or resolved.startswith(mount.rstrip("/") + "/")) and len(
                mount
            ) >= len(best[2]):
                best = (fstype, device, mount)
    return f"{best[0]} on {best[1]}"


# ---- data ---------------------------------------------------------------------------------


def build_pool(batch_bytes: int) -> tuple[list[bytearray], int]:
    """Distinct batches of ~1 KiB records, each at most batch_bytes; and records per batch."""
    now = int(time.time() * 1000)
    one = len(build_record_batch([(b"key-000000", bytes(RECORD_VALUE), (), now)]))
    per_batch = max(1, (batch_bytes - RECORD_BATCH_OVERHEAD) // (one - RECORD_BATCH_OVERHEAD))
    pool: list[bytearray] = []
    while len(pool) * batch_bytes < POOL_BYTES or len(pool) < 4:
        while True:
            records = [
                (b"key-%06d" % i, os.urandom(RECORD_VALUE), (), now) for i in range(per_batch)
            ]
            batch = build_record_batch(records)
            if len(batch) <= batch_bytes or per_batch == 1:
                break
            per_batch -= 1
        pool.append(bytearray(batch))
    return pool, per_batch


def bench_config() -> LogConfig:
    """Kafka's defaults, but one segment for the whole run (segment.bytes at its maximum)."""
    return LogConfig.from_properties({"segment.bytes": 2**31 - 1})


# ---- 1. append ----------------------------------------------------------------------------


class AppendRun:
    """One timed write of `total` bytes: seconds without and with the final fsync."""

    def __init__(self, write_s: float, fsync_s: float, written: int, records: int) -> None:
        self.write_s = write_s
        self.fsync_s = fsync_s
        self.written = written
        self.records = records


def raw_append(
    path: Path, pool: list[bytearray], total: int, per_batch: int, crc: bool = False
) -> AppendRun:
    """os.write of the batches; with `crc`, also CRC-32C each one first (the one check an
    append cannot skip), the floor for a validating append."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)  # as a segment opens
    try:
        written = batches = 0
        n = len(pool)
        start = time.perf_counter()
        while written < total:
            buf = pool[batches % n]
            if crc:
                crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
            done = os.write(fd, buf)
            while done < len(buf):
                done += os.write(fd, memoryview(buf)[done:])
            written += done
            batches += 1
        wrote = time.perf_counter()
        os.fsync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
    return AppendRun(wrote - start, synced - wrote, written, batches * per_batch)


def log_append(
    directory: Path, pool: list[bytearray], total: int, per_batch: int
) -> tuple[AppendRun, Log, list[int], list[int]]:
    """Appends through a Log; returns it open, with the file position after each batch
    and the offset that follows it (what a consumer's next fetch asks for)."""
    log = Log.open(directory, bench_config())
    ends: list[int] = []
    next_offsets: list[int] = []
    written = batches = 0
    n = len(pool)
    append = log.append_as_leader
    start = time.perf_counter()
    while written < total:
        buf = pool[batches % n]
        info = append(buf)
        written += len(buf)
        batches += 1
        ends.append(written)
        next_offsets.append(info.last_offset + 1)
    wrote = time.perf_counter()
    log.flush()
    synced = time.perf_counter()
    return AppendRun(wrote - start, synced - wrote, written, batches * per_batch), log, ends, (
        next_offsets
    )


# ---- 2. read ------------------------------------------------------------------------------


def raw_read(path: Path) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        start = time.perf_counter()
        while position < size:
            position += len(os.pread(fd, READ_STEP, position))
        return time.perf_counter() - start, position
    finally:
        os.close(fd)


def log_read(log: Log, ends: list[int], next_offsets: list[int]) -> tuple[float, int, int]:
    """Fetches from offset 0 to the end, READ_STEP at a time; like a consumer, the next
    fetch starts after the last whole batch received (a cut batch is fetched again).
    Returns seconds, bytes received and fetches."""
    end = log.log_end_offset
    offset = received = fetches = 0
    start = time.perf_counter()
    while offset < end:
        fetched = log.read(offset, READ_STEP)
        data = fetched.read()
        piece = fetched.slices[0]
        received += len(data)
        i = bisect.bisect_right(ends, piece.position + piece.length) - 1
        offset = next_offsets[i]
        fetches += 1
    return time.perf_counter() - start, received, fetches


# ---- 3. recovery --------------------------------------------------------------------------


def crc_scan(path: Path) -> tuple[float, int]:
    """The least recovery must do: read the file and CRC-32C each batch's attributes..end."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = chunk_start = batches = 0
        chunk = b""
        view = memoryview(chunk)
        length_at = LENGTH_OFFSET
        start = time.perf_counter()
        while position < size:
            rel = position - chunk_start
            if rel + RECORD_BATCH_OVERHEAD > len(chunk):
                chunk_start, rel = position, 0
                chunk = os.pread(fd, min(SCAN_CHUNK, size - position), position)
                view = memoryview(chunk)
            batch_size = _LENGTH.unpack_from(chunk, rel + length_at)[0] + LOG_OVERHEAD
            if rel + batch_size > len(chunk):
                chunk_start, rel = position, 0
                chunk = os.pread(fd, max(min(SCAN_CHUNK, size - position), batch_size), position)
                view = memoryview(chunk)
            if crc32c(view[rel + ATTRIBUTES_OFFSET : rel + batch_size]) != _CRC.unpack_from(
                chunk, rel + CRC_OFFSET
            )[0]:
                raise RuntimeError(f"{path}: CRC mismatch at {position}")
            position += batch_size
            batches += 1
        return time.perf_counter() - start, batches
    finally:
        os.close(fd)


def recover(directory: Path, expected_end: int) -> float:
    start = time.perf_counter()
    log = Log.open(directory, bench_config(), clean_shutdown=False, recovery_point=0)
    elapsed = time.perf_counter() - start
    if log.log_end_offset != expected_end:
        raise RuntimeError(f"recovery ended at {log.log_end_offset}, not {expected_end}")
    log.close()
    return elapsed


# ---- 4. many partitions -------------------------------------------------------------------


def create_partitions(root: Path, count: int) -> None:
    """`count` partitions of one small segment (one batch of 10 records), left as a clean
    LogManager.shutdown() leaves them: closed logs, both offset checkpoints and the
    clean-shutdown marker. Created one log at a time, as a broker holding them all open
    would need more descriptors than the limit may allow (see raise_fd_limit)."""
    now = int(time.time() * 1000)
    batch = build_record_batch([(b"key-%d" % i, bytes(100), (), now) for i in range(10)])
    config = LogConfig()
    for p in range(count):
        log = Log.open(root / f"bench-{p}", config)
        log.append_as_leader(bytearray(batch))
        log.close()
    OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).write(
        {("bench", p): 10 for p in range(count)}
    )
    OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).write(
        {("bench", p): 0 for p in range(count)}
    )
    write_clean_shutdown_marker(root)


def raise_fd_limit(partitions: int) -> int:
    """Open logs hold descriptors (a segment's file, and one per mapped index: Python's mmap
    keeps a dup of the file's): raise the limit to what `partitions` can need, as far as we
    may. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * partitions + 4096
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            nr_open = want
        target = min(want, nr_open)
        try:  # raising the hard limit needs root (CAP_SYS_RESOURCE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, max(target, hard)))
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def reopen_child(root: Path) -> None:
    """Runs in a fresh process: opens every partition under `root` and prints figures."""
    raise_fd_limit(sum(1 for _ in os.scandir(root)))
    fds_before = open_fds()
    before = rss_bytes()
    start = time.perf_counter()
    manager = None
    if LogManager is not None:
        manager = LogManager(LogManagerConfig(log_dirs=(root,)), LogConfig())
        manager.startup(background=False)
        logs = manager.logs()
    else:
        config = LogConfig()
        logs = [Log.open(Path(e.path), config) for e in os.scandir(root) if e.is_dir()]
    opened = time.perf_counter()
    rss_opened = rss_bytes()
    fds_opened = open_fds()
    # What serving them first costs: the log end offset opens the segment and its index.
    ends = touched_logs = 0
    error = ""
    try:
        for log in logs:
            ends += log.log_end_offset
            touched_logs += 1
    except OSError as e:
        error = f"{e.strerror} after {touched_logs:,} logs"
    touched = time.perf_counter()
    rss_touched = rss_bytes()
    fds_touched = open_fds()
    if manager is not None:
        manager.shutdown()  # writes the clean-shutdown marker back for the next run
    else:
        for log in logs:
            log.close()
    closed = time.perf_counter()
    print(json.dumps({
        "logs": len(logs), "end_offsets": ends, "touched": touched_logs, "error": error,
        "how": "LogManager.startup(background=False)" if manager else "Log.open() of each",
        "open_s": opened - start, "touch_s": touched - opened, "close_s": closed - touched,
        "rss_before": before, "rss_opened": rss_opened, "rss_touched": rss_touched,
        "fds_opened": fds_opened - fds_before, "fds_touched": fds_touched - fds_before,
        "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KIB,
    }))


def run_reopen(root: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--reopen-child", str(root)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- report -------------------------------------------------------------------------------


def best(runs: list[float]) -> float:
    return min(runs)


def row(*cells: tuple[str, int]) -> str:
    """Left-aligns the first cell, right-aligns the rest: (text, width) pairs."""
    first, *rest = cells
    return f"{first[0]:<{first[1]}}" + "".join(f"{text:>{width}}" for text, width in rest)


def mbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / MB:,.0f}"


def header(title: str, columns: list[tuple[str, int]]) -> None:
    print()
    print(title)
    line = row(*columns)
    print(line)
    print("-" * len(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mib", nargs="?", type=int,
                        default=int(os.environ.get("BENCH_STORAGE_MIB", "1024")),
                        help="MiB written per case (default 1024 or $BENCH_STORAGE_MIB)")
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (best)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--reopen-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reopen_child is not None:
        reopen_child(args.reopen_child)
        return
    only = set(args.only.split(","))
    if only - set(SECTIONS):
        parser.error(f"--only takes {','.join(SECTIONS)}")
    total = args.mib * MIB
    if total >= 2**31 - 2 * MIB:
        parser.error("one segment holds < 2 GiB (segment.bytes is an int32): use < 2046 MiB")

    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=BENCH_ROOT))
    try:
        run(args, only, total, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if tmp.exists():  # e.g. out of descriptors while logs are still open: a new process
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
        with contextlib.suppress(OSError):
            BENCH_ROOT.rmdir()  # only if nothing else is in it


def run(args: argparse.Namespace, only: set[str], total: int, tmp: Path) -> None:
    cold = drop_caches()
    mem = meminfo("MemTotal")
    dirty_ratio, background_ratio = vm_setting("dirty_ratio"), vm_setting("dirty_background_ratio")
    available = meminfo("MemAvailable")
    dirty_limit = available * dirty_ratio / 100 if dirty_ratio >= 0 else 0
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{mem / 2**30:.1f} GiB RAM, crc32c hardware_based={hardware_based}")
    print(f"temp dir {tmp} ({filesystem_of(tmp)}), {args.mib} MiB per case, "
          f"best of {args.repeats} runs")
    print(f"vm.dirty_ratio={dirty_ratio}% (~{dirty_limit / 2**30:.1f} GiB before writers "
          f"block), vm.dirty_background_ratio={background_ratio}%; drop_caches: "
          f"{'yes, cold rows measured' if cold else 'not allowed, cold rows skipped'}")
    if dirty_limit > total:
        print(f"Page cache: {args.mib} MiB of writes stays under the dirty limit, so without "
              "fsync neither raw nor Log writes wait for the disk: those rows compare the CPU "
              "cost of the two write paths; the fsync rows add the device (its limit).")
    else:
        print(f"Page cache: {args.mib} MiB exceeds the dirty limit, so writers are throttled to "
              "the disk's speed even without fsync.")

    results: dict[str, dict[str, float]] = {}
    kept: list[tuple[str, Path, Log, list[int], list[int], AppendRun]] = []
    need_data = only & {"append", "read", "recovery"}
    for label, batch_bytes in (CASES if need_data else ()):
        pool, per_batch = build_pool(batch_bytes)
        raw_runs: list[AppendRun] = []
        crc_runs: list[AppendRun] = []
        log_runs: list[AppendRun] = []
        repeats = args.repeats if "append" in only else 1
        kinds = ["raw", "crc", "log"] if "append" in only else ["log"]
        if "append" in only:
            # Untimed: the first gigabyte or so a process writes here runs at a fraction of
            # the speed of the next (seen on ext4 with online discard after large deletes).
            drop_caches()
            raw_append(tmp / "warm-up.log", pool, total, per_batch)
            (tmp / "warm-up.log").unlink()
        for attempt in range(repeats):
            shift = attempt % len(kinds)  # rotate the order: no kind always goes first
            for kind in kinds[shift:] + kinds[:shift]:
                drop_caches()
                if kind != "log":
                    raw_path = tmp / "raw.log"
                    runs = raw_runs if kind == "raw" else crc_runs
                    runs.append(raw_append(raw_path, pool, total, per_batch, crc=kind == "crc"))
                    raw_path.unlink()
                    continue
                directory = tmp / f"bench-{batch_bytes}"
                run_, log, ends, next_offsets = log_append(directory, pool, total, per_batch)
                log_runs.append(run_)
                if attempt < repeats - 1:
                    log.close()
                    shutil.rmtree(directory)
                else:  # the last one stays for the read and recovery sections
                    kept.append((label, directory, log, ends, next_offsets, run_))
        if "append" in only:
            results[label] = {
                "raw": best([r.write_s for r in raw_runs]),
                "crc": best([r.write_s for r in crc_runs]),
                "crc_sync": best([r.write_s + r.fsync_s for r in crc_runs]),
                "log": best([r.write_s for r in log_runs]),
                "raw_sync": best([r.write_s + r.fsync_s for r in raw_runs]),
                "log_sync": best([r.write_s + r.fsync_s for r in log_runs]),
                "bytes": log_runs[0].written, "raw_bytes": raw_runs[0].written,
                "records": log_runs[0].records, "batch": len(pool[0]), "per_batch": per_batch,
            }

    if "append" in only:
        header(f"1. Append {args.mib} MiB of ~1 KiB records (Log.append_as_leader vs os.write)", [
            ("case", 30), ("raw MB/s", 10), ("raw+CRC", 10), ("Log MB/s", 10),
            ("Log records/s", 15), ("Log/raw", 9), ("Log/raw+CRC", 13), ("target", 9)])
        for label, _ in CASES:
            r = results[label]
            for kind, suffix, target in (("", "page cache", ">= 0.8x"), ("_sync", "+ fsync", "")):
                raw_s, crc_s, log_s = r["raw" + kind], r["crc" + kind], r["log" + kind]
                raw_rate, crc_rate = r["raw_bytes"] / raw_s, r["raw_bytes"] / crc_s
                log_rate = r["bytes"] / log_s
                print(row((f"{label}, {suffix}", 30), (f"{raw_rate / MB:,.0f}", 10),
                          (f"{crc_rate / MB:,.0f}", 10), (f"{log_rate / MB:,.0f}", 10),
                          (f"{r['records'] / log_s:,.0f}", 15),
                          (f"{log_rate / raw_rate:.2f}x", 9), (f"{log_rate / crc_rate:.2f}x", 13),
                          (target if label.startswith("1 MiB") else "", 9)))
        for label, _ in CASES:
            r = results[label]
            per_append = r["log"] / (r["bytes"] / r["batch"]) * 1e6
            raw_per = r["raw"] / (r["raw_bytes"] / r["batch"]) * 1e6
            crc_per = r["crc"] / (r["raw_bytes"] / r["batch"]) * 1e6
            print(f"  {label}: {r['batch']:,} bytes, {r['per_batch']:.0f} records per batch; "
                  f"{per_append:.1f} us per append, {raw_per:.1f} us per os.write, "
                  f"{crc_per:.1f} us with the CRC")

    if "read" in only:
        header("2. Sequential read from offset 0 to the end, 1 MiB per call", [
            ("case", 34), ("raw MB/s", 11), ("Log MB/s", 11), ("Log/raw", 9)])
        for label, _directory, log, ends, next_offsets, _ in kept:
            path = log.active_segment.log_path
            modes = [("warm", False)] + ([("cold", True)] if cold else [])
            for mode, drop in modes:
                raw_t, log_t = [], []
                size = received = fetches = 0
                if not drop:
                    raw_read(path)  # untimed: bring the file into the page cache
                for _ in range(args.repeats):
                    if drop:
                        drop_caches()
                    t, size = raw_read(path)
                    raw_t.append(t)
                    if drop:
                        drop_caches()
                    t, received, fetches = log_read(log, ends, next_offsets)
                    log_t.append(t)
                raw_s, log_s = best(raw_t), best(log_t)
                ratio = (size / log_s) / (size / raw_s)
                print(row((f"{label}, {mode}", 34), (mbps(size, raw_s), 11),
                          (mbps(size, log_s), 11), (f"{ratio:.2f}x", 9)))
                if mode == "warm":
                    refetched = received - size
                    print(f"  ({fetches:,} fetches; {refetched:,} bytes of cut batches "
                          "fetched again, not counted in MB/s)")

    if "recovery" in only:
        header(f"3. Recovery of one {args.mib} MiB segment after an unclean shutdown", [
            ("case", 34), ("CRC scan s", 12), ("recovery s", 12), ("MB/s", 9),
            ("recovery/scan", 15), ("target", 9)])
    for label, directory, log, _ends, next_offsets, _ in kept:
        log.close()
        if "recovery" not in only:
            continue
        path = log.active_segment.log_path
        size = path.stat().st_size
        modes = ([("cold", True)] if cold else []) + [("warm", False)]
        for mode, drop in modes:
            scan_t, recover_t = [], []
            for _ in range(args.repeats):
                if drop:
                    drop_caches()
                scan_t.append(crc_scan(path)[0])
                if drop:
                    drop_caches()
                recover_t.append(recover(directory, next_offsets[-1]))
            scan_s, recover_s = best(scan_t), best(recover_t)
            print(row((f"{label}, {mode}", 34), (f"{scan_s:.3f}", 12),
                      (f"{recover_s:.3f}", 12), (mbps(size, recover_s), 9),
                      (f"{recover_s / scan_s:.2f}x", 15), ("<= 2x", 9)))
    for _label, directory, *_ in kept:
        shutil.rmtree(directory)

    if "partitions" in only:
        n = args.partitions
        root = tmp / "partitions"
        root.mkdir()
        fd_limit = raise_fd_limit(n)
        start = time.perf_counter()
        create_partitions(root, n)
        created = time.perf_counter() - start
        header(f"4. Start-up with {n:,} partitions of one small segment each", [
            ("case", 34), ("open s", 9), ("RSS MiB", 9), ("+LEO s", 9), ("RSS MiB", 9),
            ("close s", 9), ("target", 18)])
        modes = ([("cold", True)] if cold else []) + [("warm", False)]
        for mode, drop in modes:
            if drop:
                drop_caches()
            r = run_reopen(root)
            if r["logs"] != n or r["end_offsets"] != r["touched"] * 10:
                raise RuntimeError(f"reopened {r['logs']} logs ending at {r['end_offsets']}")
            opened = (r["rss_opened"] - r["rss_before"]) / MIB
            touched = (r["rss_touched"] - r["rss_before"]) / MIB
            leo = f"{r['touch_s']:.2f}" if not r["error"] else "FAILED"
            print(row((f"{mode} page cache", 34), (f"{r['open_s']:.2f}", 9),
                      (f"+{opened:.0f}", 9), (leo, 9), (f"+{touched:.0f}", 9),
                      (f"{r['close_s']:.2f}", 9), ("< 5 s, < 300 MiB", 18)))
            if r["error"]:
                print(f"  {mode}: end offsets failed: {r['error']} (in {r['touch_s']:.2f} s)")
        print(f"  opened with {r['how']}; the partitions were created in {created:.1f} s")
        print(f"  descriptors held: {r['fds_opened']:,} after start-up, {r['fds_touched']:,} "
              f"after the end offsets ({r['fds_touched'] / max(1, r['touched']):.1f} per "
              f"partition touched; "
              f"RLIMIT_NOFILE {fd_limit:,}, as high as allowed)")
        print("  open s / RSS: start-up alone (resident growth over the fresh process's "
              f"{r['rss_before'] / MIB:.0f} MiB);")
        print("  +LEO s / RSS: then each log's end offset (opens its segment and index), "
              "RSS growth since start; close s: clean shutdown")


if __name__ == "__main__":
    main()
