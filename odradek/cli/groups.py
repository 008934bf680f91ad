"""`odradek groups`: list, describe (with lag), reset offsets of, and delete consumer groups.

Through librdkafka's AdminClient: ListGroups, DescribeGroups, OffsetFetch, ListOffsets,
OffsetCommit and DeleteGroups. Lag is the partition's log end offset (its high
watermark, what a consumer can reach) minus the group's committed offset, as Kafka's
kafka-consumer-groups.sh computes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    AdminCommand,
    CliError,
    command,
    common_options,
    describe_error,
    error_code,
    wait_all,
)
from odradek.cli.output import print_json, print_table

K = TypeVar("K")
# States in which a group has no live members, so its offsets may be changed from outside.
_INACTIVE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}
# Kafka's names of the group states, as kafka-consumer-groups.sh prints them.
_STATES = {
    "Empty": ConsumerGroupState.EMPTY,
    "Stable": ConsumerGroupState.STABLE,
    "PreparingRebalance": ConsumerGroupState.PREPARING_REBALANCING,
    "CompletingRebalance": ConsumerGroupState.COMPLETING_REBALANCING,
    "Dead": ConsumerGroupState.DEAD,
}
_STATE_NAMES = {state: name for name, state in _STATES.items()}


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    groups = commands.add_parser("groups", help="list, describe, reset offsets of and delete "
                                 "consumer groups")
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    listing = actions.add_parser("list", parents=[common], help="list consumer groups")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         choices=list(_STATES),
                         help="only groups in this state (repeatable)")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser(
        "describe", parents=[common],
        help="state, members, committed offsets, log end offsets and lag")
    describe.add_argument("names", metavar="GROUP", nargs="+")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser(
        "reset-offsets", parents=[common],
        help="move a group's committed offsets (a dry run unless --execute)")
    reset.add_argument("name", metavar="GROUP")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept in range)")
    to.add_argument("--to-datetime", metavar="ISO8601",
                    help="the first offset at or after this time, e.g. 2026-11-22T10:00:00Z")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (negative: back), kept in range")
    reset.add_argument("--execute", action="store_true",
                       help="commit the new offsets (without it, only print the plan)")
    reset.set_defaults(run=run_reset)

    delete = actions.add_parser("delete", parents=[common], help="delete consumer groups")
    delete.add_argument("names", metavar="GROUP", nargs="+")
    delete.set_defaults(run=run_delete)


class GroupAdmin(AdminCommand):
    def wait(self, futures: Mapping[K, Future[Any]]) -> dict[K, Any]:
        """Every future's result; the first failure becomes a CliError."""
        wait_all(futures.values(), self.timeout, self.client.poll, self.errors)
        out = {}
        for key, future in futures.items():
            try:
                out[key] = future.result()
            except KafkaException as e:
                raise CliError(f"{key}: {describe_error(e)}") from e
        return out

    def describe(self, group: str) -> Any:
        futures = self.client.describe_consumer_groups([group], request_timeout=self.timeout)
        return self.wait(futures)[group]

    def committed(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        """(topic, partition) -> (offset, metadata) of every committed offset."""
        futures = self.client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout)
        result = self.wait(futures)[group]
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                for tp in result.topic_partitions if tp.offset >= 0}

    def offsets(self, partitions: list[tuple[str, int]], spec: OffsetSpec) -> dict[
            tuple[str, int], int]:
        if not partitions:
            return {}
        futures = self.client.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=self.timeout)
        results = self.wait(futures)
        return {(tp.topic, tp.partition): info.offset for tp, info in results.items()}

    def partitions_of(self, topic: str) -> list[int]:
        # DescribeTopics, not a metadata request for the topic: librdkafka's admin client
        # asks the broker to auto-create the topics it names there, and a dry run must not
        # create a topic it was only asked about.
        futures = self.client.describe_topics(TopicCollection([topic]),
                                              request_timeout=self.timeout)
        try:
            description = futures[topic].result()
        except KafkaException as e:
            if error_code(e) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise CliError(f"topic {topic!r} does not exist") from e
            raise CliError(self.errors.explain(
                f"cannot describe topic {topic!r}: {describe_error(e)}")) from e
        return sorted(p.id for p in description.partitions)


def _state_name(state: Any) -> str:
    return _STATE_NAMES.get(state, "Unknown")


@command("groups list")
def run_list(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args)
    states = {_STATES[name] for name in args.state}
    kwargs: dict[str, Any] = {"request_timeout": admin.timeout}
    if states:
        kwargs["states"] = states
    result = admin.wait({"groups": admin.client.list_consumer_groups(**kwargs)})["groups"]
    rows = sorted((g.group_id, _state_name(g.state)) for g in result.valid)
    if args.json:
        print_json([{"group": g, "state": s} for g, s in rows])
    else:
        print_table(["group", "state"], rows)
    for error in result.errors:
        print(f"odradek groups list: {describe_error(error)}", file=sys.stderr)
    return EXIT_FAILURE if result.errors else 0


@command("groups describe")
def run_describe(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args)
    documents = []
    missing = []
    for group in args.names:
        description = admin.describe(group)
        committed = admin.committed(group)
        if (description.state == ConsumerGroupState.DEAD and not description.members
                and not committed):
            # What the coordinator says of a group it does not know (Kafka's tool: "does
            # not exist").
            missing.append(group)
            continue
        owner: dict[tuple[str, int], Any] = {}
        for member in description.members:
            for tp in member.assignment.topic_partitions:
                owner[(tp.topic, tp.partition)] = member
        partitions = sorted(set(committed) | set(owner))
        ends = admin.offsets(partitions, OffsetSpec.latest())
        rows: list[dict[str, Any]] = []
        for tp in partitions:
            offset = committed.get(tp, (None, ""))[0]
            end = ends.get(tp)
            lag = end - offset if offset is not None and end is not None else None
            member = owner.get(tp)
            rows.append({
                "topic": tp[0], "partition": tp[1], "committed_offset": offset,
                "log_end_offset": end, "lag": lag,
                "member_id": member.member_id if member else None,
                "host": member.host if member else None,
                "client_id": member.client_id if member else None,
            })
        document = {
            "group": group, "state": _state_name(description.state),
            "protocol": description.partition_assignor or None,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.host,
                         "partitions": [[tp.topic, tp.partition]
                                        for tp in m.assignment.topic_partitions]}
                        for m in description.members],
            "partitions": rows,
            "total_lag": sum(r["lag"] for r in rows if r["lag"] is not None),
        }
        documents.append(document)
    for group in missing:
        print(f"odradek groups describe: consumer group {group!r} does not exist",
              file=sys.stderr)
    status = EXIT_FAILURE if missing else 0
    if args.json:
        if documents:
            print_json(documents if len(args.names) > 1 else documents[0])
        return status
    for i, d in enumerate(documents):
        if i:
            print()
        print(f"group {d['group']}: {d['state']}, protocol {d['protocol'] or '-'}, "
              f"{len(d['members'])} member(s), total lag {d['total_lag']}")
        print_table(["topic", "partition", "current-offset", "log-end-offset", "lag",
                     "consumer-id", "host", "client-id"],
                    [[r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"],
                      r["lag"], r["member_id"], r["host"], r["client_id"]]
                     for r in d["partitions"]])
    return status


def _reset_partitions(admin: GroupAdmin, specs: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for spec in specs:
        topic, _, numbers = spec.partition(":")
        available = admin.partitions_of(topic)
        if not numbers:
            out += [(topic, p) for p in available]
            continue
        try:
            wanted = [int(n) for n in numbers.split(",")]
        except ValueError:
            raise CliError(f"--topic {spec!r}: partitions must be numbers", EXIT_USAGE) from None
        missing = [p for p in wanted if p not in available]
        if missing:
            raise CliError(f"topic {topic!r} has no partition {missing[0]}")
        out += [(topic, p) for p in wanted]
    return sorted(set(out))


def _timestamp_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-datetime {text!r} is not an ISO 8601 time", EXIT_USAGE) from None
    if when.tzinfo is None:
        when = when.astimezone()  # a time without a zone is local time, as Kafka's tool
    return int(when.timestamp() * 1000)


@command("groups reset-offsets")
def run_reset(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args)
    group = args.name
    description = admin.describe(group)
    if args.execute and description.state not in _INACTIVE:
        raise CliError(f"group {group!r} is {_state_name(description.state)}: offsets can only "
                       "be reset while it has no active members (stop its consumers first)")
    partitions = _reset_partitions(admin, args.topic)
    committed = admin.committed(group)
    earliest = admin.offsets(partitions, OffsetSpec.earliest())
    latest = admin.offsets(partitions, OffsetSpec.latest())
    if args.to_datetime is not None:
        by_time = admin.offsets(partitions, OffsetSpec.for_timestamp(
            _timestamp_ms(args.to_datetime)))
    plan = []
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        current = committed.get(tp, (None, ""))[0]
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.to_datetime is not None:
            target = by_time[tp] if by_time[tp] >= 0 else high  # nothing that late: the end
        else:
            target = (current if current is not None else high) + args.shift_by
        plan.append((tp, current, min(max(target, low), high)))  # kept within the log
    if args.execute:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, new) for (t, p), _, new in plan])
        admin.wait(admin.client.alter_consumer_group_offsets(
            [request], request_timeout=admin.timeout))
    if args.json:
        print_json({"group": group, "executed": args.execute,
                    "partitions": [{"topic": t, "partition": p, "current_offset": cur,
                                    "new_offset": new} for (t, p), cur, new in plan]})
    else:
        print_table(["topic", "partition", "current-offset", "new-offset"],
                    [[t, p, cur, new] for (t, p), cur, new in plan])
        if not args.execute:
            print("(dry run: add --execute to commit these offsets)")
    return 0


@command("groups delete")
def run_delete(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args)
    futures = admin.client.delete_consumer_groups(args.names, request_timeout=admin.timeout)
    wait_all(futures.values(), admin.timeout, admin.client.poll, admin.errors)
    failed = False
    results = []
    for group, future in futures.items():
        try:
            future.result()
            results.append({"group": group, "deleted": True, "error": None})
        except KafkaException as e:
            failed = True
            results.append({"group": group, "deleted": False, "error": describe_error(e)})
    if args.json:
        print_json(results)
    else:
        for r in results:
            if r["deleted"]:
                print(f"deleted group {r['group']}")
            else:
                print(f"odradek groups delete: {r['group']}: {r['error']}", file=sys.stderr)
    return EXIT_FAILURE if failed else 0
