"""`odradek schemas` against a registry process (`odradek registry`) beside a broker
process: each subcommand's text and --json output, a check that fails with the registry's
reason and exit 1, and the errors (the registry's, in its words and code; a registry that
cannot be reached or does not answer, by its URL).

The real command, `python -m odradek schemas ...`, costs a Python process of a second or
two, so a test runs the commands that do not depend on each other at the same time, makes
the state they read with plain REST calls, and the rarer paths (usage mistakes, more of the
registry's error codes) are run in this process, through the same `main()`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.broker import BrokerProcess
from support.registry import RegistryProcess, running_registry
from test_cli import Run, failed, ok

from odradek.cli.main import main


def avro_record(name: str, *fields: dict[str, object]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop",
                       "fields": list(fields)})


ID = {"name": "id", "type": "long"}
ITEM = {"name": "item", "type": "string"}
EMAIL = {"name": "email", "type": ["null", "string"], "default": None}
PHONE = {"name": "phone", "type": "string"}  # no default: BACKWARD refuses it
ADDRESS = avro_record("Address", {"name": "street", "type": "string"})
CUSTOMER = avro_record("Customer", {"name": "address", "type": "shop.Address"})
PAYMENT = json.dumps({"type": "object", "properties": {"amount": {"type": "number"}}})


def order(name: str, *extra: dict[str, object]) -> str:
    """An Avro record of its own name: a schema no other test registers (one id each)."""
    return avro_record(name, ID, ITEM, *extra)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("schemas-broker")).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
    yield from running_registry(broker.bootstrap)


Command = tuple[str, ...]


def _env(url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "ODRADEK_REGISTRY_URL" and not k.lower().endswith("_proxy")}
    if url is not None:
        env["ODRADEK_REGISTRY_URL"] = url
    return env


def schemas(url: str | None, *args: str, stdin: bytes = b"", env_url: str | None = None
            ) -> Run:
    """`python -m odradek schemas ARGS --registry-url URL` (no --registry-url for None)."""
    url_args = ("--registry-url", url) if url is not None else ()
    done = subprocess.run([sys.executable, "-m", "odradek", "schemas", *args, *url_args],
                          input=stdin, capture_output=True, timeout=60, env=_env(env_url))
    return Run(done)


def at_once(url: str, *commands: Command) -> list[Run]:
    """Commands that do not depend on each other, run at the same time; their runs in the
    order given."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: schemas(url, *args), commands))


class InProcess:
    """A command run through odradek.cli.main.main() here: code, out, err as a Run's."""

    def __init__(self, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
        try:
            self.code = main(argv)
        except SystemExit as e:  # argparse's usage errors
            self.code = int(e.code or 0)
        captured = capsys.readouterr()
        self.out, self.err = captured.out, captured.err

    def __repr__(self) -> str:
        return f"exit {self.code}\nstdout: {self.out}\nstderr: {self.err}"


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str], registry: RegistryProcess,
         monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("ODRADEK_REGISTRY_URL", raising=False)

    def run(*args: str) -> InProcess:
        return InProcess(capsys, ["schemas", *args, "--registry-url", registry.url])
    return run


def rest(registry: RegistryProcess, method: str, path: str, body: Any = None) -> Any:
    status, answer = registry.call(method, path, body)
    assert status == 200, (method, path, status, answer)
    return answer


# ---- the subcommands, as processes -------------------------------------------------------------

def test_register_new_then_already_registered(registry: RegistryProcess, tmp_path: Path
                                              ) -> None:
    v1, v2 = order("Registered"), order("Registered", EMAIL)
    rest(registry, "POST", "/subjects/register-address/versions", {"schema": ADDRESS})
    first, customer = at_once(
        registry.url, ("register", "register-value", "--schema", v1),
        ("register", "register-customer", "--schema", CUSTOMER, "--reference",
         "shop.Address=register-address:latest", "--json"))
    schema_id = rest(registry, "GET", "/subjects/register-value/versions/1")["id"]
    assert ok(first).out == f"Registered register-value version 1: schema id {schema_id}.\n"
    assert ok(customer).json()["new"] is True
    assert rest(registry, "GET", "/subjects/register-customer/versions/1")["references"] == [
        {"name": "shop.Address", "subject": "register-address", "version": 1}]
    # The same schema again (from a file, whitespace aside): its id, no new version; and
    # from stdin, a new one.
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(json.loads(v1), indent=4))
    again = ok(schemas(registry.url, "register", "register-value", "--schema-file", str(path),
                       "--json")).json()
    assert again == {"subject": "register-value", "version": 1, "id": schema_id, "new": False}
    second = ok(schemas(registry.url, "register", "register-value", "--schema-file", "-",
                        stdin=v2.encode()))
    second_id = rest(registry, "GET", "/subjects/register-value/versions/2")["id"]
    assert second.out == f"Registered register-value version 2: schema id {second_id}.\n"
    assert second_id != schema_id


def test_get_by_subject_and_by_id(registry: RegistryProcess) -> None:
    v1, v2 = order("Got"), order("Got", EMAIL)
    rest(registry, "POST", "/subjects/get-value/versions", {"schema": v1})
    v2_id = rest(registry, "POST", "/subjects/get-value/versions", {"schema": v2})["id"]
    rest(registry, "POST", "/subjects/get-address/versions", {"schema": ADDRESS})
    customer_id = rest(registry, "POST", "/subjects/get-customer/versions", {
        "schema": CUSTOMER, "references": [{"name": "shop.Address", "subject": "get-address",
                                            "version": 1}]})["id"]
    latest, first, by_id, by_id_json = at_once(
        registry.url, ("get", "get-value"), ("get", "get-value", "--version", "1", "--json"),
        ("get", "--id", str(customer_id)), ("get", "--id", str(v2_id), "--json"))
    assert ok(latest).out == (f"subject: get-value\nversion: 2\nid: {v2_id}\ntype: AVRO\n"
                              f"{json.dumps(json.loads(v2), indent=2)}\n")
    assert ok(first).json() == {"subject": "get-value", "version": 1,
                                "id": first.json()["id"], "type": "AVRO", "references": [],
                                "schema": json.loads(v1)}
    assert ok(by_id).out == (f"id: {customer_id}\ntype: AVRO\n"
                             "references: shop.Address=get-address:1\n"
                             "used by: get-customer version 1\n"
                             f"{json.dumps(json.loads(CUSTOMER), indent=2)}\n")
    assert ok(by_id_json).json() == {
        "id": v2_id, "type": "AVRO", "references": [],
        "versions": [{"subject": "get-value", "version": 2}], "schema": json.loads(v2)}


def test_list_subjects_with_their_latest_version(registry: RegistryProcess) -> None:
    rest(registry, "POST", "/subjects/list-a/versions", {"schema": order("ListA")})
    a2 = rest(registry, "POST", "/subjects/list-a/versions",
              {"schema": order("ListA", EMAIL)})["id"]
    b1 = rest(registry, "POST", "/subjects/list-b/versions",
              {"schema": PAYMENT, "schemaType": "JSON"})["id"]
    c1 = rest(registry, "POST", "/subjects/list-c/versions", {"schema": order("ListC")})["id"]
    rest(registry, "DELETE", "/subjects/list-c")
    text, with_deleted = at_once(registry.url, ("list", "--prefix", "list-"),
                                 ("list", "--prefix", "list-", "--deleted", "--json"))
    lines = ok(text).out.splitlines()
    assert [line.split() for line in lines] == [
        ["SUBJECT", "VERSION", "ID", "TYPE"], ["list-a", "2", str(a2), "AVRO"],
        ["list-b", "1", str(b1), "JSON"]], text
    assert lines[1].index(str(a2)) == lines[0].index("ID")  # aligned columns
    assert ok(with_deleted).json() == [
        {"subject": "list-a", "version": 2, "id": a2, "type": "AVRO", "deleted": False},
        {"subject": "list-b", "version": 1, "id": b1, "type": "JSON", "deleted": False},
        {"subject": "list-c", "version": 1, "id": c1, "type": "AVRO", "deleted": True}]


def test_check_compatible_and_not(registry: RegistryProcess) -> None:
    rest(registry, "POST", "/subjects/check-value/versions", {"schema": order("Checked")})
    compatible, refused, refused_json = at_once(
        registry.url, ("check", "check-value", "--schema", order("Checked", EMAIL)),
        ("check", "check-value", "--schema", order("Checked", PHONE)),
        ("check", "check-value", "--schema", order("Checked", PHONE), "--version", "1",
         "--json"))
    assert ok(compatible).out == "Compatible with check-value (BACKWARD).\n"
    assert (refused.code, refused.err) == (1, ""), refused
    assert refused.out.startswith("Not compatible with check-value (BACKWARD):\n  {errorType:"
                                  "'READER_FIELD_MISSING_DEFAULT_VALUE'"), refused
    assert "'phone'" in refused.out
    assert refused_json.code == 1, refused_json
    answer = refused_json.json()
    assert {k: v for k, v in answer.items() if k != "messages"} == {
        "subject": "check-value", "version": 1, "compatibility": "BACKWARD",
        "compatible": False}
    assert len(answer["messages"]) == 1 and "phone" in answer["messages"][0]
    assert rest(registry, "GET", "/subjects/check-value/versions") == [1]  # checked only


def test_delete_soft_then_permanent(registry: RegistryProcess) -> None:
    for schema in (order("Deleted"), order("Deleted", EMAIL), order("Deleted", EMAIL, {
            "name": "note", "type": "string", "default": ""})):
        rest(registry, "POST", "/subjects/delete-value/versions", {"schema": schema})
    version = ok(schemas(registry.url, "delete", "delete-value", "--version", "1"))
    assert version.out == ("Soft-deleted delete-value version 1 (`delete --permanent` "
                           "removes it for good).\n")
    soft = ok(schemas(registry.url, "delete", "delete-value", "--json")).json()
    assert soft == {"subject": "delete-value", "versions": [2, 3], "permanent": False}
    assert "delete-value" not in rest(registry, "GET", "/subjects")
    gone = ok(schemas(registry.url, "delete", "delete-value", "--permanent"))
    assert gone.out == "Permanently deleted delete-value versions 1, 2, 3.\n"
    assert "delete-value" not in rest(registry, "GET", "/subjects?deleted=true")


def test_config_global_and_per_subject(registry: RegistryProcess) -> None:
    rest(registry, "POST", "/subjects/config-value/versions", {"schema": order("Configured")})
    shown, changed = at_once(registry.url, ("config",),
                             ("config", "config-value", "--set", "full_transitive"))
    assert ok(shown).out == "global: BACKWARD\n"
    assert ok(changed).out == "Set the compatibility level of config-value to FULL_TRANSITIVE.\n"
    own = ok(schemas(registry.url, "config", "config-value", "--json")).json()
    assert own == {"subject": "config-value", "compatibility": "FULL_TRANSITIVE",
                   "source": "subject"}
    deleted = ok(schemas(registry.url, "config", "config-value", "--delete", "--json")).json()
    assert deleted == {"subject": "config-value", "deleted": "FULL_TRANSITIVE",
                       "compatibility": "BACKWARD"}
    assert registry.call("GET", "/config/config-value")[1]["error_code"] == 40408


def test_errors_unknown_subject_invalid_schema_unreachable(registry: RegistryProcess
                                                           ) -> None:
    rest(registry, "POST", "/subjects/errors-value/versions", {"schema": order("Erroneous")})
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            unknown, invalid, refused, timed_out = pool.map(lambda a: schemas(*a), [
                (registry.url, "get", "no-such-subject"),
                (registry.url, "register", "errors-value", "--schema",
                 json.dumps({"type": "nonsense"})),
                (refused_url, "list"),
                (silent_url, "get", "errors-value", "--timeout", "1s")])
        elapsed = time.monotonic() - started
    for run in (unknown, invalid, refused, timed_out):
        assert run.code == 1 and run.out == "", run
        assert run.err.startswith("odradek schemas: ") and run.err.count("\n") == 1, run
    assert unknown.err == ("odradek schemas: Subject 'no-such-subject' not found. "
                           "(error 40401)\n")
    failed(invalid, 'Invalid schema {"type": "nonsense"}', "(error 42201)")
    assert refused.err == (f"odradek schemas: cannot reach the schema registry at "
                           f"{refused_url}: Connection refused\n")
    assert timed_out.err == (f"odradek schemas: no answer from the schema registry at "
                             f"{silent_url} within 1s\n")
    assert elapsed < 20  # not the default 30s
    assert rest(registry, "GET", "/subjects/errors-value/versions") == [1]


# ---- the rarer paths, in this process -----------------------------------------------------------

def test_more_registry_errors(registry: RegistryProcess, here: Any) -> None:
    rest(registry, "POST", "/subjects/more-errors/versions", {"schema": order("More")})
    rest(registry, "POST", "/subjects/more-errors/versions", {"schema": order("More", EMAIL)})
    cases = [
        (("get", "more-errors", "--version", "7"), "Version 7 not found. (error 40402)"),
        (("get", "--id", "999999"), "Schema 999999 not found (error 40403)"),
        (("check", "more-errors", "--schema", "{not json"), "not JSON"),
        (("check", "no-such-subject", "--schema", '"int"', "--version", "latest"),
         "Subject 'no-such-subject' not found. (error 40401)"),
        (("register", "more-errors", "--schema", order("More", PHONE)),
         "READER_FIELD_MISSING_DEFAULT_VALUE"),
        (("register", "more-other", "--schema", CUSTOMER, "--reference",
          "shop.Address=no-such-subject:1"), "(error 42201)"),
        (("delete", "more-errors", "--permanent"), "(error 40405)"),
        (("delete", "no-such-subject"), "(error 40401)"),
        (("config", "more-errors", "--delete"),
         "more-errors has no compatibility level of its own (it follows the global level, "
         "BACKWARD)"),
    ]
    for args, needle in cases:
        run = here(*args)
        assert run.code == 1 and run.out == "" and needle in run.err, (args, run)
        assert run.err.startswith("odradek schemas: ") and run.err.count("\n") == 1, run
    assert "(error 409)" in here("register", "more-errors", "--schema",
                                 order("More", PHONE)).err
    assert rest(registry, "GET", "/subjects/more-errors/versions") == [1, 2]


def test_more_output(registry: RegistryProcess, here: Any) -> None:
    rest(registry, "POST", "/subjects/output-value/versions", {"schema": order("Output")})
    assert here("config", "output-value").out == ("output-value: BACKWARD (the global "
                                                  "level: none of its own)\n")
    assert json.loads(here("config", "--json").out) == {"subject": None,
                                                        "compatibility": "BACKWARD",
                                                        "source": "global"}
    assert json.loads(here("config", "--set", "backward", "--json").out) == {
        "subject": None, "compatibility": "BACKWARD"}  # the default: nothing changes
    assert here("config", "output-value", "--set", "NONE").code == 0
    deleted = here("config", "output-value", "--delete")
    assert deleted.out == ("Deleted the compatibility level of output-value (was NONE): it "
                           "follows the global level, BACKWARD.\n")
    assert here("check", "output-nothing-yet", "--schema", '"int"').out == (
        "Compatible with output-nothing-yet (BACKWARD): it has no versions yet.\n")
    assert here("check", "output-value", "--schema", order("Output", EMAIL), "--version",
                "latest").out == "Compatible with the latest version of output-value (BACKWARD).\n"
    registered = json.loads(here("register", "output-json", "--schema", PAYMENT, "--type",
                                 "json", "--json").out)
    assert registered["new"] is True
    assert rest(registry, "GET", "/subjects/output-json/versions/1")["schemaType"] == "JSON"
    normalized = json.loads(here("register", "output-normalized", "--schema", order(
        "Normalized"), "--normalize", "--json").out)
    assert (normalized["version"], normalized["new"]) == (1, True)
    got = json.loads(here("get", "output-json", "--json").out)
    assert (got["type"], got["schema"]) == ("JSON", json.loads(PAYMENT))
    # A subject's name is one path segment, whatever it holds.
    odd = "team a/orders:v1"
    assert here("register", odd, "--schema", '"string"').code == 0
    assert here("get", odd).out.startswith(f"subject: {odd}\nversion: 1\n")
    assert here("delete", odd, "--version", "latest").code == 0


def test_usage_errors(here: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (("register", "x", "--schema-file", "/no/such/file.avsc"),
         "cannot read /no/such/file.avsc"),
        (("register", "x", "--schema", '"int"', "--reference", "no-colon"),
         "NAME=SUBJECT:VERSION"),
        (("register", "x", "--schema", '"int"', "--schema-file", "f"), "not allowed with"),
        (("register", "x"), "one of the arguments --schema-file --schema is required"),
        (("config", "--set", "sideways"), "FULL_TRANSITIVE"),
        (("config", "--delete"), "config --delete wants a SUBJECT"),
        (("get", "x", "--id", "1"), "get --id ID takes no SUBJECT"),
        (("get",), "get wants a SUBJECT"),
        (("get", "x", "--version", "0"), "a version is 1 or more"),
    ]
    for args, needle in cases:
        run = here(*args)
        assert run.code == 2 and needle in run.err, (args, run)
    run = InProcess(capsys, ["schemas", "list", "--registry-url", "ftp://host"])
    assert run.code == 2 and run.err == ("odradek schemas: --registry-url: 'ftp://host' is "
                                         "not http(s)://HOST:PORT\n"), run


def test_registry_url_from_the_environment(registry: RegistryProcess,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rest(registry, "POST", "/subjects/env-value/versions", {"schema": order("Env")})
    monkeypatch.setenv("ODRADEK_REGISTRY_URL", registry.url + "/")
    run = InProcess(capsys, ["schemas", "list", "--prefix", "env-", "--json"])
    assert [s["subject"] for s in json.loads(run.out)] == ["env-value"], run
    monkeypatch.setenv("ODRADEK_REGISTRY_URL", "http://127.0.0.1:1")
    run = InProcess(capsys, ["schemas", "config"])
    assert run.err == ("odradek schemas: cannot reach the schema registry at "
                       "http://127.0.0.1:1: Connection refused\n")
