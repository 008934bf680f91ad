"""`odradek produce TOPIC`: one record per line of stdin or a file.

Lines are bytes: what comes in is what is stored, minus the line ending. A key may come
before a separator, headers before a delimiter (Kafka's console producer's
parse.headers format: `k1:v1,k2:v2<TAB>key<SEP>value`), and --header adds headers to
every record. Keyed records use librdkafka's murmur2_random partitioner, which puts a key
on the partition the Java client would pick. With --transactional-id every record of
the run goes into one transaction, committed at the end, aborted if anything failed.
With --value-schema (--key-schema) each line's value (key) is JSON, sent in a schema
registry's wire format (odradek/cli/schema_serde.py).
"""

from __future__ import annotations

import argparse
import io
import os
import select
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Message, Producer

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
    fatal_error_of,
    key_value,
    make_client,
    timeout_of,
    unescape,
)
from odradek.cli.output import print_json

Header = tuple[str, bytes | None]
MAX_ERRORS_SHOWN = 5
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
POLL_S = 0.2


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    produce = commands.add_parser(
        "produce", parents=[common_options("how long a record may take to be delivered, "
                                           "e.g. 10s (default 30s)")],
        help="send each line of stdin (or a file) as a record",
        description="Send each line of stdin (or --file) to TOPIC as one record. "
        "Separators take escapes such as \\t.")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("-f", "--file", metavar="FILE", help="read lines from FILE, not stdin")
    produce.add_argument("-K", "--key-separator", metavar="SEP",
                         help="each line is KEY SEP VALUE (split at the first SEP)")
    produce.add_argument("-H", "--header", metavar="KEY=VALUE", action="append", default=[],
                         help="a header added to every record (repeatable)")
    produce.add_argument("--parse-headers", action="store_true",
                         help="each line starts with its own headers, then the headers "
                         "delimiter: k1:v1,k2:v2<TAB>...")
    produce.add_argument("--headers-delimiter", metavar="SEP", default="\\t",
                         help="ends the headers of a line (default \\t)")
    produce.add_argument("--headers-separator", metavar="SEP", default=",",
                         help="between the headers of a line (default ,)")
    produce.add_argument("--headers-key-separator", metavar="SEP", default=":",
                         help="between a header's key and value (default :); a header "
                         "without it has a null value")
    produce.add_argument("-p", "--partition", type=int, metavar="N",
                         help="send every record to partition N (default: by key)")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all",
                         help="acknowledgements to wait for (default all; all also makes "
                         "the producer idempotent, like Kafka's Java producer)")
    produce.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                         default="none", help="batch compression codec (default none)")
    produce.add_argument("--transactional-id", metavar="ID",
                         help="send every record of the run in one transaction with this "
                         "transactional.id, committed at the end (aborted, exit 1, if any "
                         "record failed or a line was malformed; exit 130 on Ctrl-C); "
                         "needs --acks all")
    schemas = produce.add_argument_group(
        "through a schema registry", "each line's value (and key) is JSON, serialized with "
        "the schema, registered under <topic>-value (<topic>-key)")
    value_schema = schemas.add_mutually_exclusive_group()
    value_schema.add_argument("--value-schema", metavar="SCHEMA",
                              help="the values' schema (Avro or JSON Schema, as JSON text)")
    value_schema.add_argument("--value-schema-file", metavar="FILE",
                              help="the values' schema, from FILE")
    key_schema = schemas.add_mutually_exclusive_group()
    key_schema.add_argument("--key-schema", metavar="SCHEMA",
                            help="the keys' schema; needs --key-separator")
    key_schema.add_argument("--key-schema-file", metavar="FILE",
                            help="the keys' schema, from FILE")
    schemas.add_argument("--schema-type", type=str.upper, choices=["AVRO", "JSON"],
                         default="AVRO", help="AVRO (default) or JSON (JSON Schema)")
    schemas.add_argument("--registry-url", metavar="URL",
                         help="the schema registry (default: $ODRADEK_REGISTRY_URL or "
                         "http://localhost:8081)")
    produce.set_defaults(run=run)


@dataclass
class LineFormat:
    key_separator: bytes | None
    headers: list[Header]
    parse_headers: bool
    headers_delimiter: bytes
    headers_separator: bytes
    headers_key_separator: bytes

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes, list[Header]]:
        """(key, value, headers) of one line without its ending; CliError when malformed."""
        headers = list(self.headers)
        if self.parse_headers:
            head, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise CliError(f"line {number}: no headers delimiter "
                               f"{self.headers_delimiter.decode()!r}")
            headers += self._headers(head, number)
        key = None
        if self.key_separator is not None:
            key, sep, line = line.partition(self.key_separator)
            if not sep:
                raise CliError(f"line {number}: no key separator "
                               f"{self.key_separator.decode()!r}")
        return key, line, headers

    def _headers(self, text: bytes, number: int) -> list[Header]:
        headers: list[Header] = []
        for item in text.split(self.headers_separator) if text else []:
            name, sep, value = item.partition(self.headers_key_separator)
            try:
                headers.append((name.decode("utf-8"), value if sep else None))
            except UnicodeDecodeError:
                raise CliError(f"line {number}: header key {name!r} is not UTF-8") from None
        return headers


@dataclass
class Deliveries:
    """Counts what the broker acknowledged; keeps the first errors, by line."""

    records: int = 0
    bytes: int = 0
    failed: int = 0
    partitions: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    first_errors: list[str] = field(default_factory=list)
    fatal: KafkaError | None = None  # the producer cannot go on (e.g. no producer id)

    def callback(self, number: int) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, message: Message) -> None:
            try:
                if error is None:
                    self.records += 1
                    self.bytes += len(message.key() or b"") + len(message.value() or b"")
                    self.partitions[message.partition() or 0] += 1
                elif self.fatal is not None and error.code() in _PURGED:
                    self.fail(number, describe_error(self.fatal))  # why it was purged
                else:
                    self.fail(number, describe_error(error))
            except SystemError as e:
                # confluent-kafka raises a fatal error in place of calling error_cb, and
                # it surfaces in the next callback: the purge of this record.
                fatal = fatal_error_of(e)
                if fatal is None:
                    raise
                self.fatal = fatal
                self.fail(number, describe_error(fatal))

        return delivered

    def failed_for(self, reason: str) -> None:
        """The records purged after a fatal error failed for that error."""
        purged = [describe_error(KafkaError(code)) for code in _PURGED]
        for name in purged:
            if name in self.errors:
                self.errors[reason] += self.errors.pop(name)
        self.first_errors = [line.split(": ", 1)[0] + ": " + reason
                             if any(line.endswith(p) for p in purged) else line
                             for line in self.first_errors]

    def fail(self, number: int, reason: str) -> None:
        self.failed += 1
        self.errors[reason] += 1
        if len(self.first_errors) < MAX_ERRORS_SHOWN:
            self.first_errors.append(f"line {number}: {reason}")


@command("produce")
def run(args: argparse.Namespace) -> int:
    fmt = LineFormat(
        key_separator=_separator(args.key_separator, "--key-separator"),
        headers=[_header(h) for h in args.header],
        parse_headers=args.parse_headers,
        headers_delimiter=_separator(args.headers_delimiter, "--headers-delimiter") or b"\t",
        headers_separator=_separator(args.headers_separator, "--headers-separator") or b",",
        headers_key_separator=_separator(args.headers_key_separator,
                                         "--headers-key-separator") or b":",
    )
    timeout = timeout_of(args)
    transactional_id: str | None = args.transactional_id
    if transactional_id is not None and args.acks != "all":
        raise CliError("--transactional-id needs --acks all: a transactional producer is "
                       "idempotent", EXIT_USAGE)
    if transactional_id == "":
        raise CliError("--transactional-id cannot be empty", EXIT_USAGE)
    key_encoder, value_encoder = _encoders(args, timeout)
    errors = ErrorRecorder()
    # librdkafka refuses a message.timeout.ms above transaction.timeout.ms (default 60s,
    # which -X transaction.timeout.ms=... changes: the coordinator aborts a transaction
    # left open longer, e.g. by a slow typist).
    transactional = ({"transactional.id": transactional_id,
                      "transaction.timeout.ms": max(60_000, int(timeout * 1000))}
                     if transactional_id is not None else {})
    config = client_config(
        args,
        partitioner="murmur2_random",
        acks=args.acks,
        # Idempotence keeps retried batches in order and unduplicated; it needs acks=all.
        **{"enable.idempotence": args.acks == "all",
           "compression.type": args.compression,
           "message.timeout.ms": max(1, int(timeout * 1000)),
           "error_cb": errors,
           "logger": errors.logger,
           **transactional},
    )
    producer: Producer = make_client(Producer, config)
    deliveries = Deliveries()
    stream = _open(args.file)
    if transactional_id is not None:
        _begin(producer, timeout, errors, stream)
    if stream.isatty() and not args.json:
        print("type one record per line; end with Ctrl-D", file=sys.stderr)
    status = 0
    problem: str | None = None
    try:
        for number, line in _lines(stream):
            key, raw_value, headers = fmt.parse(line, number)
            value = raw_value if value_encoder is None else \
                value_encoder.encode(raw_value, number)
            if key_encoder is not None and key is not None:
                key = key_encoder.encode(key, number)
            _send(producer, args, key, value, headers, deliveries, number)
    except CliError as e:  # a malformed line: send nothing after it
        problem, status = str(e), e.exit_code
    except KeyboardInterrupt:
        problem = ("interrupted: the transaction is aborted" if transactional_id is not None
                   else "interrupted: the records read so far were sent")
        status = EXIT_INTERRUPTED
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    # message.timeout.ms bounds every record's life, so this flush ends.
    try:
        left = producer.flush(timeout + 10)
    except (KeyboardInterrupt, SystemError) as e:
        # confluent-kafka's flush() can swallow the KeyboardInterrupt of a Ctrl-C that
        # comes while it waits and return NULL: Python then raises SystemError. It also
        # fails so after a fatal error (e.g. no producer id for want of IdempotentWrite),
        # which is then the SystemError's cause or was met by a delivery callback.
        left = len(producer)
        deliveries.fatal = deliveries.fatal or fatal_error_of(e)
        if deliveries.fatal is None and errors.fatal is None and problem is None:
            problem, status = "interrupted while records were in flight", EXIT_INTERRUPTED
    fatal = describe_error(deliveries.fatal) if deliveries.fatal else errors.fatal
    if fatal is not None and problem is None:  # the producer could not go on
        deliveries.failed_for(fatal)
        problem, status = f"the producer failed: {fatal}", EXIT_FAILURE
    if left:
        deliveries.failed += left
        deliveries.errors["not delivered in time"] += left
    outcome: str | None = None
    if transactional_id is not None:
        outcome, why = _end(producer, timeout, problem is None and not deliveries.failed)
        if why is not None and problem is None:
            problem, status = why, EXIT_FAILURE
    _report(args, deliveries, errors, outcome)
    if problem is not None:
        print(f"odradek produce: {problem}", file=sys.stderr)
    if status == 0 and (deliveries.failed or outcome == "aborted"):
        status = EXIT_FAILURE
    return status


def _encoders(args: argparse.Namespace, timeout: float) -> tuple[Any, Any]:
    """The key's and value's schema_serde.Encoder (or None), their schemas registered."""
    if args.key_schema is args.key_schema_file is args.value_schema is \
            args.value_schema_file is None:
        return None, None
    from odradek.cli.schema_serde import encoders  # confluent-kafka's registry client: slow

    return encoders(args, timeout)


def _begin(producer: Producer, timeout: float, errors: ErrorRecorder, stream: BinaryIO) -> None:
    """init_transactions (fencing an earlier producer with the same id) and
    begin_transaction; CliError when the coordinator cannot be reached or refuses."""
    try:
        producer.init_transactions(timeout)
        producer.begin_transaction()
    except KafkaException as e:
        if stream is not sys.stdin.buffer:
            stream.close()
        raise CliError(errors.explain(
            f"cannot start the transaction: {describe_error(e)}")) from e


def _end(producer: Producer, timeout: float, commit: bool) -> tuple[str, str | None]:
    """Commits the transaction (or aborts it when `commit` is false); ("committed" or
    "aborted", why it was not committed when it should have been)."""
    why: str | None = None
    if commit:
        try:
            producer.commit_transaction(timeout)
            return "committed", None
        except KafkaException as e:
            why = f"cannot commit the transaction: {describe_error(e)}"
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if error is not None and error.fatal():
                return "aborted", why + " (the producer was fenced or failed: nothing " \
                                        "of the transaction is visible)"
        except KeyboardInterrupt:
            why = "interrupted while committing"
    try:
        producer.abort_transaction(timeout)
    except KafkaException as e:
        # A fatal error (e.g. fenced): the coordinator aborts the transaction itself.
        why = (why + "; " if why else "") + f"abort failed: {describe_error(e)}"
    return "aborted", why


def _send(producer: Producer, args: argparse.Namespace, key: bytes | None,
          value: bytes | None,
          headers: list[Header], deliveries: Deliveries, number: int) -> None:
    kwargs: dict[str, Any] = {"key": key, "headers": headers or None,
                              "on_delivery": deliveries.callback(number)}
    if args.partition is not None:
        kwargs["partition"] = args.partition
    while True:
        try:
            producer.produce(args.topic, value, **kwargs)
            break
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)
        except KafkaException as e:  # refused before sending, e.g. a record too large
            deliveries.fail(number, describe_error(e))
            break
    producer.poll(0)


def _report(args: argparse.Namespace, deliveries: Deliveries, errors: ErrorRecorder,
            outcome: str | None = None) -> None:
    """outcome: "committed" or "aborted" with --transactional-id, else None."""
    if args.json:
        report: dict[str, Any] = {
            "topic": args.topic,
            "records": deliveries.records,
            "bytes": deliveries.bytes,
            "failed": deliveries.failed,
            "partitions": {str(p): n for p, n in sorted(deliveries.partitions.items())},
            "errors": dict(deliveries.errors),
        }
        if outcome is not None:
            report["transaction"] = outcome
        print_json(report)
    elif outcome == "aborted":
        print(f"transaction aborted: none of the {deliveries.records} record"
              f"{'s' * (deliveries.records != 1)} written to {args.topic} is visible to "
              f"read_committed consumers", file=sys.stderr)
    else:
        committed = " in one committed transaction" if outcome == "committed" else ""
        print(f"produced {deliveries.records} record{'s' * (deliveries.records != 1)} "
              f"({deliveries.bytes} bytes of keys and values) to {args.topic}{committed}",
              file=sys.stderr)
    if deliveries.failed:
        print(f"odradek produce: {deliveries.failed} record"
              f"{'s' * (deliveries.failed != 1)} failed", file=sys.stderr)
        for line in deliveries.first_errors:
            print(f"odradek produce: {line}", file=sys.stderr)
        if errors.last is not None:
            print(f"odradek produce: last client error: {describe_error(errors.last)}",
                  file=sys.stderr)


def _open(path: str | None) -> BinaryIO:
    if path is None or path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # closed by run()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE) from e


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Numbered lines without their ending (\\n or \\r\\n); a last line may lack one."""
    for number, line in enumerate(_raw_lines(stream), 1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield number, line


def _raw_lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of a file as they are; of a pipe or terminal, read as they come with a
    wait of at most POLL_S at a time: a Ctrl-C that the kernel hands to one of
    librdkafka's threads (as it does once a transactional producer runs) is then still
    seen by the main thread within POLL_S, not only when the next line comes."""
    try:
        fd = stream.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        regular = True
    if regular:
        yield from stream
        return
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        pending += chunk
        if b"\n" in chunk:
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line + b"\n"
    if pending:
        yield pending


def _separator(text: str | None, option: str) -> bytes | None:
    if text is None:
        return None
    raw = unescape(text).encode("utf-8")
    if not raw:
        raise CliError(f"{option} cannot be empty", EXIT_USAGE)
    if b"\n" in raw:
        raise CliError(f"{option} cannot contain a newline: lines end there", EXIT_USAGE)
    return raw


def _header(text: str) -> Header:
    key, value = key_value(text, "--header")
    return key, value.encode("utf-8")
