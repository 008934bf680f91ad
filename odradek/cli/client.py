"""Client-side helpers shared by `odradek topics`, `produce` and `consume`.

The commands talk to brokers through confluent-kafka (librdkafka), the same client most
users run, so what the CLI sees is what their applications see. This module builds the
librdkafka configuration from the common options, parses durations, and turns expected
failures (Kafka errors, bad input, timeouts) into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import base64
import functools
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

DEFAULT_BOOTSTRAP = "localhost:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP"
DEFAULT_TIMEOUT = 30.0
# With no broker reachable at all, a command gives up after this long, whatever its
# timeout, and says which address it tried and why.
UNREACHABLE_S = 3.0

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

T = TypeVar("T")


class CliError(Exception):
    """An expected failure: its message is printed as is, without a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def describe_error(error: KafkaError | KafkaException | BaseException) -> str:
    """`NAME: message` for a Kafka error, the plain message for anything else."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0],
                                                                      KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(error)


class _LibrdkafkaLog(logging.Handler):
    """librdkafka's log lines (a client's "logger"): printed as librdkafka would print
    them, but a fatal error, which the command reports itself in Kafka's words."""

    def __init__(self, recorder: ErrorRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        _, fatal, reason = message.partition("Fatal error: ")
        if message.startswith("FATAL ") and fatal:
            self.recorder.fatal = _named(reason)
        else:
            print(message, file=sys.stderr)


@functools.cache
def _error_texts() -> dict[str, str]:
    """librdkafka's description of each error code -> the code's name."""
    texts = {}
    for code in range(-200, 200):
        error = KafkaError(code)
        if not error.name().startswith("ERR_"):
            texts[error.str()] = error.name()
    return texts


def _named(reason: str) -> str:
    """`NAME: text` for librdkafka's "Broker: Cluster authorization failed: ..." text."""
    for text, name in _error_texts().items():
        if text and reason.startswith(text + ":"):
            return f"{name}: {reason[len(text) + 1:].strip()}"
    return reason


def fatal_error_of(error: BaseException) -> KafkaError | None:
    """The fatal librdkafka error behind a SystemError, if that is what it is:
    confluent-kafka raises a fatal error as a KafkaException instead of calling error_cb,
    from whatever call serves callbacks, and Python wraps it when a callback runs on."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0],
                                                                      KafkaError):
        kafka_error: KafkaError = cause.args[0]
        return kafka_error if kafka_error.fatal() else None
    return None


def error_code(error: BaseException) -> int | None:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0],
                                                                      KafkaError):
        code: int = error.args[0].code()
        return code
    return None


# ---- the options every client command takes ---------------------------------------------

def common_options(timeout_help: str | None = None) -> argparse.ArgumentParser:
    """A parent parser with the connection and output options."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection and output")
    group.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help=f"broker(s) to bootstrap from, comma-separated (default: "
                       f"${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")
    group.add_argument("--command-config", metavar="FILE",
                       help="a properties file of client (librdkafka) settings")
    group.add_argument("-X", dest="client_settings", metavar="KEY=VALUE", action="append",
                       default=[], help="one client (librdkafka) setting, repeatable; "
                       "overrides --command-config")
    group.add_argument("--timeout", metavar="DURATION", type=parse_duration, default=None,
                       help=timeout_help or "how long to wait for the cluster, e.g. 10s, "
                       f"500ms, 2m (default {DEFAULT_TIMEOUT:g}s)")
    group.add_argument("--json", action="store_true", help="machine-readable JSON output")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="show the client library's own log lines")
    return parent


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from `10s`, `500ms`, `2m`, `1h` or a bare number of seconds."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 10s, 500ms or 2m)")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}


def unescape(text: str) -> str:
    """`\\t`, `\\n`, `\\r`, `\\0` and `\\\\` as the characters: a tab is awkward to type."""
    return re.sub(r"\\([tnr0\\])", lambda m: _ESCAPES[m.group(1)], text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def timeout_of(args: argparse.Namespace) -> float:
    timeout: float | None = args.timeout
    return DEFAULT_TIMEOUT if timeout is None else timeout


def read_properties(path: str) -> dict[str, str]:
    """`key=value` (or `key: value`) lines of a Java-style properties file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE) from e
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if m is None:
            raise CliError(f"{path}:{number}: expected key=value, got {line!r}", EXIT_USAGE)
        props[m.group(1)] = m.group(2)
    return props


def key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"{what} wants KEY=VALUE, not {text!r}", EXIT_USAGE)
    return key.strip(), value


def client_config(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """The librdkafka settings: ours, then the file, then -X, then --bootstrap-server.

    `overrides` are the command's own needs (acks, partitioner...); the user's settings
    come after them, so a -X can always change what a command chose.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP,
        "client.id": "odradek-cli",
        **overrides,
    }
    if not args.verbose:
        # Connection failures are reported once, as our own error; librdkafka would
        # otherwise print a line for every reconnect attempt.
        config["log_level"] = 0
    if args.command_config:
        config.update(read_properties(args.command_config))
    for item in args.client_settings:
        key, value = key_value(item, "-X")
        config[key] = value
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    return config


class ErrorRecorder:
    """librdkafka's error_cb: keeps the last client-level error (e.g. broker down).

    A timeout alone says little; the last transport error says why it timed out (its text
    names the address tried). While every broker is down librdkafka reports a failed
    connection about once a second: `unreachable()` tells when that has gone on for
    UNREACHABLE_S, so that a command gives up early instead of waiting out its timeout.
    """

    def __init__(self) -> None:
        self.last: KafkaError | None = None
        # librdkafka's log, which alone names a fatal error when confluent-kafka loses it.
        self.fatal: str | None = None
        self.logger = logging.getLogger(f"odradek.cli.librdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(_LibrdkafkaLog(self))
        self._transport: KafkaError | None = None
        self._down_since: float | None = None  # since when every broker is down
        self._failed_at = 0.0  # the last failed connection

    def __call__(self, error: KafkaError) -> None:
        now = time.monotonic()
        self.last = error
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._down_since = self._down_since or now
        elif error.code() == KafkaError._TRANSPORT:
            self._transport, self._failed_at = error, now

    def unreachable(self) -> bool:
        now = time.monotonic()
        return (self._down_since is not None and now - self._down_since >= UNREACHABLE_S
                and now - self._failed_at < 2.5)  # connections still failing

    def explain(self, message: str) -> str:
        last = self.last
        if last is not None and last.code() == KafkaError._ALL_BROKERS_DOWN:
            last = self._transport or last  # "1/1 brokers are down" does not say why
        if last is None:
            return message
        return f"{message} (last client error: {describe_error(last)})"


# ---- running commands --------------------------------------------------------------------

def command(name: str) -> Callable[[Callable[[argparse.Namespace], int]],
                                   Callable[[argparse.Namespace], int]]:
    """Wraps a command's run(): expected failures become `odradek NAME: message`."""

    def decorate(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace],
                                                                       int]:
        @functools.wraps(run)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except CliError as e:
                print(f"odradek {name}: {e}", file=sys.stderr)
                return e.exit_code
            except KafkaException as e:
                print(f"odradek {name}: {describe_error(e)}", file=sys.stderr)
                return EXIT_FAILURE
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED

        return wrapper

    return decorate


def make_client(cls: Callable[[dict[str, Any]], T], config: dict[str, Any]) -> T:
    """A Producer, Consumer or AdminClient; a bad setting is a CliError, not a traceback."""
    try:
        return cls(config)
    except (KafkaException, ValueError, TypeError) as e:
        raise CliError(f"invalid client configuration: {describe_error(e)}", EXIT_USAGE) from e


class AdminCommand:
    """An AdminClient with the command's timeout and a memory of connection errors."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.errors = ErrorRecorder()
        self.timeout = timeout_of(args)
        self.client: AdminClient = make_client(
            AdminClient, client_config(args, error_cb=self.errors))

    def metadata(self) -> Any:
        """The cluster's metadata (every topic), asked in short slices so that an
        unreachable cluster is reported within UNREACHABLE_S rather than the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self.client.list_topics(timeout=max(min(1.0, remaining), 0.1))
            except KafkaException as e:
                self.client.poll(0)  # serves error_cb: why it could not connect
                retry = error_code(e) in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
                if retry and self.errors.unreachable():
                    raise CliError(self.errors.explain("cannot reach the cluster")) from e
                if not retry or time.monotonic() >= deadline:
                    raise CliError(self.errors.explain(
                        f"cannot fetch metadata: {describe_error(e)}")) from e
                time.sleep(0.1)  # a refused connection fails at once: do not spin


def wait_all(futures: Iterable[Future[T]], timeout: float, poll: Callable[[float], Any],
             errors: ErrorRecorder) -> None:
    """Waits for admin futures, serving client callbacks; CliError on timeout."""
    pending = list(futures)
    deadline = time.monotonic() + timeout + 1  # librdkafka times out first, with a reason
    while any(not f.done() for f in pending):
        if time.monotonic() > deadline:
            raise CliError(errors.explain(f"no answer from the cluster within {timeout:g}s"))
        if errors.unreachable():
            raise CliError(errors.explain("cannot reach the cluster"))
        poll(0.1)


def kafka_uuid(uuid: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded.

    librdkafka's str() uses standard base64 ('+' and '/'), which Kafka's tools never show.
    """
    high = uuid.get_most_significant_bits() & (2**64 - 1)
    low = uuid.get_least_significant_bits() & (2**64 - 1)
    raw = high.to_bytes(8, "big") + low.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
