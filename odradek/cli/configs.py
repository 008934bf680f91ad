"""`odradek configs`: describe and alter topic and broker configs, as Kafka's
kafka-configs.sh (and `rpk cluster config`) do.

`describe` is DescribeConfigs and `alter` IncrementalAlterConfigs, through librdkafka's
AdminClient. The cluster-wide dynamic broker default (`--entity-default`, which Kafka
names with the empty resource name) is one thing librdkafka refuses to name, so its
requests go to a broker over the CLI's own socket (wire.py).

Kafka's rules: without `--all`, `describe` shows what is set at the entity's own level
(DYNAMIC_TOPIC_CONFIG for a topic, DYNAMIC_BROKER_CONFIG for a broker,
DYNAMIC_DEFAULT_BROKER_CONFIG for the default); without a name it describes every topic,
or every broker and the default. `alter` refuses to delete a config that is not set at
that level, as kafka-configs does; what the broker refuses (an unknown name, a read-only
or static broker config, a bad value) is its error, word for word. `alter` prints each
config's value before and after.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    client_config,
    command,
    common_options,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.topics import (
    Admin,
    config_json,
    print_config_table,
    shown_value,
    source_name,
)
from odradek.cli.wire import broker_security, error_name, send_request
from odradek.protocol.messages import describe_configs_request as describe_request
from odradek.protocol.messages import incremental_alter_configs_request as alter_request
from odradek.protocol.messages.describe_configs_response import DescribeConfigsResponse
from odradek.protocol.messages.incremental_alter_configs_response import (
    IncrementalAlterConfigsResponse,
)

ENTITY_TYPES = {"topics": ResourceType.TOPIC, "brokers": ResourceType.BROKER}
# What a describe without --all shows: the configs set at the entity's own level.
_OWN_LEVEL = {"topics": "DYNAMIC_TOPIC_CONFIG", "brokers": "DYNAMIC_BROKER_CONFIG",
              "default": "DYNAMIC_DEFAULT_BROKER_CONFIG"}
_RESOURCE_BROKER = 4  # ConfigResource.Type.BROKER on the wire
_OP_SET, _OP_DELETE = 0, 1


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    configs = commands.add_parser(
        "configs", help="describe and alter topic and broker configs (kafka-configs.sh)")
    actions = configs.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()
    entity = argparse.ArgumentParser(add_help=False)
    group = entity.add_argument_group("entity")
    group.add_argument("--entity-type", required=True, type=entity_type,
                       metavar="topics|brokers", help="the kind of entity")
    which = group.add_mutually_exclusive_group()
    which.add_argument("--entity-name", metavar="NAME",
                       help="a topic's name or a broker's id")
    which.add_argument("--entity-default", action="store_true",
                       help="the cluster-wide dynamic default of every broker")

    describe = actions.add_parser(
        "describe", parents=[common, entity],
        help="the configs set on an entity, or with --all every config and its source")
    describe.add_argument("--all", action="store_true",
                          help="every config, with its value, source, read-only and "
                          "sensitive flags")
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", parents=[common, entity],
                               help="set or delete configs (IncrementalAlterConfigs)")
    alter.add_argument("--add-config", metavar="K=V[,K=V...]", action="append", default=[],
                       help="configs to set; a list value in brackets: k=[a,b] (repeatable)")
    alter.add_argument("--delete-config", metavar="K[,K...]", action="append", default=[],
                       help="configs to delete, back to the next level's value (repeatable)")
    alter.set_defaults(run=run_alter)


def entity_type(text: str) -> str:
    kind = {"topic": "topics", "broker": "brokers"}.get(text, text)
    if kind not in ENTITY_TYPES:
        raise argparse.ArgumentTypeError(f"expected topics or brokers, not {text!r}")
    return kind


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' --add-config: k=v pairs split at commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"[": 1, "]": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--add-config wants K=V[,K=V...], not {item!r}", EXIT_USAGE)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


class Entity:
    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name  # "" for the cluster-wide broker default

    @property
    def default(self) -> bool:
        return self.name == ""

    @property
    def level(self) -> str:
        return _OWN_LEVEL["default" if self.default else self.kind]

    def __str__(self) -> str:
        if self.default:
            return "the cluster-wide broker default"
        return f"{self.kind[:-1]} {self.name}"

    def json(self) -> dict[str, Any]:
        return {"entity_type": self.kind, "entity_name": None if self.default else self.name,
                "entity_default": self.default}


def check_entity(args: argparse.Namespace) -> None:
    if args.entity_default and args.entity_type == "topics":
        raise CliError("--entity-default is for brokers: a topic's defaults are the "
                       "brokers' configs (configs alter --entity-type brokers "
                       "--entity-default)", EXIT_USAGE)
    if args.entity_name is not None and args.entity_type == "brokers" and not (
            args.entity_name.isdigit()):
        raise CliError(f"the entity name for brokers must be a broker id, not "
                       f"{args.entity_name!r}", EXIT_USAGE)


class ConfigAdmin(Admin):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.args = args
        self.cluster = self.metadata()  # first: an unreachable cluster is said at once

    def entities(self, args: argparse.Namespace) -> list[Entity]:
        if args.entity_default:
            return [Entity("brokers", "")]
        if args.entity_name is not None:
            entity = Entity(args.entity_type, args.entity_name)
            if entity.kind == "brokers" and int(entity.name) not in self.cluster.brokers:
                raise CliError(f"no broker {entity.name} in the cluster (brokers: "
                               f"{', '.join(map(str, sorted(self.cluster.brokers)))})")
            return [entity]
        if args.entity_type == "topics":
            return [Entity("topics", t) for t in sorted(self.cluster.topics)]
        return [Entity("brokers", str(b)) for b in sorted(self.cluster.brokers)] + [
            Entity("brokers", "")]

    def any_broker(self) -> Any:
        """A broker for the requests librdkafka cannot send: the cluster-wide default."""
        if not self.cluster.brokers:
            raise CliError("the cluster lists no broker")
        return self.cluster.brokers[min(self.cluster.brokers)]

    # ---- describe ----------------------------------------------------------------------

    def describe(self, entities: list[Entity]) -> dict[str, tuple[list[dict[str, Any]] | None,
                                                                  str | None]]:
        """For each entity (by name): its configs, or why they could not be read."""
        out: dict[str, tuple[list[dict[str, Any]] | None, str | None]] = {}
        named = {ConfigResource(ENTITY_TYPES[e.kind], e.name): e.name
                 for e in entities if not e.default}
        if named:
            # librdkafka sends a broker's resource to that broker, and so takes only one
            # broker resource per call; topics go together.
            topics = [r for r in named if r.restype == ResourceType.TOPIC]
            calls = [topics] if topics else []
            calls += [[r] for r in named if r.restype != ResourceType.TOPIC]
            futures = {}
            for resources in calls:
                futures.update(self.client.describe_configs(resources, **self.kwargs(False)))
            results = self.results(futures)
            for resource, (entries, error) in results.items():
                if error is not None:
                    out[named[resource]] = (None, self.explain(error))
                else:
                    out[named[resource]] = (
                        [config_json(e) for _, e in sorted(entries.items())], None)
        if any(e.default for e in entities):
            out[""] = self.describe_default()
        return out

    def describe_default(self) -> tuple[list[dict[str, Any]] | None, str | None]:
        broker = self.any_broker()
        request = describe_request.DescribeConfigsRequest(resources=[
            describe_request.DescribeConfigsResource(
                resource_type=_RESOURCE_BROKER, resource_name="", configuration_keys=None)],
            include_synonyms=False)
        response = cast(DescribeConfigsResponse, send_request(
            broker.host, broker.port, request, timeout=self.timeout, node_id=broker.id,
            security=broker_security(client_config(self.args))))
        [result] = response.results
        if result.error_code:
            return None, f"{error_name(result.error_code)}: {result.error_message or ''}"
        return [{
            "name": c.name,
            "value": None if c.is_sensitive else c.value,
            "source": source_name(c.config_source),
            "read_only": c.read_only,
            "sensitive": c.is_sensitive,
        } for c in sorted(result.configs, key=lambda c: c.name)], None

    # ---- alter -------------------------------------------------------------------------

    def alter(self, entity: Entity, sets: dict[str, str], deletes: list[str]) -> None:
        if entity.default:
            return self.alter_default(sets, deletes)
        changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in sets.items()]
        changes += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in deletes]
        resource = ConfigResource(ENTITY_TYPES[entity.kind], entity.name,
                                  incremental_configs=changes)
        results = self.results(self.client.incremental_alter_configs([resource],
                                                                     **self.kwargs(False)))
        for _, error in results.values():
            if error is not None:
                raise CliError(f"cannot alter the configs of {entity}: {self.explain(error)}")
        return None

    def alter_default(self, sets: dict[str, str], deletes: list[str]) -> None:
        broker = self.any_broker()
        request = alter_request.IncrementalAlterConfigsRequest(resources=[
            alter_request.AlterConfigsResource(
                resource_type=_RESOURCE_BROKER, resource_name="",
                configs=[alter_request.AlterableConfig(name=k, config_operation=_OP_SET,
                                                       value=v) for k, v in sets.items()]
                + [alter_request.AlterableConfig(name=k, config_operation=_OP_DELETE,
                                                 value=None) for k in deletes])])
        response = cast(IncrementalAlterConfigsResponse, send_request(
            broker.host, broker.port, request, timeout=self.timeout, node_id=broker.id,
            security=broker_security(client_config(self.args))))
        for r in response.responses:
            if r.error_code:
                raise CliError(f"cannot alter the configs of the cluster-wide broker default: "
                               f"{error_name(r.error_code)}: {r.error_message or ''}")


# ---- describe ----------------------------------------------------------------------------

@command("configs describe")
def run_describe(args: argparse.Namespace) -> int:
    check_entity(args)
    admin = ConfigAdmin(args)
    entities = admin.entities(args)
    described = admin.describe(entities)
    status = 0
    out = []
    for entity in entities:
        configs, error = described[entity.name]
        item = entity.json()
        if error is not None:
            print(f"odradek configs describe: {entity}: {error}", file=sys.stderr)
            item["error"] = error
            status = EXIT_FAILURE
        else:
            assert configs is not None
            item["configs"] = configs if args.all else [
                c for c in configs if c["source"] == entity.level]
        out.append(item)
    if args.json:
        print_json(out)
        return status
    first = True
    for entity, item in zip(entities, out, strict=True):
        if "configs" not in item:
            continue
        if not first:
            print()
        first = False
        if entity.default:
            print("Default configs for brokers in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {entity} are:")
        print_config_table(item["configs"])
    return status


# ---- alter -------------------------------------------------------------------------------

@command("configs alter")
def run_alter(args: argparse.Namespace) -> int:
    check_entity(args)
    if args.entity_name is None and not args.entity_default:
        raise CliError("alter needs --entity-name or --entity-default", EXIT_USAGE)
    sets: dict[str, str] = {}
    for text in args.add_config:
        sets.update(parse_add_config(text))
    deletes = list(dict.fromkeys(k.strip() for text in args.delete_config
                                 for k in text.split(",") if k.strip()))
    if not sets and not deletes:
        raise CliError("nothing to change: give --add-config or --delete-config", EXIT_USAGE)
    if both := sorted(set(sets) & set(deletes)):
        raise CliError(f"cannot both add and delete {', '.join(both)}", EXIT_USAGE)

    admin = ConfigAdmin(args)
    [entity] = admin.entities(args)
    before = current(admin, entity)
    # As kafka-configs: deleting a config not set at this level is a mistake, not a no-op.
    if missing := [k for k in deletes if before.get(k, {}).get("source") != entity.level]:
        raise CliError(f"invalid config(s) to delete: {', '.join(missing)} (not set on "
                       f"{entity})")
    try:
        admin.alter(entity, sets, deletes)
    except CliError as e:
        if read_only := [k for k in sets if before.get(k, {}).get("read_only")]:
            raise CliError(f"{e} (read-only: {', '.join(read_only)}, which only "
                           "server.properties and a restart change)") from e
        raise
    after = current(admin, entity)

    changes = []
    for name in [*sets, *deletes]:
        old, new = before.get(name), after.get(name)
        changes.append({
            "name": name,
            "old_value": None if old is None else old["value"],
            "old_source": None if old is None else old["source"],
            "new_value": None if new is None else new["value"],
            "new_source": None if new is None else new["source"],
            "sensitive": any(c is not None and c["sensitive"] for c in (old, new)),
        })
    if args.json:
        print_json({**entity.json(), "set": sets, "deleted": deletes, "changes": changes})
        return 0
    if entity.default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {entity}.")

    def value(c: dict[str, Any], which: str) -> str | None:
        if c[f"{which}_source"] is None:
            return None
        shown = shown_value({"value": c[f"{which}_value"], "sensitive": c["sensitive"]})
        return f"{shown} ({c[f'{which}_source']})"

    print_table(["name", "before", "after"],
                [[c["name"], value(c, "old"), value(c, "new")] for c in changes])
    return 0


def current(admin: ConfigAdmin, entity: Entity) -> dict[str, dict[str, Any]]:
    configs, error = admin.describe([entity])[entity.name]
    if error is not None:
        raise CliError(f"cannot describe {entity}: {error}")
    assert configs is not None
    return {c["name"]: c for c in configs}
