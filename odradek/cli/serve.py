"""`odradek serve`: run one broker in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from odradek.server.config import BrokerConfig, load_properties
from odradek.storage.errors import InvalidConfigError, StorageError


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = commands.add_parser(
        "serve", help="run a broker (embedded single-node defaults: PLAINTEXT://localhost:9092, "
        "data in ./odradek-data)")
    serve.add_argument("--config", metavar="FILE",
                       help="a server.properties file with Kafka's setting names")
    serve.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                       help="override one setting (repeatable), e.g. --set num.partitions=3")
    serve.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        props = load_properties(args.config) if args.config else {}
    except (OSError, ValueError) as e:
        print(f"odradek serve: cannot read {args.config}: {e}", file=sys.stderr)
        return 2
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"odradek serve: --set wants KEY=VALUE, not {item!r}", file=sys.stderr)
            return 2
        props[key.strip()] = value.strip()
    try:
        config = BrokerConfig.from_properties(props)
    except InvalidConfigError as e:
        print(f"odradek serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    from odradek.broker.kafka_server import KafkaServer  # here: client commands start faster
    from odradek.server.allocator import keep_large_buffers_in_heap

    loop_factory = _loop_factory()
    logging.getLogger("odradek").info(
        "event loop: %s; large buffers reused from the heap: %s",
        "uvloop" if loop_factory is not None else "asyncio", keep_large_buffers_in_heap())
    server = KafkaServer(config)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(server.run())
    except (StorageError, OSError) as e:
        logging.getLogger("odradek").error("cannot run the broker: %s", e)
        return 1
    return server.exit_code


def _loop_factory():  # type: ignore[no-untyped-def]
    """uvloop when installed, unless ODRADEK_EVENT_LOOP=asyncio asks for asyncio's own."""
    if os.environ.get("ODRADEK_EVENT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
