"""`odradek`: the operator's command.

Subcommands grow with the platform. Today: run a broker (`serve`) or a local cluster
(`cluster`); manage topics (`topics`), configs (`configs`), records (`records delete`), log
dirs (`log-dirs`) and partitions (`partitions`); write and read records (`produce`,
`consume`), inspect and manage consumer groups (`groups`) and transactions
(`transactions`), manage ACLs (`acls`), SCRAM users (`users`) and client quotas
(`quotas`), measure a cluster (`perf`), all through librdkafka (and Odradek's own codec
for the APIs it lacks, cli/wire.py); run the Spark pipelines and generate their input
(`pipeline`); and for the protocol: what it speaks (`apis`), what an error code means
(`errors`), and a look inside a captured request (`decode`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from odradek import __version__
from odradek.protocol.api_keys import API_SPECS
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.framing import decode_request


def _cmd_apis(args: argparse.Namespace) -> int:
    print(f"{'key':>4}  {'api':<32} {'versions':<9} {'deprecated':<11} {'flexible':<9}")
    for spec in API_SPECS.values():
        if args.listener and args.listener not in spec.listeners:
            continue
        dep = spec.deprecated_versions
        deprecated = "-" if dep is None else f"{dep[0]}-{dep[1]}"
        flexible = "-" if spec.first_flexible_version is None else f"{spec.first_flexible_version}+"
        versions = f"{spec.min_version}-{spec.max_version}"
        print(f"{spec.api_key:>4}  {spec.name:<32} {versions:<9} {deprecated:<11} {flexible:<9}")
    return 0


def _cmd_errors(args: argparse.Namespace) -> int:
    codes = list(ErrorCode)
    if args.code is not None:
        wanted = args.code.upper()
        codes = [c for c in codes if str(c.value) == wanted or c.name == wanted]
        if not codes:
            print(f"no Kafka error code {args.code!r}", file=sys.stderr)
            return 1
    for code in codes:
        retriable = "retriable" if code.retriable else ""
        print(f"{code.value:>4}  {code.name:<45} {retriable:<9}  {code.message}")
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    try:
        data = bytes.fromhex("".join(args.hex))
    except ValueError as e:
        print(f"not hexadecimal: {e}", file=sys.stderr)
        return 1
    if args.size_prefixed:
        data = data[4:]
    try:
        request = decode_request(data)
    except ProtocolError as e:
        print(f"cannot decode: {e} (Kafka error code {e.error_code})", file=sys.stderr)
        return 1
    print(request.header)
    print(request.body)
    return 0


# Each subcommand by name, its module in odradek.cli, in the order the help lists them.
# A module is imported only when its command runs (or for the whole help): each command
# is a process of its own, and importing them all (the broker, the codecs, Spark's
# pipelines) took a second of CPU before any command began.
COMMANDS = {"serve": "serve", "topics": "topics", "produce": "produce", "consume": "consume",
            "groups": "groups", "partitions": "partitions", "cluster": "cluster",
            "pipeline": "pipeline", "configs": "configs", "records": "records",
            "log-dirs": "log_dirs", "perf": "perf", "transactions": "transactions",
            "acls": "acls", "users": "users", "quotas": "quotas", "registry": "registry",
            "schemas": "schemas"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `command`, one with only that subcommand's module registered
    (and apis, errors and decode, always there), which parses its arguments alike."""
    parser = argparse.ArgumentParser(
        prog="odradek", description="Odradek: a Kafka-compatible streaming platform."
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    apis = commands.add_parser("apis", help="list the Kafka APIs and versions of the protocol")
    apis.add_argument("--listener", choices=["broker", "controller", "zkBroker"])
    apis.set_defaults(run=_cmd_apis)

    errors = commands.add_parser("errors", help="explain Kafka error codes")
    errors.add_argument(
        "code", nargs="?", help="a numeric code or a name such as NOT_LEADER_OR_FOLLOWER"
    )
    errors.set_defaults(run=_cmd_errors)

    decode = commands.add_parser("decode", help="decode a request frame given in hex")
    decode.add_argument("hex", nargs="+", help="the frame's bytes in hex (spaces allowed)")
    decode.add_argument(
        "--size-prefixed", action="store_true", help="the bytes start with the 4-byte frame size"
    )
    decode.set_defaults(run=_cmd_decode)

    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"odradek.cli.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The subcommand named first: only its module is needed (anything else, such as
    # --help, --version or an unknown command, gets the whole parser).
    command = argv[0] if argv and argv[0] in (*COMMANDS, "apis", "errors", "decode") else None
    args = build_parser(command).parse_args(argv)
    try:
        result: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`odradek errors | head`): stop quietly, as Unix tools do,
        # and keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
