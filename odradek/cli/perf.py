"""`odradek perf produce|consume`: load tests against any running cluster, as Kafka's
kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh run them.

Both go through confluent-kafka (librdkafka), so the figures are what an application on
that client would see. `produce` sends --num-records records of --record-size bytes (or
payloads picked at random from --payload-file), at most --throughput records a second,
and measures each record's latency from produce() to its delivery report. `consume` reads
--messages records as a member of a consumer group (a fresh one by default). While they
run, a live line on a terminal (rich) or, when stderr is not one, a line every
--reporting-interval; at the end the summary as Kafka's tools print it, or --json.
Ctrl-C stops them with the summary so far (exit 130); a second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from odradek.cli.client import (
    DEFAULT_TIMEOUT,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    ErrorRecorder,
    client_config,
    command,
    common_options,
    describe_error,
    key_value,
    make_client,
    parse_duration,
    positive_int,
    unescape,
)
from odradek.cli.output import print_json

MB = 1024 * 1024  # Kafka's tools count MB as MiB
MAX_LATENCY_SAMPLES = 500_000  # as kafka-producer-perf-test: every n-th latency beyond that
MAX_ERRORS_SHOWN = 5
CONSUME_TIMEOUT = 10.0  # kafka-consumer-perf-test's --timeout default (10000 ms)
FATAL = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                   KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._UNKNOWN_TOPIC})
PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    perf = commands.add_parser(
        "perf", help="load-test a running cluster (kafka-producer-perf-test, "
        "kafka-consumer-perf-test)")
    actions = perf.add_subparsers(dest="action", required=True, metavar="ACTION")

    produce = actions.add_parser(
        "produce", parents=[common_options("how long a record may take to be delivered "
                                           "(message.timeout.ms), e.g. 30s (default 30s)")],
        help="send records as fast as allowed; report throughput and latency",
        description="Send --num-records records to --topic, at most --throughput a second, "
        "and report records/s, MB/s and the latency from send to delivery report (average, "
        "max, p50, p95, p99, p99.9) as kafka-producer-perf-test.sh does.")
    produce.add_argument("--topic", required=True, metavar="TOPIC")
    produce.add_argument("--num-records", type=positive_int, required=True, metavar="N",
                         help="how many records to send")
    payload = produce.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=positive_int, metavar="BYTES",
                         help="each record's value: BYTES random letters")
    payload.add_argument("--payload-file", metavar="FILE",
                         help="values picked at random from FILE's payloads, split at "
                         "--payload-delimiter")
    produce.add_argument("--payload-delimiter", metavar="SEP", default="\\n",
                         help="between the payloads of --payload-file (default \\n)")
    produce.add_argument("--throughput", type=_throughput, required=False, default=-1.0,
                         metavar="N", help="send at most N records a second; -1: no limit "
                         "(the default)")
    produce.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE",
                         help="producer (librdkafka) settings; win over --command-config "
                         "and -X")
    produce.add_argument("--producer.config", dest="command_config", metavar="FILE",
                         help=argparse.SUPPRESS)  # Kafka's name for --command-config
    produce.add_argument("--acks", choices=["0", "1", "all", "-1"],
                         help="acknowledgements to wait for (default all, which also makes "
                         "the producer idempotent)")
    produce.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                         help="batch compression codec (default none)")
    produce.add_argument("--reporting-interval", type=parse_duration, default=5.0,
                         metavar="DURATION", help="how often to print a progress line when "
                         "stderr is not a terminal (default 5s)")
    produce.set_defaults(run=run_produce)

    consume = actions.add_parser(
        "consume", parents=[common_options("give up when no record has come for this long, "
                                           f"e.g. 30s (default {CONSUME_TIMEOUT:g}s)")],
        help="read records as a group member; report throughput",
        description="Read --messages records of --topic as a member of a consumer group and "
        "report MB/s and records/s as kafka-consumer-perf-test.sh does.")
    consume.add_argument("--topic", required=True, metavar="TOPIC")
    consume.add_argument("--messages", type=positive_int, required=True, metavar="N",
                         help="how many records to read")
    consume.add_argument("--group", metavar="GROUP",
                         help="the consumer group (default: a fresh perf-consumer-NNNNN)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="where the group has no committed offset, start at the first "
                       "record (the default, as kafka-consumer-perf-test.sh)")
    start.add_argument("--from-latest", action="store_true",
                       help="where the group has no committed offset, start at the end")
    consume.add_argument("--consumer.config", dest="command_config", metavar="FILE",
                         help=argparse.SUPPRESS)  # Kafka's name for --command-config
    consume.add_argument("--reporting-interval", type=parse_duration, default=5.0,
                         metavar="DURATION", help="how often to print a progress line when "
                         "stderr is not a terminal (default 5s)")
    consume.set_defaults(run=run_consume)


def _throughput(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("0 would send nothing; -1 means no limit")
    return value


# ---- what both share ---------------------------------------------------------------------

class Stop:
    """SIGINT sets a flag that the loops check, so that they end with a summary; a second
    SIGINT raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = False

    def __bool__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    @contextmanager
    def installed(self) -> Iterator[Stop]:
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


class Progress:
    """A live status line on a terminal; elsewhere a line every `interval` (on stderr)."""

    def __init__(self, interval: float, status: Callable[[], str],
                 window: Callable[[], str]) -> None:
        self.interval = interval
        self.status = status  # the live line
        self.window = window  # the periodic line; starts a new window
        self.console = Console(stderr=True)
        self.live: Live | None = None
        self.next_line = time.monotonic() + interval

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(console=self.console, get_renderable=self._line,
                             refresh_per_second=4, transient=True, redirect_stdout=False,
                             redirect_stderr=False)
            self.live.start()
        return self

    def _line(self) -> Text:
        return Text(self.status(), no_wrap=True, overflow="ellipsis")

    def tick(self) -> None:
        now = time.monotonic()
        if now < self.next_line:
            return
        self.next_line = now + self.interval
        line = self.window()
        if self.live is not None:
            self.live.console.print(line, highlight=False)  # above the live line
        else:
            print(line, file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


# ---- perf produce ------------------------------------------------------------------------

class ProducerStats:
    """kafka-producer-perf-test's Stats: totals, a sample of the latencies, and a window
    for the periodic lines. Latency: from produce() to the delivery report (librdkafka's
    own measure of it, in the report)."""

    def __init__(self, num_records: int) -> None:
        self.num_records = num_records
        self.start = time.monotonic()
        self.end: float | None = None
        self.sent = 0  # handed to the client
        self.count = 0  # acknowledged
        self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.sampling = max(1, num_records // MAX_LATENCY_SAMPLES)
        self.latencies: list[float] = []
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self.first_errors: list[str] = []
        self._new_window(self.start)

    def _new_window(self, now: float) -> None:
        self.window_start = now
        self.window_count = 0
        self.window_bytes = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            if error.code() not in PURGED:  # purged: dropped on Ctrl-C, not failed
                self.fail(describe_error(error))
            return
        latency = (message.latency() or 0.0) * 1000
        size = len(message.value() or b"")
        if self.count % self.sampling == 0:
            self.latencies.append(latency)
        self.count += 1
        self.bytes += size
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += size
        self.window_latency += latency
        self.window_max = max(self.window_max, latency)

    def fail(self, reason: str) -> None:
        self.failed += 1
        self.errors[reason] += 1
        if len(self.first_errors) < MAX_ERRORS_SHOWN:
            self.first_errors.append(reason)

    def window_line(self) -> str:
        """Kafka's periodic line, for the window that ends now."""
        now = time.monotonic()
        elapsed = now - self.window_start
        avg = self.window_latency / self.window_count if self.window_count else 0.0
        line = (f"{self.window_count} records sent, "
                f"{_rate(self.window_count, elapsed):.1f} records/sec "
                f"({_rate(self.window_bytes / MB, elapsed):.2f} MB/sec), {avg:.1f} ms avg "
                f"latency, {self.window_max:.1f} ms max latency.")
        self._new_window(now)
        return line

    def status(self) -> str:
        elapsed = time.monotonic() - self.start
        avg = self.total_latency / self.count if self.count else 0.0
        return (f"{self.count}/{self.num_records} acked, "
                f"{self.sent - self.count - self.failed} in flight, "
                f"{_rate(self.count, elapsed):.1f} records/s, "
                f"{_rate(self.bytes / MB, elapsed):.2f} MB/s, latency avg {avg:.1f} ms, "
                f"max {self.max_latency:.1f} ms")

    def summary(self) -> dict[str, Any]:
        elapsed = (self.end or time.monotonic()) - self.start
        ordered = sorted(self.latencies)

        def percentile(p: float) -> float:
            return ordered[int(len(ordered) * p)] if ordered else 0.0

        return {
            "records": self.count,
            "bytes": self.bytes,
            "failed": self.failed,
            "elapsed_s": round(elapsed, 3),
            "records_per_sec": round(_rate(self.count, elapsed), 2),
            "mb_per_sec": round(_rate(self.bytes / MB, elapsed), 4),
            "avg_latency_ms": round(self.total_latency / self.count if self.count else 0.0,
                                    3),
            "max_latency_ms": round(self.max_latency, 3),
            "p50_ms": round(percentile(0.5), 3),
            "p95_ms": round(percentile(0.95), 3),
            "p99_ms": round(percentile(0.99), 3),
            "p999_ms": round(percentile(0.999), 3),
        }


def summary_line(s: dict[str, Any]) -> str:
    """kafka-producer-perf-test's closing line, in its format."""
    return (f"{s['records']} records sent, {s['records_per_sec']:.1f} records/sec "
            f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
            f"{s['max_latency_ms']:.2f} ms max latency, {int(s['p50_ms'])} ms 50th, "
            f"{int(s['p95_ms'])} ms 95th, {int(s['p99_ms'])} ms 99th, "
            f"{int(s['p999_ms'])} ms 99.9th.")


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.record_size is not None:
        # As Kafka's tool: one value of random upper-case letters, sent every time.
        rng = random.Random()
        return [bytes(rng.randrange(65, 91) for _ in range(args.record_size))]
    delimiter = unescape(args.payload_delimiter).encode("utf-8")
    if not delimiter:
        raise CliError("--payload-delimiter cannot be empty", EXIT_USAGE)
    try:
        data = Path(args.payload_file).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {args.payload_file}: {e.strerror or e}", EXIT_USAGE) from e
    payloads = [p for p in data.split(delimiter) if p]
    if not payloads:
        raise CliError(f"{args.payload_file} holds no payload", EXIT_USAGE)
    return payloads


def producer_config(args: argparse.Namespace, errors: ErrorRecorder) -> dict[str, Any]:
    """Ours, then --command-config, -X, --producer-props, then --acks and --compression;
    --bootstrap-server last. Idempotent when acks is all, unless told otherwise."""
    config = client_config(args, **{"acks": "all", "error_cb": errors})
    if args.timeout is not None:
        config["message.timeout.ms"] = max(1, int(args.timeout * 1000))
    else:
        config.setdefault("message.timeout.ms", 30_000)
    for item in args.producer_props:
        key, value = key_value(item, "--producer-props")
        config[key] = value
    if args.acks is not None:
        config["acks"] = args.acks
    if args.compression is not None:
        config["compression.type"] = args.compression
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    config.setdefault("enable.idempotence", str(config["acks"]).lower() in ("all", "-1"))
    return config


@command("perf produce")
def run_produce(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    errors = ErrorRecorder()
    producer: Producer = make_client(Producer, producer_config(args, errors))
    _check_topic(producer, args.topic, errors)
    stats = ProducerStats(args.num_records)
    stop = Stop()
    with stop.installed(), Progress(args.reporting_interval, stats.status,
                                    stats.window_line) as progress:
        _send_all(producer, args, payloads, stats, stop, progress, errors)
        interrupted = bool(stop)
        _drain(producer, stats, stop, progress, errors)
        stats.end = time.monotonic()
    summary = {"topic": args.topic, **stats.summary(), "interrupted": interrupted}
    if args.json:
        print_json(summary)
    else:
        print(summary_line(summary), flush=True)
    if stats.failed:
        print(f"odradek perf produce: {stats.failed} record{'s' * (stats.failed != 1)} "
              "failed", file=sys.stderr)
        for reason in stats.first_errors:
            print(f"odradek perf produce: {reason}", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILURE if stats.failed else 0


def _check_topic(client: Producer | Consumer, topic: str, errors: ErrorRecorder) -> None:
    """The topic exists (or was auto-created by this very look-up, as Kafka's producer
    would); a clear error otherwise, and when the cluster cannot be reached."""
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    while True:
        try:
            metadata = client.list_topics(topic, timeout=1.0)
            break
        except KafkaException as e:
            client.poll(0)  # serves error_cb: why it could not connect
            if errors.unreachable() or time.monotonic() > deadline:
                raise CliError(errors.explain("cannot reach the cluster")) from e
            time.sleep(0.1)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        reason = describe_error(found.error) if found is not None else "not in the metadata"
        raise CliError(f"topic {topic}: {reason}")


def _send_all(producer: Producer, args: argparse.Namespace, payloads: list[bytes],
              stats: ProducerStats, stop: Stop, progress: Progress,
              errors: ErrorRecorder) -> None:
    rng = random.Random()
    one = payloads[0] if len(payloads) == 1 else None
    per_record = 1.0 / args.throughput if args.throughput > 0 else 0.0
    for i in range(args.num_records):
        if per_record:  # the i-th record leaves no earlier than start + i / throughput
            _wait_until(producer, stats.start + i * per_record, stop, progress, errors)
        if stop:
            return
        value = one if one is not None else rng.choice(payloads)
        while True:
            try:
                producer.produce(args.topic, value, on_delivery=stats.delivered)
                stats.sent += 1
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
                _check(stop, progress, errors)
                if stop:
                    return
            except KafkaException as e:  # refused before sending, e.g. too large
                stats.sent += 1
                stats.fail(describe_error(e))
                break
        if i % 64 == 0:
            producer.poll(0)
            _check(stop, progress, errors)


def _wait_until(producer: Producer, moment: float, stop: Stop, progress: Progress,
                errors: ErrorRecorder) -> None:
    while not stop:
        left = moment - time.monotonic()
        if left <= 0:
            return
        producer.poll(min(left, 0.1))  # serves delivery reports while it waits
        _check(stop, progress, errors)


def _check(stop: Stop, progress: Progress, errors: ErrorRecorder) -> None:
    progress.tick()
    if errors.unreachable():
        raise CliError(errors.explain("cannot reach the cluster"))


def _drain(producer: Producer, stats: ProducerStats, stop: Stop, progress: Progress,
           errors: ErrorRecorder) -> None:
    """Waits for the delivery report of every record sent (message.timeout.ms bounds each
    one); after Ctrl-C, for a few seconds, then drops what is left."""
    grace: float | None = None
    while len(producer) > 0:
        if stop and grace is None:
            grace = time.monotonic() + 5
        if grace is not None and time.monotonic() > grace:
            producer.purge()
            producer.flush(1)
            return
        producer.poll(0.1)
        _check(stop, progress, errors)


# ---- perf consume ------------------------------------------------------------------------

class ConsumerStats:
    def __init__(self, messages: int) -> None:
        self.messages = messages
        self.start_wall = datetime.now()
        self.start = time.monotonic()
        self.end: float | None = None
        self.assigned_at: float | None = None  # the first assignment: the join's end
        self.count = 0
        self.bytes = 0
        self.last_record = self.start
        self._new_window(self.start)

    def _new_window(self, now: float) -> None:
        self.window_start = now
        self.window_count = 0
        self.window_bytes = 0

    def on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        if self.assigned_at is None:
            self.assigned_at = time.monotonic()

    def record(self, message: Message) -> None:
        size = len(message.key() or b"") + len(message.value() or b"")
        self.count += 1
        self.bytes += size
        self.window_count += 1
        self.window_bytes += size
        self.last_record = time.monotonic()

    def window_line(self) -> str:
        now = time.monotonic()
        elapsed = now - self.window_start
        line = (f"{self.window_count} records consumed, "
                f"{_rate(self.window_count, elapsed):.1f} records/sec "
                f"({_rate(self.window_bytes / MB, elapsed):.2f} MB/sec), "
                f"{self.count} of {self.messages} in all.")
        self._new_window(now)
        return line

    def status(self) -> str:
        elapsed = time.monotonic() - self.start
        joined = "" if self.assigned_at is not None else " (joining the group)"
        return (f"{self.count}/{self.messages} records{joined}, "
                f"{_rate(self.count, elapsed):.1f} records/s, "
                f"{_rate(self.bytes / MB, elapsed):.2f} MB/s")

    def summary(self) -> dict[str, Any]:
        end = self.end or time.monotonic()
        elapsed = end - self.start
        rebalance = (self.assigned_at or end) - self.start
        fetch = elapsed - rebalance
        mb = self.bytes / MB
        end_wall = datetime.fromtimestamp(self.start_wall.timestamp() + elapsed)
        return {
            "start_time": self.start_wall.isoformat(timespec="milliseconds"),
            "end_time": end_wall.isoformat(timespec="milliseconds"),
            "records": self.count,
            "bytes": self.bytes,
            "mb": round(mb, 4),
            "mb_per_sec": round(_rate(mb, elapsed), 4),
            "records_per_sec": round(_rate(self.count, elapsed), 4),
            "rebalance_time_ms": int(rebalance * 1000),
            "fetch_time_ms": int(fetch * 1000),
            "fetch_mb_per_sec": round(_rate(mb, fetch), 4),
            "fetch_records_per_sec": round(_rate(self.count, fetch), 4),
            "elapsed_s": round(elapsed, 3),
        }


CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def consumer_line(s: dict[str, Any]) -> str:
    """kafka-consumer-perf-test's line of figures (dates as yyyy-MM-dd HH:mm:ss:SSS)."""

    def when(iso: str) -> str:
        moment = datetime.fromisoformat(iso)
        return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"

    return (f"{when(s['start_time'])}, {when(s['end_time'])}, {s['mb']:.4f}, "
            f"{s['mb_per_sec']:.4f}, {s['records']}, {s['records_per_sec']:.4f}, "
            f"{s['rebalance_time_ms']}, {s['fetch_time_ms']}, {s['fetch_mb_per_sec']:.4f}, "
            f"{s['fetch_records_per_sec']:.4f}")


@command("perf consume")
def run_consume(args: argparse.Namespace) -> int:
    timeout = CONSUME_TIMEOUT if args.timeout is None else args.timeout
    group = args.group or f"perf-consumer-{random.randrange(100_000)}"
    errors = ErrorRecorder()
    consumer: Consumer = make_client(Consumer, client_config(
        args, **{"group.id": group,
                 # As Kafka's tool: earliest unless --from-latest, where the group has no
                 # committed offset; offsets are committed as it goes (auto commit).
                 "auto.offset.reset": "latest" if args.from_latest else "earliest",
                 "enable.auto.commit": True,
                 "error_cb": errors}))
    stop = Stop()
    interrupted = timed_out = False
    try:
        _check_topic(consumer, args.topic, errors)
        stats = ConsumerStats(args.messages)  # the clock starts at the subscription
        with stop.installed(), Progress(args.reporting_interval, stats.status,
                                        stats.window_line) as progress:
            consumer.subscribe([args.topic], on_assign=stats.on_assign)
            timed_out = _read(consumer, args, stats, stop, progress, errors, timeout)
        interrupted = bool(stop)
        stats.end = stats.last_record if timed_out and stats.count else time.monotonic()
    finally:
        consumer.close()  # commits the offsets consumed and leaves the group
    summary = {"topic": args.topic, "group": group, **stats.summary(),
               "interrupted": interrupted, "timed_out": timed_out}
    if timed_out:
        print(f"odradek perf consume: exiting before consuming the expected number of "
              f"records ({stats.count} of {args.messages}): no record for {timeout:g}s "
              "(--timeout)", file=sys.stderr)
    if args.json:
        print_json(summary)
    else:
        print(CONSUMER_HEADER)
        print(consumer_line(summary), flush=True)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILURE if timed_out else 0


def _read(consumer: Consumer, args: argparse.Namespace, stats: ConsumerStats, stop: Stop,
          progress: Progress, errors: ErrorRecorder, timeout: float) -> bool:
    """Reads until --messages records, Ctrl-C, or `timeout` without a record (True)."""
    while stats.count < args.messages and not stop:
        for message in consumer.consume(min(1000, args.messages - stats.count), timeout=0.1):
            error = message.error()
            if error is None:
                stats.record(message)
            elif error.code() in FATAL or error.fatal():
                raise CliError(f"cannot consume from {args.topic}: {describe_error(error)}")
            else:
                errors(error)  # retried by librdkafka
        progress.tick()
        if time.monotonic() - stats.last_record > timeout:
            return True
        if errors.unreachable():
            raise CliError(errors.explain("cannot reach the cluster"))
    return False
