"""`odradek schemas`: list, read, register, check and delete the schemas of a schema
registry, and show or set its compatibility levels, through Confluent Schema Registry's
REST API (docs/registry.md), so that it works against Odradek's registry and Confluent's.

The command is an HTTP client of the registry (standard library only, no Kafka client):
`--registry-url` (default $ODRADEK_REGISTRY_URL, else http://localhost:8081), with
`--timeout` bounding all the requests of one command together. The registry's refusals,
`{"error_code": 40401, "message": "Subject 'x' not found."}`, are printed as
`odradek schemas: Subject 'x' not found. (error 40401)` with exit 1; a registry that cannot
be reached, or does not answer in time, is named by its URL, exit 1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from odradek.cli.client import (
    DEFAULT_TIMEOUT,
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    command,
    parse_duration,
)
from odradek.cli.output import print_json, print_table

REGISTRY_URL_ENV = "ODRADEK_REGISTRY_URL"
DEFAULT_REGISTRY_URL = "http://localhost:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json; q=0.9, application/json; q=0.5"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
# Confluent's compatibility levels (the registry is the judge; these make `--set` a choice).
COMPATIBILITY_LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE", "NONE")
LATEST = "latest"

# Confluent's error codes the command looks at.
SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40402, 40403
SUBJECT_CONFIG_NOT_FOUND = 40408


class RegistryError(CliError):
    """The registry's refusal, in its own words: `message (error 40401)`."""

    def __init__(self, code: int | None, message: str, status: int) -> None:
        super().__init__(f"{message} (error {code})" if code is not None else message,
                         EXIT_FAILURE)
        self.code, self.status = code, status


# ---- the REST client ---------------------------------------------------------------------------

class Registry:
    """A schema registry's REST API at `url`. Every request of a command shares one deadline,
    `timeout` seconds from the client's making."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.headers = {"Accept": ACCEPT}  # HTTP Basic, when it comes, goes here

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, Any] | None = None) -> Any:
        """The JSON answer to METHOD path?query (`body`, if any, sent as JSON); a
        RegistryError for a refusal, a CliError when the registry cannot be reached."""
        params = {k: _query_value(v) for k, v in (query or {}).items()
                  if v is not None and v is not False}
        target = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = CONTENT_TYPE
        request = urllib.request.Request(target, data=data, method=method, headers=headers)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self._timed_out()
        try:
            with urllib.request.urlopen(request, timeout=remaining) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                e.close()
            raise self._refusal(e.code, e.reason, raw, method, path) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise self._timed_out() from None
            raise CliError(f"cannot reach the schema registry at {self.url}: "
                           f"{_reason(e.reason)}") from None
        except TimeoutError:
            raise self._timed_out() from None
        except http.client.HTTPException as e:  # not HTTP: a Kafka listener's port?
            raise CliError(f"{self.url} does not answer as a schema registry does: "
                           f"{_reason(e)}") from None
        except OSError as e:
            raise CliError(f"cannot reach the schema registry at {self.url}: "
                           f"{_reason(e)}") from None
        try:
            return json.loads(raw) if raw.strip() else None
        except (ValueError, UnicodeDecodeError):
            raise CliError(f"{self.url} answered {method} {path} (HTTP {status}) with "
                           "something that is not JSON: is it a schema registry?") from None

    def _timed_out(self) -> CliError:
        return CliError(f"no answer from the schema registry at {self.url} within "
                        f"{self.timeout:g}s")

    def _refusal(self, status: int, reason: str, raw: bytes, method: str, path: str
                 ) -> RegistryError:
        try:
            answer = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            answer = None
        if isinstance(answer, dict) and isinstance(answer.get("message"), str):
            code = answer.get("error_code")
            return RegistryError(code if isinstance(code, int) else status,
                                 answer["message"], status)
        return RegistryError(None, f"{self.url} answered {method} {path} with HTTP {status} "
                             f"{reason}".rstrip() + ": is it a schema registry?", status)

    # ---- the calls -----------------------------------------------------------------------------

    def subjects(self, prefix: str | None = None, deleted: bool = False) -> list[str]:
        return list(self.request("GET", "/subjects",
                                 query={"subjectPrefix": prefix, "deleted": deleted}))

    def versions(self, subject: str) -> list[int]:
        """The subject's live versions; none for a subject the registry does not know."""
        try:
            return list(self.request("GET", f"/subjects/{_quote(subject)}/versions"))
        except RegistryError as e:
            if e.code == SUBJECT_NOT_FOUND:
                return []
            raise

    def version(self, subject: str, version: str | int, deleted: bool = False
                ) -> dict[str, Any]:
        answer: dict[str, Any] = self.request(
            "GET", f"/subjects/{_quote(subject)}/versions/{version}",
            query={"deleted": deleted})
        return answer

    def level(self, subject: str | None) -> tuple[str, bool]:
        """(the compatibility level that applies, whether it is the subject's own)."""
        if subject is not None:
            try:
                answer = self.request("GET", f"/config/{_quote(subject)}")
                return str(answer["compatibilityLevel"]), True
            except RegistryError as e:
                if e.code != SUBJECT_CONFIG_NOT_FOUND:
                    raise
        return str(self.request("GET", "/config")["compatibilityLevel"]), False


def _query_value(value: Any) -> str:
    return "true" if value is True else str(value)


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _reason(reason: Any) -> str:
    """`Connection refused` rather than `[Errno 111] Connection refused`."""
    if isinstance(reason, OSError) and reason.strerror:
        return str(reason.strerror)
    return str(reason) or type(reason).__name__


def registry_url(text: str | None) -> str:
    url = (text or os.environ.get(REGISTRY_URL_ENV) or DEFAULT_REGISTRY_URL).strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment:
        raise CliError(f"--registry-url: {url!r} is not http(s)://HOST:PORT", EXIT_USAGE)
    try:
        parts.port  # noqa: B018 -- raises for a port that is not a number
    except ValueError:
        raise CliError(f"--registry-url: {url!r} has no valid port", EXIT_USAGE) from None
    return url.rstrip("/")


def connect(args: argparse.Namespace) -> Registry:
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    return Registry(registry_url(args.registry_url), timeout)


# ---- the options -------------------------------------------------------------------------------

def version_arg(text: str) -> str:
    """A version number (1 or more) or `latest`."""
    if text.strip().lower() in (LATEST, "-1"):
        return LATEST
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a version: {text!r} (a number or latest)"
                                         ) from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"a version is 1 or more, not {number}")
    return str(number)


def schema_id_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a schema id: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a schema id is not negative: {value}")
    return value


def _upper(choices: tuple[str, ...]) -> Any:
    def convert(text: str) -> str:
        value = text.strip().upper()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(choices)}")
        return value
    return convert


def common_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("registry and output")
    group.add_argument("--registry-url", metavar="URL",
                       help=f"the schema registry (default: ${REGISTRY_URL_ENV} or "
                       f"{DEFAULT_REGISTRY_URL})")
    group.add_argument("--timeout", metavar="DURATION", type=parse_duration, default=None,
                       help="how long the command may wait for the registry, all its "
                       f"requests together, e.g. 10s, 500ms (default {DEFAULT_TIMEOUT:g}s)")
    group.add_argument("--json", action="store_true", help="machine-readable JSON output")
    return parent


def schema_options(*, normalize: bool) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("the schema")
    source = group.add_mutually_exclusive_group(required=True)
    source.add_argument("--schema-file", metavar="FILE",
                        help="a file holding the schema (- for stdin)")
    source.add_argument("--schema", metavar="JSON", help="the schema itself")
    group.add_argument("--type", type=_upper(SCHEMA_TYPES), default="AVRO",
                       metavar="|".join(SCHEMA_TYPES), help="the schema's type (default AVRO)")
    group.add_argument("--reference", action="append", default=[],
                       metavar="NAME=SUBJECT:VERSION",
                       help="a schema it refers to, by the name it uses, as a subject's "
                       "version (a number or latest); repeatable")
    if normalize:
        group.add_argument("--normalize", action="store_true",
                           help="let the registry store the schema in its normal form")
    return parent


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    subject: str
    version: str  # a number, or latest until resolved


def parse_reference(text: str) -> Reference:
    name, sep, target = text.partition("=")
    subject, colon, version = target.rpartition(":")
    if not sep or not name.strip() or not colon or not subject:
        raise CliError(f"--reference wants NAME=SUBJECT:VERSION, not {text!r}", EXIT_USAGE)
    try:
        version = version_arg(version)
    except argparse.ArgumentTypeError as e:
        raise CliError(f"--reference {text}: {e}", EXIT_USAGE) from None
    return Reference(name.strip(), subject, version)


def read_schema(args: argparse.Namespace) -> str:
    if args.schema is not None:
        return str(args.schema)
    path = args.schema_file
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE) from e
    except UnicodeDecodeError as e:
        raise CliError(f"cannot read {path}: not UTF-8 text ({e.reason})", EXIT_USAGE) from e


def schema_body(registry: Registry, args: argparse.Namespace) -> dict[str, Any]:
    """The request body of a schema: Confluent's {"schema", "schemaType", "references"}, a
    reference to `latest` resolved to that version's number."""
    references = [parse_reference(text) for text in args.reference]
    body: dict[str, Any] = {"schema": read_schema(args)}
    if args.type != "AVRO":  # as Confluent's clients: AVRO, the default, left out
        body["schemaType"] = args.type
    if references:
        body["references"] = [
            {"name": r.name, "subject": r.subject,
             "version": int(registry.version(r.subject, LATEST)["version"])
             if r.version == LATEST else int(r.version)}
            for r in references]
    return body


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    schemas = commands.add_parser(
        "schemas", help="list, get, register, check and delete the schemas of a schema "
        "registry, and its compatibility levels")
    actions = schemas.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = common_options()

    listing = actions.add_parser("list", parents=[common],
                                 help="the subjects, each with its latest version, id and "
                                 "type")
    listing.add_argument("--prefix", metavar="P", help="only subjects whose name starts so")
    listing.add_argument("--deleted", action="store_true",
                         help="soft-deleted subjects too")
    listing.set_defaults(run=run_list)

    get = actions.add_parser("get", parents=[common],
                             help="a subject's version (the latest by default), or a schema "
                             "by its id: the schema, pretty-printed, with its subject, "
                             "version, id and type")
    get.add_argument("subject", nargs="?", metavar="SUBJECT")
    get.add_argument("--version", type=version_arg, metavar="N|latest",
                     help="the version (default latest)")
    get.add_argument("--id", type=schema_id_arg, metavar="ID",
                     help="the schema with this id (no SUBJECT)")
    get.set_defaults(run=run_get)

    reg = actions.add_parser("register", parents=[common, schema_options(normalize=True)],
                             help="register a schema in a subject: its id, new or not")
    reg.add_argument("subject", metavar="SUBJECT")
    reg.set_defaults(run=run_register)

    check = actions.add_parser("check", parents=[common, schema_options(normalize=False)],
                               help="whether a schema may follow a subject's versions "
                               "(exit 0) or not (exit 1, with the reasons)")
    check.add_argument("subject", metavar="SUBJECT")
    check.add_argument("--version", type=version_arg, metavar="N|latest",
                       help="check against this version alone (default: the versions "
                       "the subject's compatibility level names, as registering would)")
    check.set_defaults(run=run_check)

    delete = actions.add_parser("delete", parents=[common],
                                help="soft-delete a subject or one version of it; "
                                "--permanent after a soft delete removes it for good")
    delete.add_argument("subject", metavar="SUBJECT")
    delete.add_argument("--version", type=version_arg, metavar="N|latest",
                        help="this version alone (default: every version)")
    delete.add_argument("--permanent", action="store_true",
                        help="remove what was soft-deleted before, for good")
    delete.set_defaults(run=run_delete)

    config = actions.add_parser("config", parents=[common],
                                help="show or set the compatibility level, global or a "
                                "subject's")
    config.add_argument("subject", nargs="?", metavar="SUBJECT",
                        help="the subject (default: the global level)")
    change = config.add_mutually_exclusive_group()
    change.add_argument("--set", type=_upper(COMPATIBILITY_LEVELS), metavar="LEVEL",
                        help=", ".join(COMPATIBILITY_LEVELS))
    change.add_argument("--delete", action="store_true",
                        help="delete the subject's own level: it follows the global one")
    config.set_defaults(run=run_config)


# ---- output helpers ----------------------------------------------------------------------------

def _schema_value(text: str) -> Any:
    """The schema as JSON (for --json and pretty printing); the text when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pretty(text: str) -> str:
    value = _schema_value(text)
    if isinstance(value, str) and value == text:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def _reference_text(reference: dict[str, Any]) -> str:
    return f"{reference['name']}={reference['subject']}:{reference['version']}"


def _versions_text(versions: list[int]) -> str:
    if len(versions) == 1:
        return f"version {versions[0]}"
    return "versions " + ", ".join(str(v) for v in versions)


# ---- the commands ------------------------------------------------------------------------------

@command("schemas")
def run_list(args: argparse.Namespace) -> int:
    registry = connect(args)
    live = registry.subjects(args.prefix)
    names = registry.subjects(args.prefix, deleted=True) if args.deleted else live
    alive = set(live)
    found = []
    for subject in names:
        try:  # a subject's live latest; a deleted subject's latest of all
            latest = registry.version(subject, LATEST, deleted=subject not in alive)
        except RegistryError as e:
            if e.code in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND):
                continue  # deleted since it was listed
            raise
        found.append({"subject": subject, "version": latest.get("version"),
                      "id": latest.get("id"), "type": latest.get("schemaType") or "AVRO",
                      "deleted": subject not in alive})
    if args.json:
        print_json(found)
        return 0
    headers = ["subject", "version", "id", "type"] + (["deleted"] if args.deleted else [])
    print_table(headers, [[d["subject"], d["version"], d["id"], d["type"]]
                          + (["yes" if d["deleted"] else "no"] if args.deleted else [])
                          for d in found])
    return 0


@command("schemas")
def run_get(args: argparse.Namespace) -> int:
    if args.id is not None:
        if args.subject is not None or args.version is not None:
            raise CliError("get --id ID takes no SUBJECT or --version", EXIT_USAGE)
        return _get_by_id(args)
    if args.subject is None:
        raise CliError("get wants a SUBJECT (or --id ID)", EXIT_USAGE)
    registry = connect(args)
    answer = registry.version(args.subject, args.version or LATEST)
    schema = str(answer.get("schema", ""))
    found = {"subject": answer.get("subject", args.subject), "version": answer.get("version"),
             "id": answer.get("id"), "type": answer.get("schemaType") or "AVRO",
             "references": answer.get("references") or [], "schema": _schema_value(schema)}
    if args.json:
        print_json(found)
        return 0
    print(f"subject: {found['subject']}")
    print(f"version: {found['version']}")
    print(f"id: {found['id']}")
    print(f"type: {found['type']}")
    if found["references"]:
        print("references: " + ", ".join(_reference_text(r) for r in found["references"]))
    print(_pretty(schema))
    return 0


def _get_by_id(args: argparse.Namespace) -> int:
    registry = connect(args)
    answer = registry.request("GET", f"/schemas/ids/{args.id}")
    uses = registry.request("GET", f"/schemas/ids/{args.id}/versions")
    schema = str(answer.get("schema", ""))
    found = {"id": args.id, "type": answer.get("schemaType") or "AVRO",
             "references": answer.get("references") or [],
             "versions": [{"subject": u["subject"], "version": u["version"]} for u in uses],
             "schema": _schema_value(schema)}
    if args.json:
        print_json(found)
        return 0
    print(f"id: {found['id']}")
    print(f"type: {found['type']}")
    if found["references"]:
        print("references: " + ", ".join(_reference_text(r) for r in found["references"]))
    print("used by: " + (", ".join(f"{u['subject']} version {u['version']}"
                                   for u in found["versions"]) or "-"))
    print(_pretty(schema))
    return 0


@command("schemas")
def run_register(args: argparse.Namespace) -> int:
    registry = connect(args)
    body = schema_body(registry, args)
    path = f"/subjects/{_quote(args.subject)}"
    before = set(registry.versions(args.subject))
    answer = registry.request("POST", f"{path}/versions", body,
                              query={"normalize": args.normalize})
    schema_id = answer["id"]
    # Which version holds it, and whether that version was there before.
    try:
        found = registry.request("POST", path, body, query={"normalize": args.normalize})
        version = found.get("version")
        new = version not in before
    except RegistryError:  # a registry that cannot look it up: the versions tell
        after = set(registry.versions(args.subject)) - before
        version, new = (max(after) if after else None), bool(after)
    if args.json:
        print_json({"subject": args.subject, "version": version, "id": schema_id,
                    "new": new})
    elif new:
        print(f"Registered {args.subject} version {version}: schema id {schema_id}.")
    else:
        print(f"Already registered: {args.subject} version {version}, schema id "
              f"{schema_id}.")
    return 0


@command("schemas")
def run_check(args: argparse.Namespace) -> int:
    registry = connect(args)
    body = schema_body(registry, args)
    path = f"/compatibility/subjects/{_quote(args.subject)}/versions"
    if args.version is not None:
        path += f"/{args.version}"
    answer = registry.request("POST", path, body, query={"verbose": True})
    level, _ = registry.level(args.subject)
    compatible = bool(answer.get("is_compatible"))
    messages = [str(m) for m in answer.get("messages") or []]
    version: int | str | None = args.version
    if version is not None and version != LATEST:
        version = int(version)
    if args.json:
        print_json({"subject": args.subject, "version": version, "compatibility": level,
                    "compatible": compatible, "messages": messages})
        return 0 if compatible else EXIT_FAILURE
    if version == LATEST:
        against = f"the latest version of {args.subject}"
    elif version is not None:
        against = f"{args.subject} version {version}"
    else:
        against = args.subject
    if compatible:
        empty = version is None and not registry.versions(args.subject)
        print(f"Compatible with {against} ({level})"
              + (": it has no versions yet." if empty else "."))
        return 0
    print(f"Not compatible with {against} ({level}):")
    for message in messages or ["(the registry gave no reasons)"]:
        print(f"  {message}")
    return EXIT_FAILURE


@command("schemas")
def run_delete(args: argparse.Namespace) -> int:
    registry = connect(args)
    path = f"/subjects/{_quote(args.subject)}"
    if args.version is not None:
        path += f"/versions/{args.version}"
    answer = registry.request("DELETE", path, query={"permanent": args.permanent})
    versions = [int(v) for v in (answer if isinstance(answer, list) else [answer])]
    if args.json:
        print_json({"subject": args.subject, "versions": versions,
                    "permanent": args.permanent})
    elif args.permanent:
        print(f"Permanently deleted {args.subject} {_versions_text(versions)}.")
    else:
        print(f"Soft-deleted {args.subject} {_versions_text(versions)} (`delete "
              f"--permanent` removes {'them' if len(versions) > 1 else 'it'} for good).")
    return 0


@command("schemas")
def run_config(args: argparse.Namespace) -> int:
    subject = args.subject
    registry = connect(args)
    where = subject if subject is not None else "the global level"
    path = "/config" + (f"/{_quote(subject)}" if subject is not None else "")
    if args.set is not None:
        answer = registry.request("PUT", path, {"compatibility": args.set})
        level = str(answer.get("compatibility", args.set))
        if args.json:
            print_json({"subject": subject, "compatibility": level})
        else:
            print(f"Set the compatibility level of {where} to {level}."
                  if subject is not None else f"Set the global compatibility level to {level}.")
        return 0
    if args.delete:
        if subject is None:
            raise CliError("config --delete wants a SUBJECT (the global level can only be "
                           "--set)", EXIT_USAGE)
        level, own = registry.level(subject)
        if not own:
            raise CliError(f"{subject} has no compatibility level of its own (it follows "
                           f"the global level, {level})")
        registry.request("DELETE", path)
        now, _ = registry.level(None)
        if args.json:
            print_json({"subject": subject, "deleted": level, "compatibility": now})
        else:
            print(f"Deleted the compatibility level of {subject} (was {level}): it follows "
                  f"the global level, {now}.")
        return 0
    level, own = registry.level(subject)
    if args.json:
        print_json({"subject": subject, "compatibility": level,
                    "source": "subject" if own else "global"})
    elif subject is None:
        print(f"global: {level}")
    elif own:
        print(f"{subject}: {level}")
    else:
        print(f"{subject}: {level} (the global level: none of its own)")
    return 0
