"""`odradek partitions`: leader elections and replica reassignments, as operators run them
with Kafka's kafka-leader-election.sh and kafka-reassign-partitions.sh.

`elect-leaders` goes through librdkafka's AdminClient (ElectLeaders). librdkafka has no
reassignment API, so `reassign` and `reassignments` send AlterPartitionReassignments and
ListPartitionReassignments (KIP-455) to the controller themselves, over the broker's own
inter-broker client; the controller is found through librdkafka's Metadata.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any, cast

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient
from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    AdminCommand,
    CliError,
    command,
    common_options,
    describe_error,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError as ProtocolKafkaError
from odradek.protocol.messages import (
    alter_partition_reassignments_request as alter_request,
)
from odradek.protocol.messages import (
    list_partition_reassignments_request as list_request,
)
from odradek.protocol.messages.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
)
from odradek.protocol.messages.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
)


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    partitions = commands.add_parser(
        "partitions", help="elect leaders, reassign replicas, list ongoing reassignments")
    actions = partitions.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    elect = actions.add_parser(
        "elect-leaders", parents=[common],
        help="make the preferred replicas lead again, or elect unclean leaders")
    elect.add_argument("partitions", metavar="TOPIC:PARTITION", nargs="*",
                       type=topic_partition, help="partitions to elect for (default: all)")
    elect.add_argument("--type", choices=["preferred", "unclean"], default="preferred",
                       help="preferred: the first replica, if in sync; unclean: any live "
                       "replica for partitions without a leader, losing what it lacks")
    elect.set_defaults(run=run_elect_leaders)

    reassign = actions.add_parser(
        "reassign", parents=[common], help="move partitions to other replicas")
    reassign.add_argument("moves", metavar="TOPIC:PARTITION=B1,B2,...", nargs="*",
                          type=move, help="a partition and its new replicas, preferred first")
    reassign.add_argument("--plan", metavar="FILE", type=argparse.FileType("r"),
                          help="a reassignment plan in kafka-reassign-partitions.sh's JSON "
                          "(\"partitions\": [{\"topic\", \"partition\", \"replicas\"}]), or "
                          "- for stdin")
    reassign.add_argument("--cancel", metavar="TOPIC:PARTITION", action="append", default=[],
                          type=topic_partition, help="cancel a partition's reassignment "
                          "(repeatable)")
    reassign.set_defaults(run=run_reassign)

    ongoing = actions.add_parser("reassignments", parents=[common],
                                 help="list the reassignments in progress")
    ongoing.set_defaults(run=run_reassignments)


def topic_partition(text: str) -> tuple[str, int]:
    topic, sep, partition = text.rpartition(":")
    if not sep or not topic or not partition.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION, not {text!r}")
    return topic, int(partition)


def move(text: str) -> tuple[tuple[str, int], list[int]]:
    where, sep, replicas = text.partition("=")
    try:
        brokers = [int(b) for b in replicas.split(",")]
    except ValueError:
        brokers = []
    if not sep or not brokers:
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION=B1,B2,..., not {text!r}")
    return topic_partition(where), brokers


# ---- elect-leaders ----------------------------------------------------------------------

@command("partitions elect-leaders")
def run_elect_leaders(args: argparse.Namespace) -> int:
    admin = AdminCommand(args)
    election = ElectionType.PREFERRED if args.type == "preferred" else ElectionType.UNCLEAN
    wanted = [TopicPartition(t, p) for t, p in args.partitions] or None
    future = admin.client.elect_leaders(election, wanted)
    wait_all([future], admin.timeout, admin.client.poll, admin.errors)
    try:
        results = future.result()
    except KafkaException as e:
        raise CliError(admin.errors.explain(f"election failed: {describe_error(e)}")) from e
    rows = []
    status = 0
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if error is None:
            outcome = "elected"
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            outcome = "not needed"
        else:
            outcome = describe_error(error)
            status = EXIT_FAILURE
        rows.append({"topic": tp.topic, "partition": tp.partition, "result": outcome})
    if args.json:
        print_json(rows)
    else:
        print_table(["TOPIC", "PARTITION", "RESULT"],
                    [[r["topic"], r["partition"], r["result"]] for r in rows])
    return status


# ---- reassign, reassignments ------------------------------------------------------------

def plan_moves(plan: Any) -> dict[tuple[str, int], list[int] | None]:
    """The moves of a kafka-reassign-partitions.sh plan."""
    try:
        data = json.load(plan)
        return {(str(p["topic"]), int(p["partition"])): [int(b) for b in p["replicas"]]
                for p in data["partitions"]}
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(f"{plan.name}: not a reassignment plan: {e}", EXIT_USAGE) from e


@command("partitions reassign")
def run_reassign(args: argparse.Namespace) -> int:
    moves: dict[tuple[str, int], list[int] | None] = dict(args.moves)
    if args.plan is not None:
        moves.update(plan_moves(args.plan))
    moves.update((tp, None) for tp in args.cancel)
    if not moves:
        raise CliError("nothing to do: give TOPIC:PARTITION=B1,B2,..., --plan or --cancel",
                       EXIT_USAGE)
    request = alter_request.AlterPartitionReassignmentsRequest(
        timeout_ms=int(AdminCommand(args).timeout * 1000), topics=[
            alter_request.ReassignableTopic(name=topic, partitions=[
                alter_request.ReassignablePartition(partition_index=p, replicas=replicas)
                for (t, p), replicas in sorted(moves.items()) if t == topic])
            for topic in sorted({t for t, _ in moves})])
    response = cast(AlterPartitionReassignmentsResponse, to_controller(args, request))
    top_level_error(response.error_code, response.error_message)
    rows = []
    status = 0
    for t in response.responses:
        for p in t.partitions:
            ok = p.error_code == ErrorCode.NONE
            status = status if ok else EXIT_FAILURE
            target = moves.get((t.name, p.partition_index))
            rows.append({"topic": t.name, "partition": p.partition_index,
                         "replicas": target,
                         "result": ("cancelled" if target is None else "started") if ok
                         else f"{ErrorCode(p.error_code).name}: {p.error_message or ''}"})
    if args.json:
        print_json(rows)
    else:
        print_table(["TOPIC", "PARTITION", "TARGET", "RESULT"],
                    [[r["topic"], r["partition"],
                      "-" if r["replicas"] is None else ",".join(map(str, r["replicas"])),
                      r["result"]] for r in rows])
    return status


@command("partitions reassignments")
def run_reassignments(args: argparse.Namespace) -> int:
    response = cast(ListPartitionReassignmentsResponse, to_controller(
        args, list_request.ListPartitionReassignmentsRequest(topics=None)))
    top_level_error(response.error_code, response.error_message)
    rows = [{"topic": t.name, "partition": p.partition_index, "replicas": p.replicas,
             "adding": p.adding_replicas, "removing": p.removing_replicas}
            for t in response.topics for p in t.partitions]
    if args.json:
        print_json(rows)
    elif not rows:
        print("no reassignment in progress")
    else:
        print_table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                    [[r["topic"], r["partition"]] + [",".join(map(str, r[k])) or "-"
                                                     for k in ("replicas", "adding",
                                                               "removing")]
                     for r in rows])
    return 0


def top_level_error(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise CliError(f"{ErrorCode(code).name}: {message or 'refused by the controller'}")


def to_controller(args: argparse.Namespace, request: Any) -> Any:
    """Sends a request to the active controller, found through Metadata."""
    admin = AdminCommand(args)
    metadata = admin.metadata()
    controller = metadata.brokers.get(metadata.controller_id)
    if controller is None:
        raise CliError("the cluster has no controller right now; try again")

    async def send() -> Any:
        client = InterBrokerClient({controller.id: (controller.host, controller.port)},
                                   client_id="odradek-cli",
                                   request_timeout_ms=int(admin.timeout * 1000))
        try:
            return await client.send(controller.id, request)
        finally:
            await client.close()

    try:
        return asyncio.run(send())
    except (DisconnectedError, ProtocolKafkaError) as e:  # unreachable, or no such API
        raise CliError(f"controller {controller.id} at {controller.host}:{controller.port}: "
                       f"{e}") from e
