"""`odradek acls`: add, list and remove Kafka's ACLs, as kafka-acls.sh does.

The options are kafka-acls.sh's (`--allow-principal`, `--operation`, `--topic`,
`--resource-pattern-type`, `--producer`, `--consumer`...), with its defaults (operation
All, host `*`, pattern type LITERAL) and its expansion of `--producer` and `--consumer`
into ACL sets; the action is a subcommand (`add`, `list`, `remove`) rather than a flag.
The requests are CreateAcls, DescribeAcls and DeleteAcls through librdkafka's AdminClient.

librdkafka drops DescribeAcls' top-level error (a user who may not describe ACLs gets an
empty list, not CLUSTER_AUTHORIZATION_FAILED). So when a listing comes back empty, the
command asks DescribeCluster for the caller's authorized operations on the cluster
(KIP-430) and reports the refusal itself when DESCRIBE is not among them.

`remove` removes nothing without `--force`: it lists what would be removed and exits 1
(kafka-acls.sh asks y/n on its terminal instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    command,
    common_options,
    describe_error,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.topics import Admin

K = TypeVar("K")

CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as Kafka names it
WILDCARD_HOST = "*"

# Kafka's names for the operations an ACL may name (SecurityUtils.operationName).
OPERATION_NAMES = {
    AclOperation.READ: "Read", AclOperation.WRITE: "Write", AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete", AclOperation.ALTER: "Alter",
    AclOperation.DESCRIBE: "Describe", AclOperation.CLUSTER_ACTION: "ClusterAction",
    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs", AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.ALL: "All",
}
_OPERATIONS = {name.lower(): op for op, name in OPERATION_NAMES.items()}

# Kafka's AclEntry.supportedOperations, by resource type (ALL goes with every type).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: [AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS],
    ResourceType.GROUP: [AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE],
    ResourceType.BROKER: [AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                          AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                          AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                          AclOperation.DESCRIBE],
    ResourceType.TRANSACTIONAL_ID: [AclOperation.DESCRIBE, AclOperation.WRITE],
}

_PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL,
                  "prefixed": ResourcePatternType.PREFIXED,
                  "match": ResourcePatternType.MATCH, "any": ResourcePatternType.ANY}

# kafka-acls.sh's convenience options (AclCommand's getProducer/ConsumerResourceFilterToAcls)
PRODUCER_TOPIC_OPERATIONS = [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
PRODUCER_TRANSACTIONAL_ID_OPERATIONS = [AclOperation.WRITE, AclOperation.DESCRIBE]
CONSUMER_TOPIC_OPERATIONS = [AclOperation.READ, AclOperation.DESCRIBE]
CONSUMER_GROUP_OPERATIONS = [AclOperation.READ]

# (resource type, name, pattern type): a resource pattern, or a filter of them
Resource = tuple[ResourceType, str | None, ResourcePatternType]
# (principal, host, operation, permission): an access control entry
Entry = tuple[str, str, AclOperation, AclPermissionType]


# ---- options --------------------------------------------------------------------------------

def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    acls = commands.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh)")
    actions = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    resources = argparse.ArgumentParser(add_help=False)
    group = resources.add_argument_group("resources")
    group.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                       help="a topic (repeatable); with a pattern type of prefixed, a prefix")
    group.add_argument("--group", action="append", default=[], metavar="GROUP",
                       help="a consumer group (repeatable)")
    group.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                       help="a producer's transactional id (repeatable)")
    group.add_argument("--cluster", action="store_true",
                       help=f"the cluster ({CLUSTER_NAME})")
    group.add_argument("--resource-pattern-type", type=pattern_type, metavar="TYPE",
                       help="literal (the default), prefixed; for list and remove also "
                       "match (every pattern that applies to the names given) and any "
                       "(every pattern type, the name exactly)")

    entries = argparse.ArgumentParser(add_help=False)
    group = entries.add_argument_group("access control entries")
    group.add_argument("--allow-principal", action="append", default=[], type=principal,
                       metavar="TYPE:NAME", help="a principal allowed, e.g. User:alice or "
                       "User:* (repeatable)")
    group.add_argument("--deny-principal", action="append", default=[], type=principal,
                       metavar="TYPE:NAME", help="a principal denied (repeatable)")
    group.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="a host the allowed principals may connect from (repeatable; "
                       "default *, any host)")
    group.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                       help="a host the denied principals are denied from (repeatable; "
                       "default *)")
    group.add_argument("--operation", action="append", default=[], type=operation,
                       metavar="OPERATION", help="allowed or denied (repeatable; default "
                       f"All): {', '.join(OPERATION_NAMES.values())}")
    group.add_argument("--producer", action="store_true",
                       help="the ACLs of a producer: Write, Describe and Create on the topics, "
                       "Write and Describe on the transactional ids")
    group.add_argument("--consumer", action="store_true",
                       help="the ACLs of a consumer: Read and Describe on the topics, Read on "
                       "the groups")
    group.add_argument("--idempotent", action="store_true",
                       help="with --producer: also IdempotentWrite on the cluster")

    add = actions.add_parser("add", parents=[common, resources, entries],
                             help="add ACLs (CreateAcls)")
    add.set_defaults(run=run_add)

    listing = actions.add_parser("list", parents=[common, resources],
                                 help="list ACLs, of some resources or all (DescribeAcls)")
    listing.add_argument("--principal", action="append", default=[], type=principal,
                         metavar="TYPE:NAME", help="only this principal's ACLs (repeatable)")
    listing.set_defaults(run=run_list)

    remove = actions.add_parser(
        "remove", parents=[common, resources, entries],
        help="remove ACLs (DeleteAcls); without --force, only show what would be removed")
    remove.add_argument("--force", action="store_true",
                        help="remove them (without it nothing is removed: the ACLs that "
                        "match are listed and the exit status is 1)")
    remove.set_defaults(run=run_remove)


def principal(text: str) -> str:
    """Kafka's principalType:principalName (SecurityUtils.parseKafkaPrincipal)."""
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise argparse.ArgumentTypeError(
            f"expected a principal as TYPE:NAME (e.g. User:alice), not {text!r}")
    return f"{kind}:{name}"


def operation(text: str) -> AclOperation:
    """An operation by Kafka's name (Read, IdempotentWrite), in any case, `_` and `-`
    allowed (IDEMPOTENT_WRITE, idempotent-write)."""
    found = _OPERATIONS.get(text.strip().replace("_", "").replace("-", "").lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"unknown operation {text!r}; valid: {', '.join(OPERATION_NAMES.values())}")
    return found


def pattern_type(text: str) -> ResourcePatternType:
    found = _PATTERN_TYPES.get(text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"unknown pattern type {text!r}; valid: {', '.join(_PATTERN_TYPES)}")
    return found


def check_options(args: argparse.Namespace, action: str) -> None:
    """kafka-acls.sh's checks (AclCommandOptions.checkArgs, getResourceToAcls), made
    before anything is sent: a usage mistake exits 2."""
    convenience = args.producer or args.consumer
    if convenience and args.operation:
        raise CliError("--operation does not go with --producer or --consumer: they say the "
                       "operations", EXIT_USAGE)
    if convenience and (args.deny_principal or args.deny_host):
        raise CliError("--deny-principal and --deny-host do not go with --producer or "
                       "--consumer", EXIT_USAGE)
    if args.producer and not args.topic:
        raise CliError("with --producer you must specify a --topic", EXIT_USAGE)
    if args.idempotent and not args.producer:
        raise CliError("--idempotent is only available with --producer", EXIT_USAGE)
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise CliError("with --consumer you must specify a --topic and a --group, and no "
                       "--cluster or --transactional-id (unless with --producer)", EXIT_USAGE)
    if args.allow_host and not args.allow_principal:
        raise CliError("--allow-host needs --allow-principal", EXIT_USAGE)
    if args.deny_host and not args.deny_principal:
        raise CliError("--deny-host needs --deny-principal", EXIT_USAGE)
    if action == "add":
        if args.resource_pattern_type in (ResourcePatternType.MATCH, ResourcePatternType.ANY):
            raise CliError(f"a --resource-pattern-type of "
                           f"{args.resource_pattern_type.name.lower()} is not valid when adding "
                           "ACLs: give literal or prefixed", EXIT_USAGE)
        if not args.allow_principal and not args.deny_principal:
            raise CliError("you must specify one of: --allow-principal, --deny-principal when "
                           "adding ACLs", EXIT_USAGE)
    if not has_resource(args):
        raise CliError("you must provide at least one resource: --topic, --group, "
                       "--transactional-id or --cluster", EXIT_USAGE)
    if args.cluster and args.resource_pattern_type == ResourcePatternType.PREFIXED:
        raise CliError("--cluster takes no prefixed pattern: the cluster's ACLs are literal",
                       EXIT_USAGE)


def has_resource(args: argparse.Namespace) -> bool:
    return bool(args.topic or args.group or args.transactional_id or args.cluster)


# ---- what the options ask for ---------------------------------------------------------------

def resource_patterns(args: argparse.Namespace, default: ResourcePatternType
                      ) -> list[Resource]:
    """The resources named, in kafka-acls.sh's order: topics, the cluster, groups,
    transactional ids."""
    kind = args.resource_pattern_type or default
    out: list[Resource] = [(ResourceType.TOPIC, t.strip(), kind) for t in args.topic]
    if args.cluster:
        out.append((ResourceType.BROKER, CLUSTER_NAME, kind))
    out += [(ResourceType.GROUP, g.strip(), kind) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t.strip(), kind) for t in args.transactional_id]
    return list(dict.fromkeys(out))


def access_entries(args: argparse.Namespace, operations: Iterable[AclOperation]
                   ) -> list[Entry]:
    """Every principal with every host and operation, allowed then denied (AclCommand's
    getAcl); a principal's hosts default to `*`."""
    operations = list(operations)
    out: list[Entry] = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        hosts = [h.strip() for h in hosts] or [WILDCARD_HOST]
        out += [(p, h, op, permission) for p in principals for op in operations for h in hosts]
    return list(dict.fromkeys(out))


def requested_acls(args: argparse.Namespace) -> dict[Resource, list[Entry]]:
    """Each resource (pattern or filter) and the entries the options give it, as
    kafka-acls.sh's getResourceFilterToAcls: the options as they are, or what --producer
    and --consumer expand to. An empty list: no principal was given."""
    resources = resource_patterns(args, ResourcePatternType.LITERAL)
    out: dict[Resource, list[Entry]] = {}

    def give(wanted: Iterable[Resource], operations: Sequence[AclOperation]) -> None:
        for resource in wanted:
            entries = out.setdefault(resource, [])
            entries += [e for e in access_entries(args, operations) if e not in entries]

    if not args.producer and not args.consumer:
        give(resources, args.operation or [AclOperation.ALL])
    if args.producer:
        give([r for r in resources if r[0] == ResourceType.TOPIC], PRODUCER_TOPIC_OPERATIONS)
        give([r for r in resources if r[0] == ResourceType.TRANSACTIONAL_ID],
             PRODUCER_TRANSACTIONAL_ID_OPERATIONS)
        if args.idempotent:
            give([(ResourceType.BROKER, CLUSTER_NAME, ResourcePatternType.LITERAL)],
                 [AclOperation.IDEMPOTENT_WRITE])
    if args.consumer:
        give([r for r in resources if r[0] == ResourceType.TOPIC], CONSUMER_TOPIC_OPERATIONS)
        give([r for r in resources if r[0] == ResourceType.GROUP], CONSUMER_GROUP_OPERATIONS)
    for (kind, _, _), entries in out.items():
        supported = SUPPORTED_OPERATIONS[kind]
        if any(op not in supported and op != AclOperation.ALL for _, _, op, _ in entries):
            valid = [OPERATION_NAMES[op] for op in [*supported, AclOperation.ALL]]
            raise CliError(f"resource type {type_name(kind)} only supports the operations "
                           f"{', '.join(valid)}", EXIT_USAGE)
    return out


def binding(resource: Resource, entry: Entry) -> AclBinding:
    kind, name, pattern = resource
    assert name is not None
    return AclBinding(kind, name, pattern, *entry)


def binding_filter(resource: Resource, entry: Entry | None = None,
                   principal: str | None = None) -> AclBindingFilter:
    """A filter of one resource pattern (filter) and one entry, or any entry."""
    kind, name, pattern = resource
    if entry is None:
        return AclBindingFilter(kind, name, pattern, principal, None, AclOperation.ANY,
                                AclPermissionType.ANY)
    return AclBindingFilter(kind, name, pattern, *entry)


def removal_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """kafka-acls.sh --remove: each resource's entries exactly, or every ACL of the
    resource when no principal is given."""
    out: list[AclBindingFilter] = []
    for resource, entries in requested_acls(args).items():
        if entries:
            out += [binding_filter(resource, e) for e in entries]
        else:
            out.append(binding_filter(resource))
    return list(dict.fromkeys(out))


# ---- output ---------------------------------------------------------------------------------

HEADERS = ["resource-type", "name", "pattern-type", "principal", "host", "operation",
           "permission"]


def type_name(kind: ResourceType) -> str:
    """Kafka's name: librdkafka calls the cluster resource BROKER."""
    return "CLUSTER" if kind == ResourceType.BROKER else kind.name


def acl_json(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": type_name(b.restype), "resource_name": b.name,
            "pattern_type": b.resource_pattern_type.name, "principal": b.principal,
            "host": b.host, "operation": b.operation.name,
            "permission_type": b.permission_type.name}


def _order(b: AclBinding) -> tuple[Any, ...]:
    return (type_name(b.restype), b.name, b.resource_pattern_type.name, b.principal, b.host,
            b.operation.name, b.permission_type.name)


def sorted_unique(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    return sorted({_order(b): b for b in bindings}.values(), key=_order)


def print_acls(bindings: Sequence[AclBinding]) -> None:
    print_table(HEADERS, [list(acl_json(b).values()) for b in bindings])


def error_json(error: str) -> dict[str, str]:
    code, _, message = error.partition(": ")
    return {"code": code, "message": message}


# ---- talking to the cluster -----------------------------------------------------------------

class SecurityAdmin(Admin):
    """An Admin that gives up at the first failed authentication, as Kafka's Java clients
    do (SaslAuthenticationException is not retried): librdkafka would retry until the
    timeout, and a wrong password would look like a cluster that does not answer."""

    def results(self, futures: Mapping[K, Future[Any]]
                ) -> dict[K, tuple[Any, KafkaException | None]]:
        def poll(timeout: float) -> None:
            self.client.poll(timeout)
            last = self.errors.last
            if last is not None and last.code() == KafkaError._AUTHENTICATION:
                raise CliError(f"cannot authenticate: {describe_error(last)}")

        wait_all(futures.values(), self.timeout, poll, self.errors)
        return super().results(futures)


class AclAdmin(SecurityAdmin):
    doing = "list ACLs"

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """The ACLs matching any filter; the refusal if the caller may not describe ACLs
        (which librdkafka would report as no ACLs at all)."""
        futures = {f: self.client.describe_acls(f, **self.kwargs(False)) for f in filters}
        found: list[AclBinding] = []
        for _, (result, error) in self.results(futures).items():
            if error is not None:
                raise CliError(f"cannot {self.doing}: {self.explain(error)}")
            found += result
        if not found:
            self.check_may_describe()
        return sorted_unique(found)

    def check_may_describe(self) -> None:
        if not may_describe_cluster(self):
            raise CliError(f"cannot {self.doing}: CLUSTER_AUTHORIZATION_FAILED: not "
                           "authorized to describe ACLs (DescribeAcls needs DESCRIBE on the "
                           "cluster; are you a super user?)")


def may_describe_cluster(admin: Admin) -> bool:
    """Whether the caller may DESCRIBE the cluster, from DescribeCluster's authorized
    operations (KIP-430). A cluster that cannot tell (no DescribeCluster, before Kafka 2.8)
    is given the benefit of the doubt. librdkafka gives None for the empty set of
    operations that a broker answers to one who may not DESCRIBE it."""
    future = admin.client.describe_cluster(include_authorized_operations=True,
                                           **admin.kwargs(False))
    [(described, error)] = admin.results({"cluster": future}).values()
    if error is not None:
        return True
    operations = described.authorized_operations
    return bool(operations) and AclOperation.DESCRIBE in operations


def _refusal_hint(error: str) -> str:
    if error.startswith("CLUSTER_AUTHORIZATION_FAILED"):
        return (f"{error} (changing ACLs needs ALTER on the cluster; are you a super "
                "user?)")
    return error


# ---- the commands ---------------------------------------------------------------------------

@command("acls add")
def run_add(args: argparse.Namespace) -> int:
    check_options(args, "add")
    wanted = [binding(r, e) for r, entries in requested_acls(args).items() for e in entries]
    wanted = list(dict.fromkeys(wanted))
    admin = AclAdmin(args)
    results = admin.results(admin.client.create_acls(wanted, **admin.kwargs(False)))
    errors = {b: admin.explain(error) for b, (_, error) in results.items()
              if error is not None}
    added = sorted_unique(b for b in wanted if b not in errors)
    if errors and not added and len(set(errors.values())) == 1:
        # Every ACL refused for the same reason (not authorized, no authorizer): one line.
        raise CliError(f"cannot add ACLs: {_refusal_hint(next(iter(errors.values())))}")
    for b, error in errors.items():
        print(f"odradek acls add: cannot add {describe_binding(b)}: {_refusal_hint(error)}",
              file=sys.stderr)
    if args.json:
        print_json([{**acl_json(b), "error": error_json(errors[b]) if b in errors else None}
                    for b in sorted_unique(wanted)])
    else:
        print(f"Added {len(added)} ACL{'s' if len(added) != 1 else ''}:")
        print_acls(added)
    return EXIT_FAILURE if errors else 0


def describe_binding(b: AclBinding) -> str:
    j = acl_json(b)
    return (f"{j['permission_type']} {j['principal']} {j['operation']} from host {j['host']} "
            f"on {j['resource_type']}:{j['pattern_type']}:{j['resource_name']}")


@command("acls list")
def run_list(args: argparse.Namespace) -> int:
    resources = resource_patterns(args, ResourcePatternType.LITERAL)
    if not resources:  # every ACL, of the pattern type given if one is
        resources = [(ResourceType.ANY, None,
                      args.resource_pattern_type or ResourcePatternType.ANY)]
    principals: list[str | None] = list(dict.fromkeys(args.principal)) or [None]
    filters = [binding_filter(r, principal=p) for r in resources for p in principals]
    found = AclAdmin(args).describe(filters)
    if args.json:
        print_json([acl_json(b) for b in found])
    else:
        print_acls(found)
    return 0


@command("acls remove")
def run_remove(args: argparse.Namespace) -> int:
    check_options(args, "remove")
    filters = removal_filters(args)
    admin = AclAdmin(args)
    if not args.force:
        admin.doing = "list the ACLs to remove"
        matching = admin.describe(filters)
        if args.json:
            print_json({"removed": False, "acls": [acl_json(b) for b in matching]})
        elif matching:
            print_acls(matching)
        if not matching:
            raise CliError("no ACL matches: nothing to remove")
        raise CliError(f"{len(matching)} ACL{'s' if len(matching) != 1 else ''} match; "
                       "nothing removed: add --force to remove "
                       f"{'them' if len(matching) != 1 else 'it'}")
    results = admin.results(admin.client.delete_acls(filters, **admin.kwargs(False)))
    removed: list[AclBinding] = []
    errors: list[str] = []
    for _, (deleted, error) in results.items():
        if error is not None:
            errors.append(_refusal_hint(admin.explain(error)))
        else:
            removed += deleted
    removed = sorted_unique(removed)
    errors = list(dict.fromkeys(errors))
    if errors and not removed and len(errors) == 1:
        raise CliError(f"cannot remove ACLs: {errors[0]}")
    for error in errors:
        print(f"odradek acls remove: cannot remove ACLs: {error}", file=sys.stderr)
    if args.json:
        print_json({"removed": True, "acls": [acl_json(b) for b in removed],
                    "errors": [error_json(e) for e in errors]})
    else:
        print(f"Removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}:")
        print_acls(removed)
    return EXIT_FAILURE if errors else 0
