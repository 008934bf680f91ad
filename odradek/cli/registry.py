"""`odradek registry`: run a schema registry with Confluent's REST API (docs/registry.md),
a client of the cluster, in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from odradek.cli.client import client_config, common_options

# The registry's default (odradek/registry/server.py), here so that every `odradek`
# command does not import aiohttp, fastavro and confluent-kafka to build its parser.
DEFAULT_LISTEN = "http://localhost:8081"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "registry", parents=[common_options()],
        help="run a schema registry (Confluent's REST API) storing schemas in _schemas")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="http://HOST:PORT",
                        help=f"where to serve the REST API (default {DEFAULT_LISTEN})")
    parser.add_argument("--topic", default="_schemas",
                        help="the compacted topic the schemas are kept in (default _schemas)")
    parser.add_argument("--replication-factor", type=int, default=3,
                        help="of the topic when it is created (at most the brokers there "
                        "are; default 3)")
    parser.add_argument("--advertised-url", metavar="http://HOST:PORT",
                        help="the URL other registries forward writes to this one at "
                        "(default: --listen's, with this host's name for 0.0.0.0)")
    parser.add_argument("--group-id", default="odradek-registry",
                        help="the consumer group the registries of a cluster elect their "
                        "primary in (default odradek-registry)")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000,
                        help="how long a registry that stopped answering stays primary "
                        "(default 10000)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odradek.registry.kafka_store import StoreError
    from odradek.registry.server import RegistryServer

    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = client_config(args, **{"client.id": "odradek-registry"})
    try:
        server = RegistryServer(config, args.listen, topic=args.topic,
                                replication_factor=args.replication_factor,
                                advertised_url=args.advertised_url, group=args.group_id,
                                session_timeout_ms=args.session_timeout_ms)
    except ValueError as e:
        print(f"odradek registry: {e}", file=sys.stderr)
        return 2

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        starting = asyncio.ensure_future(server.start())
        stopping = asyncio.ensure_future(stop.wait())
        try:  # a signal while the topic is read stops it too
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # its error, if it failed
                await stopping
        finally:
            starting.cancel()
            stopping.cancel()
            await server.stop()

    try:
        asyncio.run(serve())
    except (StoreError, OSError) as e:
        print(f"odradek registry: {e}", file=sys.stderr)
        return 1
    return 0
