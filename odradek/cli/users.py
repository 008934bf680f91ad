"""`odradek users`: SCRAM users, as `kafka-configs.sh --entity-type users` manages them.

`list` and `describe` are DescribeUserScramCredentials, `add` and `delete`
AlterUserScramCredentials (KIP-554), through librdkafka's AdminClient. `add` sends what
`--add-config 'SCRAM-SHA-256=[iterations=4096,password=...]'` sends: librdkafka salts and
hashes the password on the client, so only the salted password reaches the broker. The
password comes from `--password`, else from a prompt when stdin is a terminal, else from
the first line of stdin; it is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.cli.acls import SecurityAdmin, error_json, may_describe_cluster
from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    command,
    common_options,
    positive_int,
)
from odradek.cli.output import print_json, print_table

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
MECHANISM_NAMES = {m: name for name, m in MECHANISMS.items()}
DEFAULT_MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096  # Kafka's minimum, and kafka-configs' usual choice


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    users = commands.add_parser(
        "users", help="list, describe, add and delete SCRAM users (kafka-configs.sh "
        "--entity-type users)")
    actions = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    names = argparse.ArgumentParser(add_help=False)
    names.add_argument("users", metavar="USER", nargs="*", help="user names")
    names.add_argument("--entity-name", action="append", default=[], metavar="USER",
                       help="a user name, as kafka-configs.sh takes it (repeatable)")

    listing = actions.add_parser("list", parents=[common],
                                 help="every user with a SCRAM credential")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[common, names],
                                  help="users' SCRAM mechanisms and iterations (all users "
                                  "when none is named)")
    describe.set_defaults(run=run_describe)

    mechanism_help = ("SCRAM-SHA-256, SCRAM-SHA-512, or both (repeatable, or "
                      "comma-separated)")
    add = actions.add_parser("add", parents=[common, names],
                             help="add a SCRAM user, or change a user's password")
    add.add_argument("--mechanism", action="append", default=[], metavar="MECHANISM",
                     help=f"{mechanism_help}; default {DEFAULT_MECHANISM}")
    add.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS,
                     metavar="N", help=f"SCRAM iterations (default {DEFAULT_ITERATIONS}; "
                     "Kafka takes 4096 to 16384)")
    add.add_argument("--password", metavar="PASSWORD",
                     help="the password (visible to other local users in the process list: "
                     "better typed at the prompt or given on stdin)")
    add.set_defaults(run=run_add)

    delete = actions.add_parser("delete", parents=[common, names],
                                help="delete users' SCRAM credentials")
    delete.add_argument("--mechanism", action="append", default=[], metavar="MECHANISM",
                        help=f"{mechanism_help}; default every mechanism the user has")
    delete.set_defaults(run=run_delete)


def mechanisms(values: list[str]) -> list[ScramMechanism]:
    out: list[ScramMechanism] = []
    for value in values:
        for item in value.split(","):
            name = item.strip().upper()
            if name in ("BOTH", "ALL"):
                out += MECHANISMS.values()
            elif name in MECHANISMS:
                out.append(MECHANISMS[name])
            else:
                raise CliError(f"unknown SCRAM mechanism {item.strip()!r}: expected "
                               f"{', '.join(MECHANISMS)} or both", EXIT_USAGE)
    return list(dict.fromkeys(out))


def user_names(args: argparse.Namespace) -> list[str]:
    names = list(dict.fromkeys(args.users + args.entity_name))
    if any(not n for n in names):
        raise CliError("a user name cannot be empty", EXIT_USAGE)
    return names


def read_password(args: argparse.Namespace, user: str) -> str:
    """--password, else a prompt (twice) on a terminal, else stdin's first line."""
    if args.password is not None:
        password: str = args.password
    elif sys.stdin.isatty():
        try:
            password = getpass.getpass(f"Password for user {user}: ")
            if password and getpass.getpass("Again: ") != password:
                raise CliError("the passwords differ", EXIT_USAGE)
        except EOFError:
            raise CliError("no password given", EXIT_USAGE) from None
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("the password cannot be empty (give --password, type it at the "
                       "prompt, or pipe it on stdin)", EXIT_USAGE)
    return password


def credentials_json(user: str, description: Any) -> dict[str, Any]:
    infos = sorted(description.scram_credential_infos, key=lambda i: i.mechanism.value)
    return {"user": user, "credentials": [
        {"mechanism": MECHANISM_NAMES.get(i.mechanism, i.mechanism.name),
         "iterations": i.iterations} for i in infos]}


def print_credentials(described: list[dict[str, Any]]) -> None:
    print_table(["user", "mechanism", "iterations"],
                [[d["user"], c["mechanism"], c["iterations"]]
                 for d in described for c in d["credentials"]])


def _refusal_hint(error: str, needs: str) -> str:
    if error.startswith("CLUSTER_AUTHORIZATION_FAILED"):
        return f"{error} ({needs} on the cluster; are you a super user?)"
    return error


class UserAdmin(SecurityAdmin):
    def check_may_describe(self, doing: str) -> None:
        """Refuses, before DescribeUserScramCredentials is sent, a caller who may not
        DESCRIBE the cluster. librdkafka (2.x) crashes the process on that request's
        top-level error when the broker gives it a message (it keeps a pointer to a copy
        on its parser's stack), so the refusal is found out beforehand."""
        if not may_describe_cluster(self):
            raise CliError(f"cannot {doing}: CLUSTER_AUTHORIZATION_FAILED: not authorized "
                           "to describe SCRAM users (it needs DESCRIBE on the cluster; are "
                           "you a super user?)")

    def describe_all(self) -> list[dict[str, Any]]:
        self.check_may_describe("describe the SCRAM users")
        future = self.client.describe_user_scram_credentials(None, **self.kwargs(False))
        [(described, error)] = self.results({"all": future}).values()
        if error is not None:
            raise CliError(f"cannot describe the SCRAM users: "
                           f"{_refusal_hint(self.explain(error), 'it needs DESCRIBE')}")
        return [credentials_json(u, d) for u, d in sorted(described.items())]

    def describe(self, users: list[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The users' credentials, and the errors of those that could not be described."""
        self.check_may_describe("describe the SCRAM users")
        futures = self.client.describe_user_scram_credentials(users, **self.kwargs(False))
        found, errors = [], {}
        for user, (described, error) in self.results(futures).items():
            if error is not None:
                errors[user] = _refusal_hint(self.explain(error), "it needs DESCRIBE")
            else:
                found.append(credentials_json(user, described))
        return found, errors


# ---- the commands ---------------------------------------------------------------------------

@command("users list")
def run_list(args: argparse.Namespace) -> int:
    described = UserAdmin(args).describe_all()
    if args.json:
        print_json(described)
    else:
        print_table(["user", "mechanisms"],
                    [[d["user"], [c["mechanism"] for c in d["credentials"]]]
                     for d in described])
    return 0


@command("users describe")
def run_describe(args: argparse.Namespace) -> int:
    users = user_names(args)
    admin = UserAdmin(args)
    if not users:
        described, errors = admin.describe_all(), {}
    else:
        found, errors = admin.describe(users)
        by_user = {d["user"]: d for d in found}
        described = [by_user[u] for u in users if u in by_user]
    for user, error in errors.items():
        print(f"odradek users describe: user {user}: {error}", file=sys.stderr)
    if args.json:
        print_json(described + [{"user": u, "error": error_json(e)}
                                for u, e in errors.items()])
    else:
        print_credentials(described)
    return EXIT_FAILURE if errors else 0


@command("users add")
def run_add(args: argparse.Namespace) -> int:
    users = user_names(args)
    if len(users) != 1:
        raise CliError("add takes one user", EXIT_USAGE)
    [user] = users
    chosen = mechanisms(args.mechanism or [DEFAULT_MECHANISM])
    password = read_password(args, user).encode("utf-8")
    admin = UserAdmin(args)
    futures = admin.client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, args.iterations), password)
         for m in chosen], **admin.kwargs(False))
    for _, (_, error) in admin.results(futures).items():
        if error is not None:
            raise CliError(f"cannot add user {user}: "
                           f"{_refusal_hint(admin.explain(error), 'it needs ALTER')}")
    names = [MECHANISM_NAMES[m] for m in chosen]
    if args.json:
        print_json({"user": user, "mechanisms": names, "iterations": args.iterations})
    else:
        print(f"Completed updating config for user {user}: {', '.join(names)} with "
              f"{args.iterations} iterations.")
    return 0


@command("users delete")
def run_delete(args: argparse.Namespace) -> int:
    users = user_names(args)
    if not users:
        raise CliError("name the users to delete", EXIT_USAGE)
    chosen = mechanisms(args.mechanism)
    admin = UserAdmin(args)
    errors: dict[str, str] = {}
    wanted: dict[str, list[ScramMechanism]] = {}
    if chosen:
        wanted = {u: chosen for u in users}
    else:  # every mechanism each user has
        found, errors = admin.describe(users)
        wanted = {d["user"]: [MECHANISMS[c["mechanism"]] for c in d["credentials"]]
                  for d in found}
    deletions = [UserScramCredentialDeletion(u, m) for u, ms in wanted.items() for m in ms]
    if deletions:
        futures = admin.client.alter_user_scram_credentials(deletions, **admin.kwargs(False))
        for user, (_, error) in admin.results(futures).items():
            if error is not None:
                errors[user] = _refusal_hint(admin.explain(error), "it needs ALTER")
    deleted = [{"user": u, "mechanisms": [MECHANISM_NAMES[m] for m in wanted[u]]}
               for u in users if u in wanted and u not in errors]
    if len(users) == 1 and errors:
        [(user, error)] = errors.items()
        raise CliError(f"cannot delete user {user}: {error}")
    for user, error in errors.items():
        print(f"odradek users delete: cannot delete user {user}: {error}", file=sys.stderr)
    if args.json:
        print_json(deleted + [{"user": u, "error": error_json(e)}
                               for u, e in errors.items()])
    else:
        for d in deleted:
            print(f"Deleted the {', '.join(d['mechanisms'])} credentials of user {d['user']}.")
    return EXIT_FAILURE if errors else 0
