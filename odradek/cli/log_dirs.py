"""`odradek log-dirs describe`: each broker's log dirs and the partitions in them, as
Kafka's kafka-log-dirs.sh --describe shows them.

librdkafka has no DescribeLogDirs, so the CLI finds the brokers through librdkafka's
Metadata and sends each one the request itself (wire.py). Per log dir: its error
(KAFKA_STORAGE_ERROR for a dir that is offline) and, per partition, the size of its log,
its offset lag (the high watermark minus the log end offset; for a future log, how far it
is behind the current one) and whether it is a future log (one being moved between dirs).
`--json` is kafka-log-dirs.sh's own JSON, except that a dir's "error" is Kafka's error
name rather than a Java exception class.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast

from odradek.cli.client import (
    EXIT_FAILURE,
    AdminCommand,
    CliError,
    client_config,
    command,
    common_options,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.wire import WireError, broker_security, error_name, send_request
from odradek.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from odradek.protocol.messages.describe_log_dirs_response import DescribeLogDirsResponse

LOG_DIRS_JSON_VERSION = 1
# The volume's size and free space (DescribeLogDirs v4): in the table, not in the JSON,
# which keeps to kafka-log-dirs.sh's shape.
_VOLUME = ("totalBytes", "usableBytes")


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    log_dirs = commands.add_parser("log-dirs", help="describe the brokers' log dirs")
    actions = log_dirs.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe", parents=[common_options()],
        help="per broker and log dir: its error, and each partition's size, offset lag "
        "and whether it is a future log (kafka-log-dirs.sh --describe)")
    describe.add_argument("--broker-list", metavar="ID[,ID...]", type=id_list,
                          help="only these brokers (default: every broker)")
    describe.add_argument("--topic-list", metavar="TOPIC[,TOPIC...]", type=name_list,
                          help="only the partitions of these topics (default: all)")
    describe.set_defaults(run=run_describe)


def id_list(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        ids = []
    if not ids:
        raise argparse.ArgumentTypeError(f"expected broker ids such as 1,2,3, not {text!r}")
    return ids


def name_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected topic names such as a,b, not {text!r}")
    return names


@command("log-dirs describe")
def run_describe(args: argparse.Namespace) -> int:
    security = broker_security(client_config(args))
    admin = AdminCommand(args)
    metadata = admin.metadata()
    brokers = sorted(metadata.brokers)
    if args.broker_list is not None:
        if unknown := [b for b in args.broker_list if b not in metadata.brokers]:
            raise CliError(f"no broker {', '.join(map(str, unknown))} in the cluster "
                           f"(brokers: {', '.join(map(str, brokers))})")
        brokers = list(dict.fromkeys(args.broker_list))
    topics = None if args.topic_list is None else set(args.topic_list)

    status = 0
    described = []
    for broker_id in brokers:
        node = metadata.brokers[broker_id]
        try:
            response = cast(DescribeLogDirsResponse, send_request(
                node.host, node.port, DescribeLogDirsRequest(topics=None),
                timeout=admin.timeout, node_id=broker_id, security=security))
        except WireError as e:
            print(f"odradek log-dirs describe: {e}", file=sys.stderr)
            status = EXIT_FAILURE
            continue
        if response.error_code:
            print(f"odradek log-dirs describe: broker {broker_id} at {node.host}:{node.port}: "
                  f"{error_name(response.error_code)}", file=sys.stderr)
            status = EXIT_FAILURE
            continue
        described.append(broker_json(broker_id, response, topics))

    if args.json:
        print_json({"version": LOG_DIRS_JSON_VERSION, "brokers": [
            {**b, "logDirs": [{k: v for k, v in d.items() if k not in _VOLUME}
                              for d in b["logDirs"]]} for b in described]})
        return status
    dirs = [[b["broker"], d["logDir"], d["error"], len(d["partitions"]),
             sum(p["size"] for p in d["partitions"]), d["totalBytes"], d["usableBytes"]]
            for b in described for d in b["logDirs"]]
    print_table(["broker", "log-dir", "error", "partitions", "size", "total-bytes",
                 "usable-bytes"], dirs)
    partitions = [[b["broker"], d["logDir"], p["partition"], p["size"], p["offsetLag"],
                   str(p["isFuture"]).lower()]
                  for b in described for d in b["logDirs"] for p in d["partitions"]]
    if partitions:
        print()
        print_table(["broker", "log-dir", "partition", "size", "offset-lag", "is-future"],
                    partitions)
    return status


def broker_json(broker_id: int, response: DescribeLogDirsResponse,
                topics: set[str] | None) -> dict[str, Any]:
    log_dirs = []
    for result in sorted(response.results, key=lambda r: r.log_dir):
        partitions = [
            {"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
             "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
            for t in sorted(result.topics, key=lambda t: t.name)
            if topics is None or t.name in topics
            for p in sorted(t.partitions, key=lambda p: p.partition_index)]
        log_dirs.append({
            "logDir": result.log_dir,
            "error": error_name(result.error_code) if result.error_code else None,
            "partitions": partitions,
            "totalBytes": result.total_bytes if result.total_bytes >= 0 else None,
            "usableBytes": result.usable_bytes if result.usable_bytes >= 0 else None,
        })
    return {"broker": broker_id, "logDirs": log_dirs}
