"""`odradek groups`: list, describe (with lag), reset offsets of, delete offsets of, and
delete consumer groups.

Through librdkafka's AdminClient: ListGroups, DescribeGroups, OffsetFetch, ListOffsets,
OffsetCommit and DeleteGroups; OffsetDelete, which confluent-kafka does not expose, with
Odradek's own codec through odradek.cli.wire (below). Lag is the partition's log end
offset (its high watermark, what a consumer can reach) minus the group's committed offset,
as Kafka's kafka-consumer-groups.sh computes it.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

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
    client_config,
    command,
    common_options,
    describe_error,
    error_code,
    timeout_of,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.wire import (
    BrokerSocket,
    WireError,
    bootstrap_addresses,
    broker_security,
    send_request,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    find_coordinator_request,
    find_coordinator_response,
    offset_delete_request,
    offset_delete_response,
)

if TYPE_CHECKING:
    from odradek.broker.inter_broker_security import InterBrokerSecurity

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
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept in range)")
    to.add_argument("--to-datetime", metavar="ISO8601",
                    help="the first offset at or after this time, e.g. 2026-11-22T10:00:00Z")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (negative: back), kept in range")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset as it is (the log end where none is)")
    to.add_argument("--by-duration", type=iso_duration, metavar="PnDTnHnMnS",
                    help="the first offset at or after now minus this ISO 8601 duration, "
                    "e.g. PT1H30M or P1D")
    to.add_argument("--from-file", metavar="CSV",
                    help="the offsets of a kafka-consumer-groups CSV plan: lines of "
                    "topic,partition,offset (as --export prints); - for stdin")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true",
                          help="commit the new offsets (without it, only print the plan)")
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the plan (the default)")
    reset.add_argument("--export", action="store_true",
                       help="print the plan as CSV lines topic,partition,offset (the format "
                       "--from-file reads) instead of a table")
    reset.set_defaults(run=run_reset)

    delete_offsets = actions.add_parser(
        "delete-offsets", parents=[common],
        help="delete a group's committed offsets of some topics (OffsetDelete)")
    delete_offsets.add_argument("name", metavar="GROUP")
    delete_offsets.add_argument("--topic", action="append", required=True,
                                metavar="TOPIC[:P,P...]",
                                help="a topic, or some of its partitions (repeatable)")
    delete_offsets.set_defaults(run=run_delete_offsets)

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


def _topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """`TOPIC` or `TOPIC:P,P...`: the topic and the partitions named (None: all)."""
    topic, _, numbers = spec.partition(":")
    if not topic:
        raise CliError(f"--topic {spec!r}: no topic name", EXIT_USAGE)
    if not numbers:
        return topic, None
    try:
        return topic, [int(n) for n in numbers.split(",")]
    except ValueError:
        raise CliError(f"--topic {spec!r}: partitions must be numbers", EXIT_USAGE) from None


def _reset_partitions(admin: GroupAdmin, specs: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for spec in specs:
        topic, wanted = _topic_spec(spec)
        available = admin.partitions_of(topic)
        if wanted is None:
            out += [(topic, p) for p in available]
            continue
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


# Java's Duration.parse, which kafka-consumer-groups.sh's --by-duration uses: PnDTnHnMn.nS,
# each number optionally signed, the whole optionally negated.
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def iso_duration(text: str) -> int:
    """Milliseconds of an ISO 8601 duration such as PT1H30M, P1D or PT0.5S."""
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or m.group(0) in ("P", "-P", "+P") or (
            m.group(2) is None and m.group(3) is None):
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 duration: {text!r} (PnDTnHnMnS, e.g. PT30M, P1DT12H, PT0.5S)")
    sign, days, _, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
          + int(minutes or 0) * 60_000 + int(seconds or 0) * 1000)
    if fraction:
        part = int(fraction.ljust(3, "0")[:3])
        ms += -part if (seconds or "").startswith("-") else part
    return -ms if sign == "-" else ms


def read_reset_plan(path: str, group: str) -> dict[tuple[str, int], int]:
    """The offsets of a kafka-consumer-groups.sh CSV plan: `topic,partition,offset` lines,
    or `group,topic,partition,offset` (its form for several groups: only GROUP's count)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE) from e
    plan: dict[tuple[str, int], int] = {}
    other_groups = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            if cells[0] != group:
                other_groups = True
                continue
            cells = cells[1:]
        try:
            if len(cells) != 3 or not cells[0]:
                raise ValueError
            topic, partition, offset = cells[0], int(cells[1]), int(cells[2])
        except ValueError:
            raise CliError(f"{path}:{number}: expected topic,partition,offset, got {line!r}",
                           EXIT_USAGE) from None
        plan[(topic, partition)] = offset
    if not plan:
        why = f"no line for group {group!r}" if other_groups else "no offsets"
        raise CliError(f"{path}: {why}", EXIT_USAGE)
    return plan


@command("groups reset-offsets")
def run_reset(args: argparse.Namespace) -> int:
    if args.export and args.json:
        raise CliError("--export prints CSV; it does not go with --json", EXIT_USAGE)
    from_file = args.from_file is not None
    if from_file and (args.topic or args.all_topics):
        raise CliError("--from-file takes its partitions from the file: leave out --topic "
                       "and --all-topics", EXIT_USAGE)
    if not from_file and not args.topic and not args.all_topics:
        raise CliError("which partitions? give --topic TOPIC[:P,P...] or --all-topics",
                       EXIT_USAGE)
    group = args.name
    requested = read_reset_plan(args.from_file, group) if from_file else {}
    admin = GroupAdmin(args)
    description = admin.describe(group)
    if args.execute and description.state not in _INACTIVE:
        raise CliError(f"group {group!r} is {_state_name(description.state)}: offsets can only "
                       "be reset while it has no active members (stop its consumers first)")
    committed = admin.committed(group)
    if from_file:
        partitions = sorted(requested)
        for topic in sorted({t for t, _ in partitions}):
            available = admin.partitions_of(topic)
            missing = [p for t, p in partitions if t == topic and p not in available]
            if missing:
                raise CliError(f"{args.from_file}: topic {topic!r} has no partition "
                               f"{missing[0]}")
    elif args.all_topics:
        partitions = sorted(committed)  # as Kafka's tool: what the group has offsets for
    else:
        partitions = _reset_partitions(admin, args.topic)
    earliest = admin.offsets(partitions, OffsetSpec.earliest())
    latest = admin.offsets(partitions, OffsetSpec.latest())
    when_ms = None
    if args.to_datetime is not None:
        when_ms = _timestamp_ms(args.to_datetime)
    elif args.by_duration is not None:
        when_ms = int(time.time() * 1000) - args.by_duration
    if when_ms is not None:
        by_time = admin.offsets(partitions, OffsetSpec.for_timestamp(when_ms))
    plan = []
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        current = committed.get(tp, (None, ""))[0]
        if args.to_current:
            # The committed offset unchanged, even outside the log (as Kafka's tool); the
            # log end for a partition without one.
            plan.append((tp, current, current if current is not None else high))
            continue
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif when_ms is not None:
            target = by_time[tp] if by_time[tp] >= 0 else high  # nothing that late: the end
        elif from_file:
            target = requested[tp]
        else:
            target = (current if current is not None else high) + args.shift_by
        plan.append((tp, current, min(max(target, low), high)))  # kept within the log
    if args.execute and plan:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, new) for (t, p), _, new in plan])
        admin.wait(admin.client.alter_consumer_group_offsets(
            [request], request_timeout=admin.timeout))
    if args.export:
        for (t, p), _, new in plan:
            print(f"{t},{p},{new}")
    elif args.json:
        print_json({"group": group, "executed": args.execute,
                    "partitions": [{"topic": t, "partition": p, "current_offset": cur,
                                    "new_offset": new} for (t, p), cur, new in plan]})
    else:
        print_table(["topic", "partition", "current-offset", "new-offset"],
                    [[t, p, cur, new] for (t, p), cur, new in plan])
        if not args.execute:
            print("(dry run: add --execute to commit these offsets)")
    if not plan:
        print(f"odradek groups reset-offsets: no partition to reset for group {group!r}",
              file=sys.stderr)
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


# ---- delete-offsets ----------------------------------------------------------------------

@command("groups delete-offsets")
def run_delete_offsets(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args)
    group = args.name
    wanted: list[tuple[str, int]] = []
    committed: dict[tuple[str, int], tuple[int, str]] | None = None
    for spec in args.topic:
        topic, numbers = _topic_spec(spec)
        if numbers is not None:  # named partitions go as they are: the broker answers each
            wanted += [(topic, p) for p in numbers]
            continue
        try:
            wanted += [(topic, p) for p in admin.partitions_of(topic)]
        except CliError:
            # A topic deleted since may still have offsets in the group: those go.
            committed = admin.committed(group) if committed is None else committed
            mine = [tp for tp in committed if tp[0] == topic]
            if not mine:
                raise
            wanted += mine
    wanted = sorted(set(wanted))
    response = _offset_delete(args, group, wanted)
    if response.error_code != ErrorCode.NONE:
        raise CliError(f"cannot delete the offsets of group {group!r}: "
                       f"{_wire_error(response.error_code)}")
    results = {(t.name, p.partition_index): p.error_code
               for t in response.topics for p in t.partitions}
    rows = [{"topic": t, "partition": p,
             "error": None if results.get((t, p), ErrorCode.NONE) == ErrorCode.NONE
             else _wire_error(results[(t, p)])} for t, p in wanted]
    if args.json:
        print_json({"group": group, "partitions": [
            {**r, "deleted": r["error"] is None} for r in rows]})
    else:
        print_table(["topic", "partition", "status"],
                    [[r["topic"], r["partition"], r["error"] or "Successful"] for r in rows])
    refused = [r for r in rows if r["error"] is not None]
    for r in refused:
        print(f"odradek groups delete-offsets: {r['topic']}:{r['partition']}: {r['error']}",
              file=sys.stderr)
    return EXIT_FAILURE if refused else 0


def _wire_error(code: int) -> str:
    try:
        error = ErrorCode(code)
    except ValueError:
        return f"error code {code}"
    return f"{error.name}: {error.message}"


# OffsetDelete (KIP-496) is not in confluent-kafka's AdminClient (librdkafka has it, the
# Python binding does not expose it), so the command sends it itself with Odradek's own
# codec over odradek.cli.wire: FindCoordinator to a bootstrap broker, then OffsetDelete to
# the group's coordinator, with the client settings' TLS and SASL.

_COORDINATOR_RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR}
_RETRY_BACKOFF = 0.2


def _find_coordinator(config: Mapping[str, Any], group: str, deadline: float,
                      security: InterBrokerSecurity | None) -> tuple[str, int, int]:
    """(host, port, node id) of the group's coordinator, asked of the bootstrap brokers."""
    reasons = []
    for host, port in bootstrap_addresses(config):
        try:
            with BrokerSocket(host, port, timeout=max(deadline - time.monotonic(), 0.1),
                              security=security) as bootstrap:
                while True:
                    # v3 at most: v4 on asks for several keys at once, in another shape.
                    answer = cast(find_coordinator_response.FindCoordinatorResponse,
                                  bootstrap.send(find_coordinator_request.FindCoordinatorRequest(
                                      key=group, key_type=0), max_version=3))
                    if answer.error_code == ErrorCode.NONE:
                        return answer.host, answer.port, answer.node_id
                    if (answer.error_code not in _COORDINATOR_RETRY
                            or time.monotonic() + _RETRY_BACKOFF >= deadline):
                        raise CliError(f"cannot find the coordinator of group {group!r}: "
                                       f"{_wire_error(answer.error_code)}")
                    time.sleep(_RETRY_BACKOFF)  # e.g. __consumer_offsets still loading
        except WireError as e:
            reasons.append(str(e))
    raise CliError("cannot reach the cluster: " + "; ".join(reasons))


def _offset_delete(args: argparse.Namespace, group: str, partitions: list[tuple[str, int]]
                   ) -> offset_delete_response.OffsetDeleteResponse:
    config = client_config(args)
    security = broker_security(config)
    deadline = time.monotonic() + timeout_of(args)
    request = offset_delete_request.OffsetDeleteRequest(group_id=group, topics=[
        offset_delete_request.OffsetDeleteRequestTopic(name=topic, partitions=[
            offset_delete_request.OffsetDeleteRequestPartition(partition_index=p)
            for t, p in partitions if t == topic])
        for topic in sorted({t for t, _ in partitions})])
    while True:
        host, port, node_id = _find_coordinator(config, group, deadline, security)
        response = cast(offset_delete_response.OffsetDeleteResponse, send_request(
            host, port, request, timeout=max(deadline - time.monotonic(), 0.1),
            node_id=node_id, security=security))
        if (response.error_code not in _COORDINATOR_RETRY
                or time.monotonic() + _RETRY_BACKOFF >= deadline):
            return response
        time.sleep(_RETRY_BACKOFF)  # the coordinator moved or is loading: find it again
