"""`odradek pipeline`: list the classic Spark pipelines, run one, feed one with generated input.

`run NAME` starts a SparkSession (local[*] unless --master says otherwise), runs the pipeline
and waits until Ctrl-C (or, with --available-now, until the input present at the start is
processed), printing each query's micro-batches. The options of `run NAME` are the fields of
the pipeline's config dataclass (odradek/pipelines). pyspark is optional, the `[spark]`
extra: only `run` imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import threading
from datetime import datetime
from typing import Any, get_type_hints

from odradek.cli.client import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    command,
    key_value,
    positive_int,
)
from odradek.cli.output import print_json, print_table
from odradek.pipelines import PIPELINES, Pipeline
from odradek.pipelines.common import create_session, require_pyspark

_POLL_SECONDS = 1.0


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pipeline = commands.add_parser("pipeline", help="list, run and generate input for the "
                                   "Spark pipelines")
    actions = pipeline.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="the pipelines and what they compute")
    listing.add_argument("--json", action="store_true", help="machine-readable JSON output")
    listing.set_defaults(run=run_list)

    run = actions.add_parser("run", help="run a pipeline on Spark until interrupted")
    names = run.add_subparsers(dest="name", required=True, metavar="NAME")
    for p in PIPELINES.values():
        sub = names.add_parser(p.name, help=p.summary, description=p.summary)
        _config_options(sub, p.config)
        spark = sub.add_argument_group("spark")
        spark.add_argument("--master", default="local[*]",
                           help="the Spark master (default local[*])")
        spark.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[],
                           help="a Spark setting (repeatable)")
        sub.set_defaults(run=run_pipeline, pipeline=p)

    generate = actions.add_parser("generate", help="send realistic input for a pipeline")
    names = generate.add_subparsers(dest="name", required=True, metavar="NAME")
    for p in PIPELINES.values():
        doc = (p.generate.__doc__ or "").strip()
        sub = names.add_parser(p.name, help=f"input for {p.name}", description=doc)
        sub.add_argument("--bootstrap-server", metavar="HOST:PORT",
                         help=f"default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP}")
        sub.add_argument("--topic", default=p.topic, help=f"default {p.topic}")
        sub.add_argument("--count", type=positive_int, default=3000,
                         help="how many records (default 3000: 5 minutes at 10/s)")
        sub.add_argument("--rate", type=_positive_float, default=10.0,
                         help="records per second of event time (default 10)")
        sub.add_argument("--seed", type=int, help="the same seed sends the same records")
        sub.add_argument("--start", type=_start_time, metavar="ISO8601",
                         help="simulate a stream that began then, sent as fast as possible "
                         "(default: live, from now, at --rate)")
        sub.add_argument("--partitions", type=positive_int, default=3,
                         help="partitions of the topic if it must be created (default 3)")
        if p.registry:
            sub.add_argument("--schema-registry-url", default="http://localhost:8081",
                             help="the schema registry the records' schema is registered "
                             "at (default http://localhost:8081)")
        sub.set_defaults(run=run_generate, pipeline=p)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _start_time(text: str) -> int:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return int(when.timestamp() * 1000)


def _config_options(parser: argparse.ArgumentParser, config: type) -> None:
    """One option per field of the config dataclass: --field-name, typed, with its help."""
    group = parser.add_argument_group("pipeline")
    types = get_type_hints(config)
    for f in dataclasses.fields(config):
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        kind = types[f.name]
        if kind is bool:
            group.add_argument(flag, dest=f.name, action="store_true", help=f.metadata["help"])
            continue
        default = f.default
        if f.name == "bootstrap":
            default = os.environ.get(BOOTSTRAP_ENV) or default
        shown = f" (default: {default!r})" if default != "" else ""
        group.add_argument(flag, dest=f.name, type=kind, default=default,
                           metavar=f.name.upper(), help=f.metadata["help"] + shown)


@command("pipeline list")
def run_list(args: argparse.Namespace) -> int:
    rows = [(p.name, "streaming" if p.streaming else "batch", p.topic, p.summary)
            for p in PIPELINES.values()]
    if args.json:
        print_json([{"name": n, "kind": k, "input": t, "summary": s} for n, k, t, s in rows])
    else:
        print_table(["name", "kind", "input", "summary"], rows)
    return 0


def _config(args: argparse.Namespace) -> Any:
    p: Pipeline = args.pipeline
    try:
        return p.config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(p.config)})
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from e


@command("pipeline run")
def run_pipeline(args: argparse.Namespace) -> int:
    p: Pipeline = args.pipeline
    config = _config(args)
    conf = dict(key_value(item, "--conf") for item in args.conf)
    try:
        require_pyspark()
    except RuntimeError as e:
        raise CliError(str(e)) from e
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    # Run in-process next to a session (a notebook, the tests): use that one and leave it be.
    ours = SparkSession.getActiveSession() is None
    spark = create_session(args.master, f"odradek-{p.name}", conf)
    if ours:
        spark.sparkContext.setLogLevel("WARN")
    queries: list[Any] = []
    try:
        result = p.run(spark, config)
        if not p.streaming:
            print(f"{p.name}: wrote {result.count()} rows to {config.table}")
            return 0
        queries = result
        print(f"{p.name}: {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} running, "
              f"checkpoints in {config.checkpoint}" + ("" if config.available_now
                                                       else "; Ctrl-C stops"))
        return _wait(spark, queries)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (PySparkException, ValueError) as e:
        raise CliError(str(e).strip().splitlines()[0]) from e
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        if ours:
            spark.stop()


def _wait(spark: Any, queries: list[Any]) -> int:
    """Prints each new micro-batch; returns when every query has ended, or at Ctrl-C
    (EXIT_INTERRUPTED; the caller stops the queries). A failed query fails the command."""
    from pyspark.errors import StreamingQueryException

    interrupted = threading.Event()
    # PySpark's SIGINT handler calls into the JVM from inside the handler, which breaks the
    # py4j call under way (tracebacks, not a clean stop): only note the interrupt here.
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    seen: dict[str, int] = {}
    try:
        while not interrupted.is_set():
            # A failed query is reported below, with its own exception.
            with contextlib.suppress(StreamingQueryException):
                spark.streams.awaitAnyTermination(_POLL_SECONDS)
            for query in queries:
                for progress in query.recentProgress:
                    if progress["batchId"] > seen.get(query.id, -1):
                        seen[query.id] = progress["batchId"]
                        print(f"{query.name}: batch {progress['batchId']}, "
                              f"{progress['numInputRows']} records in", flush=True)
            failed = [q for q in queries if not q.isActive and q.exception() is not None]
            if failed:
                message = str(failed[0].exception()).strip().splitlines()[0]
                raise CliError(f"a query failed: {message}", EXIT_FAILURE)
            if not any(q.isActive for q in queries):
                return 0
            spark.streams.resetTerminated()
        print("interrupted: stopping", flush=True)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)


@command("pipeline generate")
def run_generate(args: argparse.Namespace) -> int:
    p: Pipeline = args.pipeline
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP
    if args.start is None:
        print(f"sending {args.count} records to {args.topic} at {args.rate:g}/s "
              "(Ctrl-C stops)", flush=True)
    try:
        more = {"schema_registry": args.schema_registry_url} if p.registry else {}
        records = p.generate(bootstrap, topic=args.topic, count=args.count, rate=args.rate,
                             seed=args.seed, start=args.start, partitions=args.partitions,
                             **more)
    except RuntimeError as e:
        raise CliError(str(e)) from e
    print(f"sent {len(records)} records to {args.topic}")
    return 0
