"""`odradek quotas`: client quotas, as `kafka-configs.sh --entity-type users|clients`
manages them.

A quota is set on an entity: a user, a client id, or both, each a name or the default
(Kafka's `<default>`). `list` and `describe` are DescribeClientQuotas with a filter
component per entity type named (an exact name, the default, or with `--user`/`--client-id`
and no name any name), `alter` and `remove` AlterClientQuotas (KIP-546). The options are
kafka-configs.sh's: `--user`, `--user-defaults`, `--client`, `--client-defaults`, or
`--entity-type users|clients` each followed by `--entity-name N` or `--entity-default`;
`--add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152'` and
`--delete-config request_percentage`.

confluent-kafka 2.x has no client-quota admin call, so the requests are Odradek's own codec
over the CLI's socket (wire.py), with the client settings' TLS and SASL, sent to the first
bootstrap server that answers: every broker stores a change where the others read it.
Which keys exist and what values they take is the broker's to say (INVALID_REQUEST with
its message); the command only checks that a value is a number.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from odradek.cli.client import (
    EXIT_USAGE,
    CliError,
    client_config,
    command,
    common_options,
    timeout_of,
)
from odradek.cli.output import print_json, print_table
from odradek.cli.wire import (
    BrokerSocket,
    WireError,
    bootstrap_addresses,
    broker_security,
    error_name,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import alter_client_quotas_request as alter_request
from odradek.protocol.messages import describe_client_quotas_request as describe_request
from odradek.protocol.messages.alter_client_quotas_response import AlterClientQuotasResponse
from odradek.protocol.messages.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
)

USER, CLIENT_ID = "user", "client-id"  # the entity types on the wire
ENTITY_TYPES = (USER, CLIENT_ID)
# Kafka's quota keys for users and client ids, in the order the tables show them; a key
# the broker answers with that is not here comes after them.
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
# DescribeClientQuotas' match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
DEFAULT_NAME = "<default>"  # how the tables show a default entity


@dataclass(frozen=True, slots=True)
class Part:
    """One entity type of an entity or a filter: a name, the default (name None), or, in
    a filter only, any name (`any_name`)."""

    kind: str
    name: str | None
    any_name: bool = False


# ---- the options -----------------------------------------------------------------------------

# What each entity option (by its first name) means: (role, entity type). The roles:
# "name" (a name, or with none any name), "default", "type" (--entity-type, named by what
# follows it).
_ROLES: dict[str, tuple[str, str | None]] = {
    "--user": ("name", USER), "--user-defaults": ("default", USER),
    "--client-id": ("name", CLIENT_ID), "--client-defaults": ("default", CLIENT_ID),
    "--entity-type": ("type", None), "--entity-name": ("entity-name", None),
    "--entity-default": ("entity-default", None),
}
_ENTITY_TYPE_NAMES = {"users": USER, "user": USER, "clients": CLIENT_ID, "client": CLIENT_ID,
                      "client-id": CLIENT_ID}


class _EntityOption(argparse.Action):
    """Keeps every entity option in the order given: `--entity-name` belongs to the
    `--entity-type` before it, as in kafka-configs.sh."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        tokens = list(getattr(namespace, self.dest, None) or [])
        # The option's first name, whichever alias or abbreviation was typed.
        tokens.append((self.option_strings[0], values if isinstance(values, str) else None))
        setattr(namespace, self.dest, tokens)


def entity_options(*, any_name: bool) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("the entity (kafka-configs.sh's options)")
    name_help = " (without NAME: any)" if any_name else ""
    nargs = "?" if any_name else None
    group.add_argument("--user", nargs=nargs, metavar="NAME", action=_EntityOption,
                       dest="entity", help=f"a user (principal name){name_help}")
    group.add_argument("--user-defaults", "--user-default", nargs=0, action=_EntityOption,
                       dest="entity", help="the default user: every user without a quota "
                       "of their own")
    group.add_argument("--client-id", "--client", nargs=nargs, metavar="NAME",
                       action=_EntityOption, dest="entity",
                       help=f"a client id{name_help}")
    group.add_argument("--client-defaults", "--client-default", nargs=0,
                       action=_EntityOption, dest="entity",
                       help="the default client id")
    group.add_argument("--entity-type", metavar="users|clients", action=_EntityOption,
                       dest="entity", help="kafka-configs.sh's form: an entity type, then "
                       "--entity-name or --entity-default")
    group.add_argument("--entity-name", metavar="NAME", action=_EntityOption,
                       dest="entity", help="the name of the --entity-type before it")
    group.add_argument("--entity-default", nargs=0, action=_EntityOption, dest="entity",
                       help="the default of the --entity-type before it")
    parent.set_defaults(entity=None)
    return parent


def entity_parts(tokens: Sequence[tuple[str, str | None]] | None, *,
                 exact: bool) -> list[Part]:
    """The entity (or filter) the options name, users first. `exact`: an entity to change,
    whose every part is a name or the default; else a filter, where a type without a name
    means any name. Raises CliError (usage) for options that do not make one."""
    parts: dict[str, Part] = {}
    pending: tuple[str, str] | None = None  # (the --entity-type option, its type)

    def add(kind: str, name: str | None, any_name: bool, option: str) -> None:
        if kind in parts:
            raise CliError(f"the {kind} is given twice (at {option})", EXIT_USAGE)
        if name == "":
            default = "--user-defaults" if kind == USER else "--client-defaults"
            raise CliError(f"a {kind} cannot be empty ({default} is the default {kind})",
                           EXIT_USAGE)
        if any_name and exact:
            default = "--user-defaults" if kind == USER else "--client-defaults"
            raise CliError(f"{option} needs a name here (or {default})", EXIT_USAGE)
        parts[kind] = Part(kind, name, any_name)

    def close_pending() -> None:
        nonlocal pending
        if pending is not None:
            option, kind = pending
            pending = None
            if exact:
                raise CliError(f"{option} needs --entity-name or --entity-default after it",
                               EXIT_USAGE)
            add(kind, None, True, option)

    for option, value in tokens or []:
        role, kind = _ROLES[option]
        if role == "type":
            close_pending()
            assert value is not None
            pending = (f"--entity-type {value}", _entity_type(value))
        elif role in ("entity-name", "entity-default"):
            if pending is None:
                raise CliError(f"{option} needs an --entity-type before it", EXIT_USAGE)
            where, pending_kind = pending
            pending = None
            add(pending_kind, value if role == "entity-name" else None, False, where)
        else:
            close_pending()
            assert kind is not None
            if role == "default":
                add(kind, None, False, option)
            else:
                add(kind, value, value is None, option)
    close_pending()
    return [parts[k] for k in ENTITY_TYPES if k in parts]


def _entity_type(text: str) -> str:
    kind = _ENTITY_TYPE_NAMES.get(text.strip().lower())
    if kind is not None:
        return kind
    if text.strip().lower() in ("ips", "ip"):
        raise CliError("IP quotas (connection_creation_rate) are not supported", EXIT_USAGE)
    if text.strip().lower() in ("topics", "brokers"):
        raise CliError(f"--entity-type {text}: quotas are set on users and clients; for "
                       "topic and broker configs see `odradek configs`", EXIT_USAGE)
    raise CliError(f"--entity-type {text}: expected users or clients", EXIT_USAGE)


def _split(text: str) -> list[str]:
    """kafka-configs.sh's list: comma-separated, a [...] value keeping its commas."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items]


_KEY = re.compile(r"[A-Za-z0-9_.\-]+")


def parse_add_config(values: Iterable[str]) -> dict[str, float]:
    """`--add-config 'k1=v1,k2=v2'` (repeatable) as {key: value}; a value is a number, as
    kafka-configs.sh parses a quota (Java's Double), finite. CliError (usage) otherwise."""
    out: dict[str, float] = {}
    for text in values:
        for item in _split(text):
            if not item:
                continue
            key, sep, raw = item.partition("=")
            key, raw = key.strip(), raw.strip()
            if not sep or not _KEY.fullmatch(key):
                raise CliError(f"--add-config wants KEY=VALUE[,KEY=VALUE...], not {item!r}",
                               EXIT_USAGE)
            value = parse_quota_value(key, raw)
            if key in out and out[key] != value:
                raise CliError(f"--add-config gives {key} twice", EXIT_USAGE)
            out[key] = value
    return out


def parse_quota_value(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"cannot parse the value of {key}: {text!r} is not a number "
                       f"(e.g. {key}=1048576)", EXIT_USAGE) from None
    if not math.isfinite(value):
        raise CliError(f"the value of {key} must be a finite number, not {text!r}",
                       EXIT_USAGE)
    return value


def parse_delete_config(values: Iterable[str]) -> list[str]:
    """`--delete-config k1,k2` (repeatable) as the keys, each once."""
    keys: list[str] = []
    for text in values:
        for key in _split(text):
            if not _KEY.fullmatch(key):
                raise CliError(f"--delete-config wants KEY[,KEY...], not {text!r}",
                               EXIT_USAGE)
            keys.append(key)
    return list(dict.fromkeys(keys))


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    quotas = commands.add_parser(
        "quotas", help="list, describe, alter and remove client quotas (kafka-configs.sh "
        "--entity-type users|clients)")
    actions = quotas.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()
    describing = entity_options(any_name=True)
    strict = argparse.ArgumentParser(add_help=False)
    strict.add_argument("--strict", action="store_true",
                        help="only entities of exactly the types named (without it, a "
                        "--user filter also shows the user's client-id entities)")
    changing = entity_options(any_name=False)
    validate = argparse.ArgumentParser(add_help=False)
    validate.add_argument("--validate-only", action="store_true",
                          help="let the broker check the change without making it")

    listing = actions.add_parser("list", parents=[common, describing, strict],
                                 help="the entities with quotas, one row each with a column "
                                 "per quota key (every entity without options)")
    listing.set_defaults(run=run_list)
    describe = actions.add_parser("describe", parents=[common, describing, strict],
                                  help="the quotas of the entities the options pick, one "
                                  "row per key (kafka-configs.sh --describe)")
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", parents=[common, changing, validate],
                               help="set and delete an entity's quotas (kafka-configs.sh "
                               "--alter)")
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                       help="quotas to set, e.g. producer_byte_rate=1048576,"
                       "consumer_byte_rate=2097152,request_percentage=50 (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                       help="quotas to delete, e.g. request_percentage (repeatable)")
    alter.set_defaults(run=run_alter)

    remove = actions.add_parser("remove", parents=[common, changing, validate],
                                help="delete every quota of an entity")
    remove.set_defaults(run=run_remove)


# ---- talking to a broker -----------------------------------------------------------------------

def connect(args: argparse.Namespace) -> BrokerSocket:
    """A connection to the first bootstrap server that answers (TLS and SASL per the
    client settings), within the command's timeout."""
    config = client_config(args)
    security = broker_security(config)
    timeout = timeout_of(args)
    deadline = time.monotonic() + timeout
    reasons = []
    for host, port in bootstrap_addresses(config):
        sock = BrokerSocket(host, port, timeout=max(deadline - time.monotonic(), 0.1),
                            security=security)
        try:
            sock.connect()
            return sock
        except WireError as e:
            reasons.append(str(e))
    raise CliError("cannot reach the cluster: " + "; ".join(reasons))


def describe_quotas(sock: BrokerSocket, parts: Sequence[Part], strict: bool
                    ) -> list[dict[str, Any]]:
    """The entities with quotas that the filter matches, sorted: [{"entity", "quotas"}]."""
    request = describe_request.DescribeClientQuotasRequest(components=[
        describe_request.ComponentData(
            entity_type=p.kind,
            match_type=MATCH_ANY if p.any_name else MATCH_DEFAULT if p.name is None
            else MATCH_EXACT,
            match=p.name) for p in parts], strict=strict)
    response = cast(DescribeClientQuotasResponse, sock.send(request))
    if response.error_code != ErrorCode.NONE:
        raise CliError(f"cannot describe the client quotas: "
                       f"{_broker_error(response.error_code, response.error_message)}")
    found = []
    for entry in response.entries or []:
        values = {v.key: number(v.value) for v in entry.values}
        found.append({"entity": {e.entity_type: e.entity_name for e in entry.entity},
                      "quotas": {k: values[k] for k in _ordered(values)}})
    return sorted(found, key=lambda d: _entity_order(d["entity"]))


def alter_quotas(sock: BrokerSocket, parts: Sequence[Part], sets: dict[str, float],
                 deletes: Sequence[str], validate_only: bool) -> None:
    request = alter_request.AlterClientQuotasRequest(entries=[alter_request.EntryData(
        entity=[alter_request.EntityData(entity_type=p.kind, entity_name=p.name)
                for p in parts],
        ops=[alter_request.OpData(key=k, value=v, remove=False) for k, v in sets.items()]
        + [alter_request.OpData(key=k, value=0.0, remove=True) for k in deletes])],
        validate_only=validate_only)
    response = cast(AlterClientQuotasResponse, sock.send(request))
    for entry in response.entries:
        if entry.error_code != ErrorCode.NONE:
            raise CliError(f"cannot alter the quotas of {entity_label(parts)}: "
                           f"{_broker_error(entry.error_code, entry.error_message)}")
    if not response.entries:
        raise CliError(f"cannot alter the quotas of {entity_label(parts)}: "
                       f"{sock.name} answered for no entity")


def _broker_error(code: int, message: str | None) -> str:
    text = error_name(code) + (f": {message}" if message else "")
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        text += (" (describing quotas needs DESCRIBE_CONFIGS on the cluster, altering them "
                 "ALTER_CONFIGS; are you a super user?)")
    return text


# ---- output ------------------------------------------------------------------------------------

def number(value: float) -> int | float:
    """1048576 rather than 1048576.0: the byte rates are whole numbers."""
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _entity_order(entity: dict[str, str | None]) -> tuple[Any, ...]:
    # Users' entities first, each user's own before its client ids'; a name before the
    # default; names in order.
    user, client = entity.get(USER), entity.get(CLIENT_ID)
    return (USER not in entity, user is None, user or "",
            CLIENT_ID in entity, client is None, client or "")


def entity_label(parts: Sequence[Part] | dict[str, str | None]) -> str:
    """`user 'alice', client-id 'app'`, `the default user`... for messages."""
    if isinstance(parts, dict):
        parts = [Part(k, parts[k]) for k in ENTITY_TYPES if k in parts]
    return ", ".join(f"{p.kind} {p.name!r}" if p.name is not None
                     else f"the default {p.kind}" for p in parts)


def _cell(entity: dict[str, str | None], kind: str) -> str | None:
    if kind not in entity:
        return None  # "-": not part of the entity
    name = entity[kind]
    return DEFAULT_NAME if name is None else name


def _ordered(keys: Iterable[str]) -> list[str]:
    """Kafka's keys in QUOTA_KEYS' order, then any other."""
    present = set(keys)
    return [k for k in QUOTA_KEYS if k in present] + sorted(present - set(QUOTA_KEYS))


def _keys(found: Sequence[dict[str, Any]]) -> list[str]:
    return _ordered(k for d in found for k in d["quotas"])


# ---- the commands ------------------------------------------------------------------------------

def _describe(args: argparse.Namespace) -> list[dict[str, Any]]:
    parts = entity_parts(args.entity, exact=False)
    with connect(args) as sock:
        return describe_quotas(sock, parts, args.strict)


@command("quotas list")
def run_list(args: argparse.Namespace) -> int:
    found = _describe(args)
    if args.json:
        print_json(found)
        return 0
    keys = _keys(found)
    print_table(["user", "client-id", *keys],
                [[_cell(d["entity"], USER), _cell(d["entity"], CLIENT_ID),
                  *(d["quotas"].get(k) for k in keys)] for d in found])
    return 0


@command("quotas describe")
def run_describe(args: argparse.Namespace) -> int:
    found = _describe(args)
    if args.json:
        print_json(found)
        return 0
    print_table(["user", "client-id", "quota", "value"],
                [[_cell(d["entity"], USER), _cell(d["entity"], CLIENT_ID), k, d["quotas"][k]]
                 for d in found for k in _keys([d])])
    return 0


def _changed_entity(args: argparse.Namespace) -> list[Part]:
    parts = entity_parts(args.entity, exact=True)
    if not parts:
        raise CliError("name the entity: --user NAME and/or --client-id NAME (or "
                       "--user-defaults, --client-defaults)", EXIT_USAGE)
    return parts


@command("quotas alter")
def run_alter(args: argparse.Namespace) -> int:
    parts = _changed_entity(args)
    sets = parse_add_config(args.add_config)
    deletes = parse_delete_config(args.delete_config)
    if not sets and not deletes:
        raise CliError("nothing to change: give --add-config and/or --delete-config",
                       EXIT_USAGE)
    if both := [k for k in deletes if k in sets]:
        raise CliError(f"{', '.join(both)} cannot be both added and deleted", EXIT_USAGE)
    with connect(args) as sock:
        alter_quotas(sock, parts, sets, deletes, args.validate_only)
    entity = {p.kind: p.name for p in parts}
    if args.json:
        print_json({"entity": entity, "set": {k: number(v) for k, v in sets.items()},
                    "deleted": deletes, "validate_only": args.validate_only})
    elif args.validate_only:
        print(f"Validated the quota changes of {entity_label(parts)} (--validate-only: "
              "nothing changed).")
    else:
        print(f"Completed updating the quotas of {entity_label(parts)}.")
    return 0


@command("quotas remove")
def run_remove(args: argparse.Namespace) -> int:
    parts = _changed_entity(args)
    with connect(args) as sock:
        found = describe_quotas(sock, parts, strict=True)
        if not found:
            raise CliError(f"{entity_label(parts)} has no quotas")
        entry = found[0]  # a strict filter of one entity's names matches it alone
        deletes = [k for k in _keys(found) if k in entry["quotas"]]
        alter_quotas(sock, parts, {}, deletes, args.validate_only)
    if args.json:
        print_json({"entity": entry["entity"], "deleted": deletes,
                    "validate_only": args.validate_only})
    elif args.validate_only:
        print(f"Validated removing the quotas of {entity_label(parts)}: "
              f"{', '.join(deletes)} (--validate-only: nothing changed).")
    else:
        print(f"Removed the quotas of {entity_label(parts)}: {', '.join(deletes)}.")
    return 0

