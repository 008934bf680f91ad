"""`odradek consume TOPIC`: print a topic's records, one per line.

Without --group, the consumer assigns itself partitions at explicit offsets (no consumer
group: nothing is committed, nothing is joined), so it reads exactly where it is told: the
end by default, the beginning, an offset, or the first offset at or after a time
(ListOffsets by timestamp). --until-end stops at the end of every partition as it was at
the start.

With --group G, it subscribes to one or more topics, or to every topic matching --regex,
as a member of group G, as Kafka's console consumer does: it starts at the group's
committed offsets (where there are none, at the end, or the beginning with
--from-beginning), and commits the offsets of the records it printed (auto commit, and
once more on the way out).

--value-format avro|json (and --key-format) decode a schema registry's wire format,
fetching each record's writer schema by its id (odradek/cli/schema_serde.py), and print
the value as JSON; a record that cannot be decoded is named on stderr and skipped.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import signal
import string
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    ErrorRecorder,
    client_config,
    command,
    common_options,
    describe_error,
    make_client,
    positive_int,
    timeout_of,
    unescape,
)
from odradek.cli.output import json_line

FIELDS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
FIELD_LIST = " ".join(f"{{{name}}}" for name in FIELDS)
FORMATS = ("string", "avro", "json")  # --key-format, --value-format
NULL = "null"  # how a null key, value or header value prints, as Kafka's console consumer
BATCH = 500
# Errors after which reading on cannot succeed; librdkafka retries the others itself.
FATAL = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                   KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                   KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    consume = commands.add_parser(
        "consume", help="print the records of a topic",
        parents=[common_options("stop when no record comes for this long, e.g. 10s (default: "
                                "wait for ever); also bounds metadata and offset lookups "
                                "(default 30s)")],
        description="Print the records of TOPIC, one per line. Starts at the end of each "
        "partition unless told otherwise. With --group, reads one or more topics (or those "
        "matching --regex) as a member of a consumer group, committing its offsets.")
    consume.add_argument("topics", metavar="TOPIC", nargs="*",
                         help="the topic to read; several with --group")
    consume.add_argument("-g", "--group", metavar="GROUP",
                         help="consume as a member of consumer group GROUP: start at its "
                         "committed offsets and commit the offsets of the records printed")
    consume.add_argument("--regex", metavar="PATTERN",
                         help="with --group: subscribe to every topic whose whole name "
                         "matches PATTERN (a regular expression), now and as topics appear")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the first offset of each partition (with --group: "
                       "of each partition the group has no committed offset for)")
    start.add_argument("--offset", metavar="N",
                       help="start at offset N of --partition; a negative N counts back from "
                       "the end; also earliest or latest")
    start.add_argument("--from-timestamp", metavar="TIME",
                       help="start at the first record at or after TIME: ISO 8601 "
                       "(2024-05-01T12:00:00Z; local time without a zone) or epoch ms")
    consume.add_argument("-p", "--partition", type=int, metavar="N",
                         help="read partition N only (default: every partition)")
    consume.add_argument("-n", "--max-messages", type=positive_int, metavar="N",
                         help="stop after N records")
    consume.add_argument("-e", "--until-end", action="store_true",
                         help="stop at the end of every partition (its end when we started)")
    consume.add_argument("--format", metavar="TEMPLATE", default="{value}",
                         help=f"how to print a record, with fields {FIELD_LIST} and "
                         "escapes such as \\t (default {value})")
    schemas = consume.add_argument_group(
        "through a schema registry", "decode keys or values in the registry's wire format "
        "(a zero byte, the schema id, the payload) with the schema of that id, printed as JSON")
    schemas.add_argument("--value-format", choices=FORMATS, default="string",
                         help="string: the bytes as they are (default); avro or json: "
                         "Avro or JSON Schema through the registry")
    schemas.add_argument("--key-format", choices=FORMATS, default="string",
                         help="the same for keys")
    schemas.add_argument("--registry-url", metavar="URL",
                         help="the schema registry (default: $ODRADEK_REGISTRY_URL or "
                         "http://localhost:8081)")
    consume.set_defaults(run=run)


# ---- printing ----------------------------------------------------------------------------

class Formatter:
    """Renders records by a template; bytes that are not UTF-8 pass through unchanged."""

    def __init__(self, template: str) -> None:
        self.template = unescape(template)
        self.value_only = self.template == "{value}"
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(self.template)
                     if name is not None}
        except ValueError as e:
            raise CliError(f"bad --format {template!r}: {e}", EXIT_USAGE) from None
        if unknown := sorted(names - set(FIELDS)):
            raise CliError(f"--format has no field {{{unknown[0]}}}; the fields are "
                           f"{FIELD_LIST}", EXIT_USAGE)

    def render(self, message: Message, decoded: Any = None) -> bytes:
        """`decoded`: a schema_serde.Decoded, whose key and value print as JSON."""
        value = message.value()
        if decoded is not None and decoded.value is not None:
            value = decoded_text(decoded.value[0]).encode()
        if self.value_only:
            return (NULL.encode() if value is None else value) + b"\n"
        key = message.key()
        if decoded is not None and decoded.key is not None:
            key = decoded_text(decoded.key[0]).encode()
        fields = {
            "key": _text(key),
            "value": _text(value),
            "topic": message.topic(),
            "partition": message.partition(),
            "offset": message.offset(),
            "timestamp": message.timestamp()[1],
            "headers": ",".join(f"{k}:{_text(v)}" for k, v in headers_of(message)),
        }
        try:
            line = self.template.format_map(fields)
        except (ValueError, TypeError) as e:  # e.g. a format spec that does not fit
            raise CliError(f"bad --format {self.template!r}: {e}", EXIT_USAGE) from None
        return line.encode("utf-8", "surrogateescape") + b"\n"


def decoded_text(value: Any) -> str:
    """A decoded key or value as JSON text; a null as Kafka's console consumer prints it."""
    return NULL if value is None else json_line(value)


class Printer:
    """A record's line: by the template, or as JSON with --json; keys and values decoded
    first when --key-format or --value-format ask (a schema_serde.BadRecord when they
    cannot be)."""

    def __init__(self, formatter: Formatter | None, decoder: Any = None) -> None:
        self.formatter = formatter
        self.decoder = decoder  # a schema_serde.RecordDecoder
        self.bad = 0  # records that could not be decoded

    def line(self, message: Message) -> bytes:
        decoded = None if self.decoder is None else \
            self.decoder.decode(message.topic() or "", message.key(), message.value())
        if self.formatter is not None:
            return self.formatter.render(message, decoded)
        record = record_json(message)
        if decoded is not None:
            for name, part in (("key", decoded.key), ("value", decoded.value)):
                if part is not None:
                    record.pop(f"{name}_encoding", None)
                    record[name], record[f"{name}_schema_id"] = part
        return json_line(record).encode() + b"\n"

    def undecodable(self, message: Message, why: BaseException) -> None:
        """Says which record could not be decoded, and why; the command goes on."""
        self.bad += 1
        print(f"odradek consume: cannot decode the record at offset {message.offset()} of "
              f"partition {message.partition()} of {message.topic()}: {why}",
              file=sys.stderr)

    def status(self) -> int:
        return EXIT_FAILURE if self.bad else 0


def headers_of(message: Message) -> list[tuple[str, bytes | None]]:
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def _text(data: bytes | None) -> str:
    # surrogateescape keeps bytes that are not UTF-8, and render() writes them back as is.
    return NULL if data is None else data.decode("utf-8", "surrogateescape")


def record_json(message: Message) -> dict[str, Any]:
    """One record as JSON: bytes as UTF-8 text, or base64 with an `*_encoding` marker."""
    ts_type, ts = message.timestamp()
    record: dict[str, Any] = {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": ts if ts_type in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME)
        else None,
        "timestamp_type": {TIMESTAMP_CREATE_TIME: "CreateTime",
                           TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}.get(ts_type),
    }
    _put_bytes(record, "key", message.key())
    _put_bytes(record, "value", message.value())
    headers = []
    for name, value in headers_of(message):
        header: dict[str, Any] = {"key": name}
        _put_bytes(header, "value", value)
        headers.append(header)
    record["headers"] = headers
    return record


def _put_bytes(target: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        target[name] = None
        return
    try:
        target[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        target[name] = base64.b64encode(data).decode("ascii")
        target[f"{name}_encoding"] = "base64"


# ---- where to start ----------------------------------------------------------------------

def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from digits or an ISO 8601 time (local time without a zone)."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(f"--from-timestamp: not ISO 8601 or epoch milliseconds: {text!r}",
                       EXIT_USAGE) from None
    return round(moment.timestamp() * 1000)


@dataclass
class Plan:
    """Where each partition starts, and where --until-end stops it: absolute offsets.

    Logical offsets (beginning, end) are resolved here rather than by the consumer: it
    would otherwise look them up partition by partition and start fetching the first one
    alone, and a fetch of an empty partition waits fetch.wait.max.ms for nothing.
    """

    start: dict[int, int]  # partition -> first offset to read
    end: dict[int, int]  # partition -> high watermark when we started

    def finished_at_start(self, partition: int) -> bool:
        return self.start[partition] >= self.end[partition]


def plan(consumer: Consumer, args: argparse.Namespace, partitions: list[int],
         timeout: float) -> Plan:
    topic = args.topic
    low: dict[int, int] = {}
    high: dict[int, int] = {}
    for p in partitions:
        try:
            low[p], high[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                             timeout=timeout)
        except KafkaException as e:
            raise CliError(f"cannot look up the offsets of partition {p} of {topic}: "
                           f"{describe_error(e)}") from e
    start: dict[int, int] = {}
    if args.from_timestamp is not None:
        ts = parse_timestamp(args.from_timestamp)
        found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p in partitions],
                                           timeout=timeout)
        for tp in found:
            if tp.error is not None:
                raise CliError(f"cannot look up offsets by time in partition {tp.partition} "
                               f"of {topic}: {describe_error(tp.error)}")
            # -1: no record at or after that time, so only records yet to come.
            start[tp.partition] = tp.offset if tp.offset >= 0 else high[tp.partition]
    elif args.offset is not None:
        word = args.offset.strip().lower()
        if word in ("earliest", "latest"):
            start = low if word == "earliest" else high
        else:
            try:
                offset = int(word)
            except ValueError:
                raise CliError(f"--offset wants a number, earliest or latest, not "
                               f"{args.offset!r}", EXIT_USAGE) from None
            if args.partition is None:
                raise CliError("--offset N needs --partition: offsets are per partition",
                               EXIT_USAGE)
            p = args.partition
            if offset < 0:
                offset = max(low[p], high[p] + offset)
            elif not low[p] <= offset <= high[p]:
                raise CliError(f"offset {offset} is out of range in partition {p} of {topic}: "
                               f"start offsets run from {low[p]} to {high[p]} (the end)")
            start = {p: offset}
    else:
        start = low if args.from_beginning else high
    return Plan(dict(start), high)


# ---- the command -------------------------------------------------------------------------

@command("consume")
def run(args: argparse.Namespace) -> int:
    formatter = None if args.json else Formatter(args.format)
    printer = Printer(formatter, _decoder(args))
    if args.group is not None:
        return run_group(args, printer)
    if args.regex is not None or len(args.topics) > 1:
        raise CliError("several topics and --regex need --group GROUP (consumer group to "
                       "read them as)", EXIT_USAGE)
    if not args.topics:
        raise CliError("which topic? give TOPIC (or --group GROUP with topics or --regex)",
                       EXIT_USAGE)
    args.topic = args.topics[0]
    timeout = timeout_of(args)
    errors = ErrorRecorder()
    config = client_config(
        args,
        # confluent-kafka insists on a group.id; with assign() and no commits the group is
        # never joined, so any fixed name will do.
        **{"group.id": "odradek-cli-consume",
           "enable.auto.commit": False,
           "enable.auto.offset.store": False,
           "enable.partition.eof": bool(args.until_end),
           # An explicit offset out of range is an error, not a silent jump elsewhere.
           "auto.offset.reset": "error" if args.offset is not None else "earliest",
           "error_cb": errors},
    )
    consumer: Consumer = make_client(Consumer, config)
    try:
        return _consume(consumer, args, printer, timeout, errors)
    finally:
        consumer.close()


def _decoder(args: argparse.Namespace) -> Any:
    """The schema_serde.RecordDecoder --key-format and --value-format ask for, or None."""
    if args.key_format == "string" and args.value_format == "string":
        return None
    from odradek.cli.schema_serde import RecordDecoder  # the registry client: slow to load

    return RecordDecoder(args, timeout_of(args))


def _consume(consumer: Consumer, args: argparse.Namespace, printer: Printer,
             timeout: float, errors: ErrorRecorder) -> int:
    topic = args.topic
    partitions = _partitions(consumer, args, timeout, errors)
    start_plan = plan(consumer, args, partitions, timeout)
    pending = set(start_plan.start)
    if args.until_end:
        pending = {p for p in pending if not start_plan.finished_at_start(p)}
    out: BinaryIO = sys.stdout.buffer
    count = 0
    if pending:
        consumer.assign([TopicPartition(topic, p, start_plan.start[p]) for p in sorted(pending)])
    idle_limit = args.timeout  # None: wait for records as long as it takes
    last_record = time.monotonic()
    try:
        while pending and (args.max_messages is None or count < args.max_messages):
            wanted = BATCH if args.max_messages is None else min(BATCH, args.max_messages - count)
            # consume() waits out its whole timeout unless the batch fills: wait for one
            # record, then take what else is there at once.
            first = consumer.poll(0.5)
            messages = [] if first is None else [first]
            if first is not None and wanted > 1:
                messages += consumer.consume(wanted - 1, timeout=0)
            for message in messages:
                error = message.error()
                p = message.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(p)
                    elif error.code() in FATAL or error.fatal():
                        raise CliError(_reading_error(message, error, start_plan))
                    else:
                        errors(error)  # retried by librdkafka; kept for a timeout's message
                    continue
                if p not in pending:
                    continue  # --until-end: this partition is done
                line = _line(printer, message)
                if line is not None:
                    with _uninterrupted():
                        out.write(line)
                        count += 1
                if args.until_end and (message.offset() or 0) + 1 >= start_plan.end[p]:
                    pending.discard(p)
                if args.max_messages is not None and count >= args.max_messages:
                    break
            out.flush()
            if messages:
                last_record = time.monotonic()
            elif idle_limit is not None and time.monotonic() - last_record >= idle_limit:
                if args.until_end:
                    left = ", ".join(str(p) for p in sorted(pending))
                    raise CliError(errors.explain(
                        f"no records for {idle_limit:g}s before the end of partition(s) {left} "
                        f"of {topic}"))
                print(f"odradek consume: no records for {idle_limit:g}s, stopping",
                      file=sys.stderr)
                break
    except KeyboardInterrupt:  # Ctrl-C: what was read is still worth saying
        _summary(count, printer)
        return EXIT_INTERRUPTED
    _summary(count, printer)
    return printer.status()


def _line(printer: Printer, message: Message) -> bytes | None:
    """The record's line, or None when it cannot be decoded (said on stderr)."""
    if printer.decoder is None:
        return printer.line(message)
    from odradek.cli.schema_serde import BadRecord

    try:
        return printer.line(message)
    except BadRecord as e:
        printer.undecodable(message, e)
        return None


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Ctrl-C between printing a record and counting it (and storing its offset) would
    say one record less than was printed: it waits until the record is done. With
    PYTHONUNBUFFERED the line reaches the reader at once, and the race is real."""
    pending: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda *args: pending.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt


def _summary(count: int, printer: Printer) -> None:
    bad = (f"; {printer.bad} record{'s' * (printer.bad != 1)} could not be decoded"
           if printer.bad else "")
    print(f"consumed {count} record{'s' * (count != 1)}{bad}", file=sys.stderr)


def _partitions(consumer: Consumer, args: argparse.Namespace, timeout: float,
                errors: ErrorRecorder) -> list[int]:
    try:
        metadata = consumer.list_topics(args.topic, timeout=timeout)
    except KafkaException as e:
        raise CliError(errors.explain(f"cannot fetch metadata: {describe_error(e)}")) from e
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        reason = describe_error(topic.error) if topic is not None else "not in the metadata"
        raise CliError(f"cannot consume from topic {args.topic}: {reason}")
    partitions = sorted(topic.partitions)
    if args.partition is not None:
        if args.partition not in topic.partitions:
            raise CliError(f"topic {args.topic} has no partition {args.partition} (it has "
                           f"{len(partitions)})")
        return [args.partition]
    return partitions


def _reading_error(message: Message, error: KafkaError, start: Plan) -> str:
    p = message.partition()
    if p is not None and error.code() in (KafkaError._AUTO_OFFSET_RESET,
                                          KafkaError.OFFSET_OUT_OF_RANGE):
        return (f"offset {start.start.get(p)} is out of range in partition {p} of "
                f"{message.topic()}: {describe_error(error)}")
    where = f"partition {p} of " if p is not None and p >= 0 else ""
    return f"cannot read {where}{message.topic()}: {describe_error(error)}"


# ---- as a member of a consumer group -----------------------------------------------------

def subscription(args: argparse.Namespace) -> list[str]:
    """The topics to subscribe to; --regex as librdkafka's pattern form, a name that starts
    with ^, anchored at both ends so that it matches whole names, as Kafka's --include."""
    topics = list(args.topics)
    if args.regex is not None:
        pattern = args.regex.removeprefix("^")
        if pattern.endswith("$") and not pattern.endswith("\\$"):
            pattern = pattern[:-1]
        if not pattern:
            raise CliError("--regex wants a pattern", EXIT_USAGE)
        topics.append(f"^({pattern})$")
    if not topics:
        raise CliError("which topics? give TOPIC... or --regex PATTERN", EXIT_USAGE)
    return topics


class Membership:
    """The partitions the group gave us, and those of them read to their end (-e)."""

    def __init__(self) -> None:
        self.assigned: set[tuple[str, int]] = set()
        self.at_end: set[tuple[str, int]] = set()
        self.ever_assigned = False

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(tp.topic, tp.partition) for tp in partitions}
        self.ever_assigned = True

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned -= gone
        self.at_end -= gone

    def all_at_end(self) -> bool:
        return self.ever_assigned and bool(self.assigned) and self.assigned <= self.at_end


def run_group(args: argparse.Namespace, printer: Printer) -> int:
    for option, given in (("--offset", args.offset is not None),
                          ("--from-timestamp", args.from_timestamp is not None),
                          ("--partition", args.partition is not None)):
        if given:
            raise CliError(f"{option} does not go with --group: a group member starts at the "
                           "group's committed offsets (odradek groups reset-offsets moves "
                           "them)", EXIT_USAGE)
    topics = subscription(args)
    errors = ErrorRecorder()
    membership = Membership()
    consumer: Consumer = make_client(Consumer, client_config(
        args,
        **{"group.id": args.group,
           "enable.auto.commit": True,
           # Offsets are stored once their record is printed, and auto commit sends the
           # stored ones: what is committed was seen, even when stopped half-way.
           "enable.auto.offset.store": False,
           # Only where the group has no committed offset, as Kafka's console consumer.
           "auto.offset.reset": "earliest" if args.from_beginning else "latest",
           "enable.partition.eof": bool(args.until_end),
           # A pattern takes in new topics at each metadata refresh: every 5 minutes by
           # default, too slow for a command someone watches.
           **({"topic.metadata.refresh.interval.ms": 5000} if args.regex else {}),
           "error_cb": errors}))
    try:
        consumer.subscribe(topics, on_assign=membership.on_assign,
                           on_revoke=membership.on_revoke, on_lost=membership.on_revoke)
        return _consume_group(consumer, args, printer, membership, errors)
    finally:
        consumer.close()  # leaves the group


def _commit(consumer: Consumer) -> None:
    """Commits the stored offsets now, rather than at the next auto commit."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == \
                KafkaError._NO_OFFSET:
            return  # nothing read since the last commit
        print(f"odradek consume: cannot commit the group's offsets: {describe_error(e)}",
              file=sys.stderr)


def _consume_group(consumer: Consumer, args: argparse.Namespace, printer: Printer,
                   membership: Membership, errors: ErrorRecorder) -> int:
    counted = [0]
    try:
        count = _read_group(consumer, args, printer, membership, errors, counted)
    except KeyboardInterrupt:  # Ctrl-C: what was read is still worth saying
        _commit(consumer)
        _summary(counted[0], printer)
        return EXIT_INTERRUPTED
    _commit(consumer)
    _summary(count, printer)
    return printer.status()


def _read_group(consumer: Consumer, args: argparse.Namespace, printer: Printer,
                membership: Membership, errors: ErrorRecorder, counted: list[int]) -> int:
    """Prints records until told to stop; the count, also kept in counted[0] as it goes."""
    out: BinaryIO = sys.stdout.buffer
    count = 0
    idle_limit = args.timeout  # None: wait for records as long as it takes
    last_record = time.monotonic()
    pattern_waiting = False
    while args.max_messages is None or count < args.max_messages:
        wanted = BATCH if args.max_messages is None else min(BATCH, args.max_messages - count)
        first = consumer.poll(0.5)
        messages = [] if first is None else [first]
        if first is not None and wanted > 1:
            messages += consumer.consume(wanted - 1, timeout=0)
        printed = False
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    membership.at_end.add((message.topic(), message.partition()))
                elif (message.topic() or "").startswith("^"):
                    # librdkafka reports a pattern that matches no topic yet; topics that
                    # match may still come, and are then picked up.
                    if not pattern_waiting:
                        print(f"odradek consume: no topic matches --regex {args.regex!r} "
                              "yet; waiting for one", file=sys.stderr)
                        pattern_waiting = True
                elif error.code() in FATAL or error.fatal():
                    where = message.topic() or ", ".join(args.topics)
                    raise CliError(f"cannot consume from {where}: {describe_error(error)}")
                else:
                    errors(error)  # retried by librdkafka; kept for a timeout's message
                continue
            line = _line(printer, message)
            with _uninterrupted():
                if line is not None:
                    out.write(line)
                    printed = True
                    count += 1
                    counted[0] = count
                # KafkaException: the partition went to another member meanwhile. A record
                # that could not be decoded was reported: the group goes past it too.
                with contextlib.suppress(KafkaException):
                    consumer.store_offsets(message)
            if args.max_messages is not None and count >= args.max_messages:
                break
        out.flush()
        if printed:
            last_record = time.monotonic()
        if args.until_end and membership.all_at_end():
            break
        if not printed and idle_limit is not None and \
                time.monotonic() - last_record >= idle_limit:
            if args.until_end:
                raise CliError(errors.explain(
                    f"no records for {idle_limit:g}s before the end of every partition "
                    f"assigned to this member of group {args.group}"))
            print(f"odradek consume: no records for {idle_limit:g}s, stopping",
                  file=sys.stderr)
            break
    return count
