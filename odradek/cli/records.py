"""`odradek records delete`: delete a partition's records before an offset, as Kafka's
kafka-delete-records.sh (and `rpk topic trim-prefix`) do.

DeleteRecords through librdkafka's AdminClient: each partition's log start offset moves up
to the offset given (-1: the high watermark, that is every record there is), and the
segments wholly before it go. The broker answers each partition's new low watermark, or
its error (OFFSET_OUT_OF_RANGE beyond the high watermark, UNKNOWN_TOPIC_OR_PART...):
each is printed, and the exit status is 1 when any partition failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from confluent_kafka import TopicPartition

from odradek.cli.client import EXIT_FAILURE, EXIT_USAGE, CliError, command, common_options
from odradek.cli.output import print_json, print_table
from odradek.cli.topics import Admin, error_json, partition_list

HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    records = commands.add_parser("records", help="delete records before an offset")
    actions = records.add_subparsers(dest="action", required=True, metavar="ACTION")
    delete = actions.add_parser(
        "delete", parents=[common_options()],
        help="delete the records before an offset (kafka-delete-records.sh)")
    delete.add_argument("--offset-json-file", "--offsets-json", dest="offsets_json",
                        metavar="FILE", type=argparse.FileType("r"),
                        help="kafka-delete-records.sh's JSON: {\"partitions\": [{\"topic\", "
                        "\"partition\", \"offset\"}], \"version\": 1}; - for stdin")
    delete.add_argument("--topic", metavar="TOPIC", help="the topic (with --partition and "
                        "--offset)")
    delete.add_argument("--partition", metavar="P[,P...]", type=partition_list,
                        action="append", default=[], help="its partitions (repeatable)")
    delete.add_argument("--offset", metavar="N", type=int,
                        help="delete the records before offset N; -1: every record, up to "
                        "the high watermark")
    delete.set_defaults(run=run_delete)


def offsets_of(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of each partition to trim, from the file or the options."""
    by_options = args.topic is not None or args.partition or args.offset is not None
    if args.offsets_json is not None and by_options:
        raise CliError("give --offset-json-file or --topic/--partition/--offset, not both",
                       EXIT_USAGE)
    if args.offsets_json is not None:
        wanted = read_offsets_json(args.offsets_json)
    elif args.topic is None or not args.partition or args.offset is None:
        raise CliError("give --offset-json-file FILE, or --topic, --partition and --offset",
                       EXIT_USAGE)
    else:
        wanted = [(args.topic, p, args.offset) for ps in args.partition for p in ps]
    seen: set[tuple[str, int]] = set()
    for topic, partition, offset in wanted:
        if (topic, partition) in seen:
            raise CliError(f"{topic}-{partition} is named twice", EXIT_USAGE)
        seen.add((topic, partition))
        if offset < HIGH_WATERMARK:
            raise CliError(f"{topic}-{partition}: offset {offset}: an offset is at least 0, "
                           "or -1 for the high watermark", EXIT_USAGE)
    if not wanted:
        raise CliError("no partition to delete records from", EXIT_USAGE)
    return wanted


def read_offsets_json(file: Any) -> list[tuple[str, int, int]]:
    try:
        with file:
            data = json.load(file)
        return [(str(p["topic"]), int(p["partition"]), int(p["offset"]))
                for p in data["partitions"]]
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(f"{file.name}: not kafka-delete-records.sh's JSON ({{\"partitions\": "
                       f"[{{\"topic\", \"partition\", \"offset\"}}]}}): {e}", EXIT_USAGE) from e


@command("records delete")
def run_delete(args: argparse.Namespace) -> int:
    wanted = offsets_of(args)
    admin = Admin(args)
    results = admin.results(admin.client.delete_records(
        [TopicPartition(t, p, o) for t, p, o in wanted], **admin.kwargs()))
    by_partition = {(tp.topic, tp.partition): result for tp, result in results.items()}
    rows = []
    status = 0
    for topic, partition, offset in wanted:
        deleted, error = by_partition[(topic, partition)]
        row: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                               "low_watermark": None, "error": None}
        if error is not None:
            print(f"odradek records delete: {topic}-{partition}: {admin.explain(error)}",
                  file=sys.stderr)
            row["error"] = error_json(error)
            status = EXIT_FAILURE
        else:
            row["low_watermark"] = deleted.low_watermark
        rows.append(row)
    if args.json:
        print_json(rows)
    else:
        print_table(["topic", "partition", "low-watermark", "error"],
                    [[r["topic"], r["partition"], r["low_watermark"],
                      r["error"] and r["error"]["code"]] for r in rows])
    return status
