"""`odradek topics`: create, list, describe, alter and delete topics.

Each subcommand is one or two Kafka admin requests sent through librdkafka's AdminClient:
CreateTopics, Metadata, DescribeConfigs, CreatePartitions, IncrementalAlterConfigs and
DeleteTopics. Per-topic failures are reported per topic; the exit status is non-zero
when any topic failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    AdminCommand,
    CliError,
    command,
    common_options,
    describe_error,
    error_code,
    kafka_uuid,
    key_value,
    positive_int,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.cluster.topics import INTERNAL_TOPICS

K = TypeVar("K")


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=positive_int, metavar="N",
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=positive_int, metavar="R",
                        help="replicas per partition (default: the broker's "
                        "default.replication.factor)")
    create.add_argument("--config", metavar="KEY=VALUE", action="append", default=[],
                        help="a topic config such as retention.ms=86400000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed when the topic exists already")
    create.add_argument("--validate-only", action="store_true",
                        help="ask the broker to check the request, create nothing")
    create.set_defaults(run=run_create)

    listing = actions.add_parser("list", parents=[common], help="list topics")
    listing.add_argument("--internal", action="store_true",
                         help="include internal topics such as __consumer_offsets")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[common],
                                  help="partitions, leaders, replicas, ISR and configs")
    describe.add_argument("names", metavar="NAME", nargs="*",
                          help="topics to describe (default: every topic)")
    describe.add_argument("--internal", action="store_true",
                          help="with no NAME, include internal topics")
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", parents=[common],
                               help="add partitions, set or delete topic configs")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--partitions", type=positive_int, metavar="N",
                       help="the new, larger number of partitions")
    alter.add_argument("--config", metavar="KEY=VALUE", action="append", default=[],
                       help="set a topic config (repeatable)")
    alter.add_argument("--delete-config", metavar="KEY", action="append", default=[],
                       help="remove a topic config override, back to the default (repeatable)")
    alter.add_argument("--validate-only", action="store_true",
                       help="ask the broker to check the changes, change nothing")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("names", metavar="NAME", nargs="+")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed for topics that do not exist")
    delete.set_defaults(run=run_delete)


class Admin(AdminCommand):
    def results(self, futures: Mapping[K, Future[Any]]
                ) -> dict[K, tuple[Any, KafkaException | None]]:
        """(result, None) or (None, error) for each key, once every future is done."""
        wait_all(futures.values(), self.timeout, self.client.poll, self.errors)
        out: dict[K, tuple[Any, KafkaException | None]] = {}
        for key, future in futures.items():
            try:
                out[key] = (future.result(), None)
            except KafkaException as e:
                out[key] = (None, e)
        return out

    def explain(self, error: KafkaException) -> str:
        """The error; for a timeout, with the connection error that likely caused it."""
        if error_code(error) == KafkaError._TIMED_OUT:
            return self.errors.explain(describe_error(error))
        return describe_error(error)

    def kwargs(self, operation: bool = True) -> dict[str, float]:
        """Admin call timeouts; the operation timeout lets the broker finish the change."""
        kwargs = {"request_timeout": self.timeout}
        if operation:
            kwargs["operation_timeout"] = self.timeout
        return kwargs


def fail(action: str, topic: str, error: str) -> None:
    print(f"odradek topics {action}: topic {topic}: {error}", file=sys.stderr)


def error_json(error: KafkaException) -> dict[str, Any]:
    kafka_error = error.args[0] if error.args else None
    if isinstance(kafka_error, KafkaError):
        return {"code": kafka_error.name(), "message": kafka_error.str()}
    return {"code": None, "message": str(error)}


# ---- create ------------------------------------------------------------------------------

@command("topics create")
def run_create(args: argparse.Namespace) -> int:
    configs = dict(key_value(c, "--config") for c in args.config)
    admin = Admin(args)
    new = NewTopic(args.name, num_partitions=args.partitions or -1,
                   replication_factor=args.replication_factor or -1, config=configs)
    futures = admin.client.create_topics([new], validate_only=args.validate_only,
                                         **admin.kwargs())
    _, error = admin.results(futures)[args.name]
    existed = False
    if error is not None:
        if args.if_not_exists and error_code(error) == KafkaError.TOPIC_ALREADY_EXISTS:
            existed = True
        else:
            raise CliError(f"cannot create topic {args.name}: {admin.explain(error)}")
    created = not existed and not args.validate_only
    if args.json:
        print_json({"name": args.name, "created": created, "existed": existed,
                    "validate_only": args.validate_only})
    elif existed:
        print(f"topic {args.name} exists already")
    elif args.validate_only:
        print(f"topic {args.name} is valid (validate only: nothing created)")
    else:
        print(f"created topic {args.name}")
    return 0


# ---- list --------------------------------------------------------------------------------

@command("topics list")
def run_list(args: argparse.Namespace) -> int:
    metadata = Admin(args).metadata()
    rows = []
    for name in sorted(metadata.topics):
        internal = name in INTERNAL_TOPICS
        if internal and not args.internal:
            continue
        topic = metadata.topics[name]
        partitions = topic.partitions
        first = partitions.get(0)
        rows.append({
            "name": name,
            "partitions": len(partitions),
            "replication_factor": len(first.replicas) if first is not None else None,
            "internal": internal,
            "error": topic.error.name() if topic.error is not None else None,
        })
    if args.json:
        print_json(rows)
    else:
        print_table(["topic", "partitions", "replication-factor"],
                    [[r["name"], r["partitions"], r["replication_factor"]] for r in rows])
    return 0


# ---- describe ----------------------------------------------------------------------------

@command("topics describe")
def run_describe(args: argparse.Namespace) -> int:
    admin = Admin(args)
    names: list[str] = list(dict.fromkeys(args.names))  # once each, in the order given
    if not names:
        names = sorted(n for n in admin.metadata().topics
                       if args.internal or n not in INTERNAL_TOPICS)
    if not names:
        if args.json:
            print_json([])
        return 0
    descriptions = admin.results(
        admin.client.describe_topics(TopicCollection(names), **admin.kwargs(False)))
    found = [n for n in names if descriptions[n][1] is None]
    configs: dict[str, tuple[Any, KafkaException | None]] = {}
    if found:
        resources = {ConfigResource(ResourceType.TOPIC, n): n for n in found}
        by_resource = admin.results(
            admin.client.describe_configs(list(resources), **admin.kwargs(False)))
        configs = {resources[r]: result for r, result in by_resource.items()}

    status = 0
    topics = []
    for name in names:
        description, error = descriptions[name]
        if error is not None:
            fail("describe", name, admin.explain(error))
            topics.append({"name": name, "error": error_json(error)})
            status = EXIT_FAILURE
            continue
        topic = describe_topic(description)
        entries, config_error = configs[name]
        if config_error is not None:
            # The partitions are still worth printing; the exit status tells of the rest.
            fail("describe", name, f"cannot describe its configs: "
                 f"{admin.explain(config_error)}")
            topic["configs"] = None
            topic["configs_error"] = error_json(config_error)
            status = EXIT_FAILURE
        else:
            topic["configs"] = overrides(entries)
        topics.append(topic)
    if args.json:
        print_json(topics)
    else:
        print_descriptions([t for t in topics if "error" not in t])
    return status


def describe_topic(description: Any) -> dict[str, Any]:
    partitions = []
    for p in sorted(description.partitions, key=lambda p: p.id):
        partitions.append({
            "partition": p.id,
            "leader": p.leader.id if p.leader is not None else None,
            "replicas": [n.id for n in p.replicas],
            "isr": [n.id for n in p.isr],
        })
    return {
        "name": description.name,
        "topic_id": kafka_uuid(description.topic_id),
        "internal": bool(description.is_internal),
        "partition_count": len(partitions),
        "replication_factor": len(partitions[0]["replicas"]) if partitions else None,
        "partitions": partitions,
    }


def overrides(entries: Mapping[str, Any]) -> dict[str, str | None]:
    """The topic's own settings: what kafka-topics --describe shows as Configs."""
    return {name: entry.value for name, entry in sorted(entries.items())
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def print_descriptions(topics: list[dict[str, Any]]) -> None:
    for i, topic in enumerate(topics):
        if i:
            print()
        print(f"Topic: {topic['name']}  TopicId: {topic['topic_id']}  "
              f"PartitionCount: {topic['partition_count']}  "
              f"ReplicationFactor: {topic['replication_factor']}")
        configs = topic["configs"]
        if configs is None:
            shown = "(unavailable)"
        else:
            shown = ", ".join(f"{k}={'(sensitive)' if v is None else v}"
                              for k, v in configs.items()) or "(none)"
        print(f"Configs: {shown}")
        print_table(["partition", "leader", "replicas", "isr"],
                    [[p["partition"], p["leader"], p["replicas"], p["isr"]]
                     for p in topic["partitions"]])


# ---- alter -------------------------------------------------------------------------------

@command("topics alter")
def run_alter(args: argparse.Namespace) -> int:
    sets = dict(key_value(c, "--config") for c in args.config)
    deletes = list(dict.fromkeys(args.delete_config))
    if both := sorted(set(sets) & set(deletes)):
        raise CliError(f"cannot both set and delete {', '.join(both)}", EXIT_USAGE)
    if args.partitions is None and not sets and not deletes:
        raise CliError("nothing to change: give --partitions, --config or --delete-config",
                       EXIT_USAGE)
    admin = Admin(args)
    if args.partitions is not None:
        futures = admin.client.create_partitions(
            [NewPartitions(args.name, args.partitions)], validate_only=args.validate_only,
            **admin.kwargs())
        _, error = admin.results(futures)[args.name]
        if error is not None:
            raise CliError(f"cannot change the partitions of topic {args.name}: "
                           f"{admin.explain(error)}")
    if sets or deletes:
        changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in sets.items()]
        changes += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in deletes]
        resource = ConfigResource(ResourceType.TOPIC, args.name, incremental_configs=changes)
        altered = admin.client.incremental_alter_configs(
            [resource], validate_only=args.validate_only, **admin.kwargs(False))
        for _, error in admin.results(altered).values():
            if error is not None:
                done = (f" (the partitions were changed to {args.partitions})"
                        if args.partitions is not None and not args.validate_only else "")
                raise CliError(f"cannot change the configs of topic {args.name}: "
                               f"{admin.explain(error)}{done}")
    if args.json:
        print_json({"name": args.name, "partitions": args.partitions, "set": sets,
                    "deleted": deletes, "validate_only": args.validate_only})
    else:
        verb = "would change" if args.validate_only else "changed"
        what = []
        if args.partitions is not None:
            what.append(f"partitions to {args.partitions}")
        what += [f"{k}={v}" for k, v in sets.items()]
        what += [f"{k} back to its default" for k in deletes]
        print(f"{verb} topic {args.name}: {', '.join(what)}")
    return 0


# ---- delete ------------------------------------------------------------------------------

@command("topics delete")
def run_delete(args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.names))
    admin = Admin(args)
    results = admin.results(admin.client.delete_topics(names, **admin.kwargs()))
    status = 0
    rows = []
    for name in names:
        _, error = results[name]
        row: dict[str, Any] = {"name": name, "deleted": error is None}
        if error is not None:
            if args.if_exists and error_code(error) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                row["existed"] = False
            else:
                fail("delete", name, admin.explain(error))
                row["error"] = error_json(error)
                status = EXIT_FAILURE
        rows.append(row)
        if not args.json and error is None:
            print(f"deleted topic {name}")
        elif not args.json and "existed" in row:
            print(f"topic {name} does not exist")
    if args.json:
        print_json(rows)
    return status
