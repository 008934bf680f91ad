"""`odradek topics`: create, list, describe, alter and delete topics, and their offsets.

Each subcommand is one or two Kafka admin requests sent through librdkafka's AdminClient:
CreateTopics, Metadata, DescribeConfigs, CreatePartitions, IncrementalAlterConfigs,
DeleteTopics and ListOffsets. `offsets` also asks each partition leader for the size of
the partition's log with DescribeLogDirs, which librdkafka lacks: that one goes over the
CLI's own socket (wire.py). Per-topic failures are reported per topic; the exit status is
non-zero when any topic failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Any, TypeVar, cast

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

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
    kafka_uuid,
    key_value,
    positive_int,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.wire import WireError, broker_security, send_request
from odradek.cluster.topics import INTERNAL_TOPICS
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import describe_log_dirs_request as log_dirs_request
from odradek.protocol.messages.describe_log_dirs_response import DescribeLogDirsResponse

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
    describe.add_argument("--all", "--all-configs", dest="all_configs", action="store_true",
                          help="every config of the topic with its value, source and flags "
                          "(kafka-configs --describe --all), not only its own settings")
    describe.set_defaults(run=run_describe)

    offsets = actions.add_parser(
        "offsets", parents=[common],
        help="per partition: log start offset, high watermark, size on disk, and the "
        "offset for a time (kafka-get-offsets.sh)")
    offsets.add_argument("names", metavar="TOPIC", nargs="+")
    offsets.add_argument("--partitions", metavar="P[,P...]", type=partition_list,
                         help="only these partitions (default: all)")
    offsets.add_argument("--time", metavar="TIME", type=offset_time,
                         help="also the offset for a time, as kafka-get-offsets --time: epoch "
                         "ms or ISO 8601 (the first record at or after it), earliest (-2), "
                         "latest (-1) or max-timestamp (-3: the record with the largest "
                         "timestamp)")
    offsets.set_defaults(run=run_offsets)

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
            if args.all_configs:
                topic["all_configs"] = [config_json(e) for _, e in sorted(entries.items())]
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
        if topic.get("all_configs") is not None:
            print()
            print(f"All configs for topic {topic['name']}:")
            print_config_table(topic["all_configs"])


# ---- configs as DescribeConfigs gives them (also for `odradek configs`) -------------------

# Kafka's ConfigEntry.ConfigSource, by the number DescribeConfigs sends.
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}


def source_name(source: Any) -> str:
    number = int(getattr(source, "value", source))  # librdkafka's enum, or the number
    return CONFIG_SOURCES.get(number, f"UNKNOWN({number})")


def config_json(entry: Any) -> dict[str, Any]:
    """A librdkafka ConfigEntry as the CLI shows it; a sensitive value is null.

    Without its synonyms: confluent-kafka keeps them in a dict by name, so of a broker
    config set at two levels (log.retention.ms on the broker and as the cluster default)
    only one would show."""
    return {
        "name": entry.name,
        "value": None if entry.is_sensitive else entry.value,
        "source": source_name(entry.source),
        "read_only": bool(entry.is_read_only),
        "sensitive": bool(entry.is_sensitive),
    }


def shown_value(config: Mapping[str, Any]) -> str | None:
    return "(sensitive)" if config["sensitive"] else config["value"]


def print_config_table(configs: list[dict[str, Any]]) -> None:
    if not configs:
        print("(none)")
        return
    print_table(["name", "value", "source", "read-only", "sensitive"],
                [[c["name"], shown_value(c), c["source"], str(c["read_only"]).lower(),
                  str(c["sensitive"]).lower()] for c in configs])


# ---- offsets -----------------------------------------------------------------------------

# kafka-get-offsets --time: the names and the numbers Kafka's ListOffsets gives them.
_TIME_SPECS = {"earliest": -2, "latest": -1, "max-timestamp": -3}


def partition_list(text: str) -> list[int]:
    try:
        partitions = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        partitions = []
    if not partitions or min(partitions) < 0:
        raise argparse.ArgumentTypeError(f"expected partition numbers such as 0,1,2, "
                                         f"not {text!r}")
    return partitions


def offset_time(text: str) -> tuple[str, int]:
    """(what the user asked, the ListOffsets timestamp): -1 latest, -2 earliest,
    -3 max-timestamp, else epoch milliseconds."""
    word = text.strip().lower()
    if word in _TIME_SPECS:
        return word, _TIME_SPECS[word]
    if word.lstrip("-").isdigit():
        ms = int(word)
        for name, number in _TIME_SPECS.items():
            if ms == number:
                return name, number
        if ms < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: a negative time is -1 (latest), "
                                             "-2 (earliest) or -3 (max-timestamp)")
        return word, ms
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not epoch milliseconds, an ISO 8601 time (2024-05-01T12:00:00Z), "
            "earliest, latest or max-timestamp") from None
    return text.strip(), round(moment.timestamp() * 1000)


def offset_spec(number: int) -> OffsetSpec:
    if number == -1:
        return OffsetSpec.latest()
    if number == -2:
        return OffsetSpec.earliest()
    if number == -3:
        return OffsetSpec.max_timestamp()
    return OffsetSpec.for_timestamp(number)


@command("topics offsets")
def run_offsets(args: argparse.Namespace) -> int:
    admin = Admin(args)
    names: list[str] = list(dict.fromkeys(args.names))
    descriptions = admin.results(
        admin.client.describe_topics(TopicCollection(names), **admin.kwargs(False)))
    status = 0
    rows: list[dict[str, Any]] = []
    wanted: dict[tuple[str, int], dict[str, Any]] = {}  # the rows to fill in
    leaders: dict[tuple[str, int], Any] = {}  # their leaders (librdkafka Nodes)
    for name in names:
        description, error = descriptions[name]
        if error is not None:
            fail("offsets", name, admin.explain(error))
            rows.append({"topic": name, "error": error_json(error)})
            status = EXIT_FAILURE
            continue
        by_id = {p.id: p for p in description.partitions}
        for p in args.partitions or sorted(by_id):
            if p not in by_id:
                fail("offsets", name, f"no partition {p} (it has {len(by_id)})")
                rows.append({"topic": name, "partition": p, "error": {
                    "code": "UNKNOWN_TOPIC_OR_PART", "message": f"no partition {p}"}})
                status = EXIT_FAILURE
                continue
            row = {"topic": name, "partition": p,
                   "leader": by_id[p].leader.id if by_id[p].leader is not None else None,
                   "log_start_offset": None, "high_watermark": None, "size": None}
            if args.time is not None:
                row.update(offset=None, timestamp=None)
            rows.append(row)
            wanted[(name, p)] = row
            if by_id[p].leader is not None:
                leaders[(name, p)] = by_id[p].leader

    specs = [("log_start_offset", OffsetSpec.earliest()), ("high_watermark", OffsetSpec.latest())]
    if args.time is not None:
        specs.append(("offset", offset_spec(args.time[1])))
    failed: dict[tuple[str, int], str] = {}
    for field, spec in specs if wanted else []:
        results = admin.results(admin.client.list_offsets(
            {TopicPartition(t, p): spec for t, p in wanted}, **admin.kwargs(False)))
        for tp, (info, error) in results.items():
            key = (tp.topic, tp.partition)
            if error is not None:
                failed.setdefault(key, admin.explain(error))
                wanted[key]["error"] = error_json(error)
                continue
            wanted[key][field] = info.offset if info.offset >= 0 else None
            if field == "offset":
                wanted[key]["timestamp"] = info.timestamp if info.timestamp >= 0 else None
    for (topic, p), message in failed.items():
        fail("offsets", topic, f"partition {p}: {message}")
        status = EXIT_FAILURE
    if leaders and not partition_sizes(admin, args, leaders, wanted):
        status = EXIT_FAILURE

    if args.json:
        print_json(rows)
    else:
        headers = ["topic", "partition", "log-start-offset", "high-watermark", "size"]
        if args.time is not None:
            headers += ["offset", "timestamp"]
        print_table(headers, [[r.get(h.replace("-", "_")) for h in headers]
                              for r in rows if "error" not in r])
    return status


def partition_sizes(admin: Admin, args: argparse.Namespace,
                    leaders: Mapping[tuple[str, int], Any],
                    rows: Mapping[tuple[str, int], dict[str, Any]]) -> bool:
    """Fills in each partition's size: its leader's log, from the leader's DescribeLogDirs.
    False when some leader could not tell (said on stderr)."""
    try:
        security = broker_security(client_config(args))
    except CliError as e:
        print(f"odradek topics offsets: no sizes: {e}", file=sys.stderr)
        return True  # not a failure: a limit of this command, said once
    by_broker: dict[int, list[tuple[str, int]]] = {}
    nodes = {}
    for tp, node in leaders.items():
        by_broker.setdefault(node.id, []).append(tp)
        nodes[node.id] = node
    ok = True
    for broker_id, partitions in sorted(by_broker.items()):
        node = nodes[broker_id]
        topics: dict[str, list[int]] = {}
        for t, p in sorted(partitions):
            topics.setdefault(t, []).append(p)
        request = log_dirs_request.DescribeLogDirsRequest(topics=[
            log_dirs_request.DescribableLogDirTopic(topic=t, partitions=ps)
            for t, ps in topics.items()])
        try:
            response = cast(DescribeLogDirsResponse, send_request(
                node.host, node.port, request, timeout=admin.timeout, node_id=broker_id,
                security=security))
        except WireError as e:
            print(f"odradek topics offsets: no sizes: {e}", file=sys.stderr)
            ok = False
            continue
        if response.error_code != ErrorCode.NONE:
            print(f"odradek topics offsets: no sizes from broker {broker_id}: "
                  f"{ErrorCode(response.error_code).name}", file=sys.stderr)
            ok = False
            continue
        for result in response.results:
            if result.error_code != ErrorCode.NONE:
                continue  # an offline dir holds no log this broker serves
            for t in result.topics:
                for p in t.partitions:
                    row = rows.get((t.name, p.partition_index))
                    if row is not None and not p.is_future_key:
                        row["size"] = (row["size"] or 0) + p.partition_size
    return ok


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
