"""`odradek acls` and `odradek users` run as real processes against a broker process with
Kafka's AclAuthorizer, SASL (PLAIN users in the JAAS line, SCRAM users in the store) on
SASL_PLAINTEXT and SASL_SSL listeners: what kafka-acls.sh and `kafka-configs.sh
--entity-type users` do, and then real clients as the users those commands made or
allowed. Security settings go in through --command-config and -X, as for every command."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from support.broker import BrokerProcess
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore
from test_cli import Run, failed, odradek, ok

from odradek.cli import acls
from odradek.cli.main import build_parser, main

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
HEADERS = ["RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION",
           "PERMISSION"]


def jaas(module: str, users: dict[str, str] | None = None) -> str:
    options = " ".join(f'user_{u}="{p}"' for u, p in (users or {}).items())
    return f"org.apache.kafka.common.security.{module} required {options};"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority("Odradek Test CA")
    return {"ca": str(write_pem_truststore(d / "ca.pem", ca)),
            "server": str(write_pem_keystore(d / "server.pem", ca.issue()))}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, tls: dict[str, str]
           ) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": tls["server"],
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = jaas(
            "plain.PlainLoginModule", PLAIN_USERS)
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = jaas(
                "scram.ScramLoginModule")
    process = BrokerProcess(tmp_path_factory.mktemp("acls-users"), settings).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def settings(broker: BrokerProcess, user: str, password: str | None = None,
             mechanism: str = "PLAIN", ca: str | None = None) -> dict[str, str]:
    """librdkafka settings to connect as a user: SASL_SSL when given the CA to trust,
    else SASL_PLAINTEXT."""
    listener = "SASL_PLAINTEXT" if ca is None else "SASL_SSL"
    out = {"bootstrap.servers": broker.address(listener), "security.protocol": listener,
           "sasl.mechanism": mechanism, "sasl.username": user,
           "sasl.password": password if password is not None else PLAIN_USERS[user]}
    if ca is not None:
        out["ssl.ca.location"] = ca
    return out


@pytest.fixture(scope="module")
def configs(broker: BrokerProcess, tls: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """--command-config files: admin, alice and bob over SASL_PLAINTEXT, admin over
    SASL_SSL."""
    d = tmp_path_factory.mktemp("client-configs")
    files = {user: settings(broker, user) for user in PLAIN_USERS}
    files["admin-ssl"] = settings(broker, "admin", ca=tls["ca"])
    out = {}
    for name, values in files.items():
        path = d / f"{name}.properties"
        path.write_text("# client settings\n" + "".join(f"{k}={v}\n" for k, v in values.items()))
        out[name] = path
    return out


def cli(config: Path | None, *args: str, stdin: bytes = b"") -> Run:
    """`python -m odradek ARGS --command-config CONFIG`; no $ODRADEK_BOOTSTRAP: the
    file names the listener."""
    extra = ["--command-config", str(config)] if config is not None else []
    return odradek(None, *args, *extra, stdin=stdin)


def suffix() -> str:
    return uuid.uuid4().hex[:6]


def acl(kind: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
        pattern: str = "LITERAL", host: str = "*") -> dict[str, str]:
    return {"resource_type": kind, "resource_name": name, "pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation,
            "permission_type": permission}


def key(a: dict[str, Any]) -> tuple[str, ...]:
    return tuple(a[k] for k in ("resource_type", "resource_name", "pattern_type", "principal",
                                "host", "operation", "permission_type"))


def same(got: list[dict[str, Any]], *expected: dict[str, str]) -> bool:
    return sorted(map(key, got)) == sorted(map(key, expected))


def listed(config: Path, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok(cli(config, "acls", "list", "--json", *args)).json()
    return found


def login(broker: BrokerProcess, user: str, password: str, mechanism: str,
          ca: str | None = None) -> str | None:
    """None when the user can log in (a Metadata request answered), else librdkafka's
    authentication error."""
    errors: list[KafkaError] = []
    admin = AdminClient({**settings(broker, user, password, mechanism, ca),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return None
        except KafkaException:
            admin.poll(0.1)
        for e in errors:
            if e.code() == KafkaError._AUTHENTICATION:
                return str(e.str())
    raise AssertionError(f"neither logged in nor refused: {errors}")


# ---- acls -------------------------------------------------------------------------------

def test_literal_acls_of_topics_groups_and_the_cluster(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    added = ok(cli(admin, "acls", "add", "--allow-principal", "User:alice", "--operation",
                   "Read", "--operation", "describe", "--topic", f"t-{s}", "--group",
                   f"g-{s}", "--json")).json()
    assert same(added, *(acl(kind, f"{kind[0].lower()}-{s}", "User:alice", op)
                         for kind in ("TOPIC", "GROUP") for op in ("READ", "DESCRIBE")))
    assert all(a["error"] is None for a in added)
    run = ok(cli(admin, "acls", "add", "--allow-principal", "User:alice", "--allow-principal",
                 f"User:ops-{s}", "--operation", "AlterConfigs", "--cluster"))
    lines = run.out.splitlines()
    assert lines[0] == "Added 2 ACLs:" and lines[1].split() == HEADERS
    assert ["CLUSTER", "kafka-cluster", "LITERAL", f"User:ops-{s}", "*", "ALTER_CONFIGS",
            "ALLOW"] in [line.split() for line in lines[2:]]

    assert same(listed(admin, "--topic", f"t-{s}"),
                *(acl("TOPIC", f"t-{s}", "User:alice", op) for op in ("READ", "DESCRIBE")))
    assert same(listed(admin, "--cluster", "--principal", f"User:ops-{s}"),
                acl("CLUSTER", "kafka-cluster", f"User:ops-{s}", "ALTER_CONFIGS"))
    table = ok(cli(admin, "acls", "list", "--group", f"g-{s}")).out.splitlines()
    assert table[0].split() == HEADERS
    assert sorted(line.split() for line in table[1:]) == [
        ["GROUP", f"g-{s}", "LITERAL", "User:alice", "*", op, "ALLOW"]
        for op in ("DESCRIBE", "READ")]
    ok(cli(admin, "acls", "remove", "--force", "--cluster", "--allow-principal",
           f"User:ops-{s}", "--operation", "AlterConfigs"))
    assert listed(admin, "--principal", f"User:ops-{s}") == []


def test_remove_needs_force_and_takes_what_the_options_pick(configs: dict[str, Path]
                                                            ) -> None:
    s = suffix()
    admin = configs["admin"]
    ok(cli(admin, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
           "--operation", "Describe", "--topic", f"t-{s}", "--group", f"g-{s}"))
    # Without --force nothing goes: what would is listed, and the exit status says so.
    run = failed(cli(admin, "acls", "remove", "--topic", f"t-{s}", "--group", f"g-{s}"),
                 "4 ACLs match; nothing removed: add --force")
    assert len(run.out.splitlines()) == 5
    assert len(listed(admin, "--topic", f"t-{s}")) == 2
    # Principals and operations pick exactly those ACLs; without them, every ACL goes.
    removed = ok(cli(admin, "acls", "remove", "--force", "--topic", f"t-{s}",
                     "--allow-principal", "User:alice", "--operation", "Read",
                     "--json")).json()
    assert removed["removed"] is True and removed["errors"] == []
    assert same(removed["acls"], acl("TOPIC", f"t-{s}", "User:alice", "READ"))
    removed = ok(cli(admin, "acls", "remove", "--force", "--topic", f"t-{s}", "--group",
                     f"g-{s}", "--json")).json()
    assert len(removed["acls"]) == 3
    assert listed(admin, "--topic", f"t-{s}", "--group", f"g-{s}") == []


def test_prefixed_acls_and_the_match_and_any_filters(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    added = ok(cli(admin, "acls", "add", "--resource-pattern-type", "prefixed",
                   "--allow-principal", "User:alice", "--deny-principal", "User:bob",
                   "--deny-host", "10.0.0.7", "--operation", "Write", "--topic", f"p-{s}-",
                   "--transactional-id", f"tx-{s}-", "--json")).json()
    assert same(added, *(acl(kind, name, principal, "WRITE", permission, "PREFIXED", host)
                         for kind, name in (("TOPIC", f"p-{s}-"),
                                            ("TRANSACTIONAL_ID", f"tx-{s}-"))
                         for principal, permission, host in (("User:alice", "ALLOW", "*"),
                                                             ("User:bob", "DENY",
                                                              "10.0.0.7"))))
    ok(cli(admin, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
           "--topic", f"p-{s}-orders"))

    # literal (the default) sees the name as it is; match every pattern that applies to
    # the name; any every pattern type of exactly that name.
    assert same(listed(admin, "--topic", f"p-{s}-orders"),
                acl("TOPIC", f"p-{s}-orders", "User:alice", "READ"))
    matched = listed(admin, "--topic", f"p-{s}-orders", "--resource-pattern-type", "match")
    assert sorted((a["resource_name"], a["pattern_type"], a["operation"]) for a in matched) == [
        (f"p-{s}-", "PREFIXED", "WRITE"), (f"p-{s}-", "PREFIXED", "WRITE"),
        (f"p-{s}-orders", "LITERAL", "READ")]
    assert len(listed(admin, "--topic", f"p-{s}-", "--resource-pattern-type", "any")) == 2
    assert same(listed(admin, "--transactional-id", f"tx-{s}-", "--resource-pattern-type",
                       "prefixed", "--principal", "User:bob"),
                acl("TRANSACTIONAL_ID", f"tx-{s}-", "User:bob", "WRITE", "DENY", "PREFIXED",
                    "10.0.0.7"))

    removed = ok(cli(admin, "acls", "remove", "--force", "--topic", f"p-{s}-orders",
                     "--resource-pattern-type", "match", "--json")).json()
    assert len(removed["acls"]) == 3
    removed = ok(cli(admin, "acls", "remove", "--force", "--transactional-id", f"tx-{s}-",
                     "--resource-pattern-type", "any", "--json")).json()
    assert len(removed["acls"]) == 2
    assert [a for a in listed(admin) if s in a["resource_name"]] == []


def test_producer_and_consumer_acls_let_real_clients_in(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    topic, group, tid = f"orders-{s}", f"billing-{s}", f"payments-{s}"
    ok(cli(admin, "topics", "create", topic, "--partitions", "1"))
    producer = ok(cli(admin, "acls", "add", "--producer", "--allow-principal", "User:alice",
                      "--topic", topic, "--transactional-id", tid, "--idempotent",
                      "--json")).json()
    # kafka-acls.sh's --producer: Write, Describe, Create on the topic, Write and Describe
    # on the transactional id, IdempotentWrite on the cluster.
    assert same(producer,
                *(acl("TOPIC", topic, "User:alice", op) for op in ("WRITE", "DESCRIBE",
                                                                   "CREATE")),
                *(acl("TRANSACTIONAL_ID", tid, "User:alice", op) for op in ("WRITE",
                                                                           "DESCRIBE")),
                acl("CLUSTER", "kafka-cluster", "User:alice", "IDEMPOTENT_WRITE"))
    consumer = ok(cli(admin, "acls", "add", "--consumer", "--allow-principal", "User:bob",
                      "--topic", topic, "--group", group, "--json")).json()
    # --consumer: Read and Describe on the topic, Read on the group.
    assert same(consumer, acl("TOPIC", topic, "User:bob", "READ"),
                acl("TOPIC", topic, "User:bob", "DESCRIBE"),
                acl("GROUP", group, "User:bob", "READ"))

    ok(cli(configs["alice"], "produce", topic, "--transactional-id", tid, "--timeout", "15s",
           stdin=b"paid\n"))
    run = ok(cli(configs["bob"], "consume", topic, "--group", group, "--from-beginning",
                 "-n", "1", "--timeout", "15s"))
    assert run.out == "paid\n"
    # bob may read but not write, alice write but not read.
    failed(cli(configs["bob"], "produce", topic, "--acks", "1", "--timeout", "5s",
               stdin=b"x\n"), "TOPIC_AUTHORIZATION_FAILED")
    # Idempotent (acks=all), bob is refused a producer id: the command names why.
    run = failed(cli(configs["bob"], "produce", topic, "--timeout", "5s", stdin=b"x\n"),
                 "odradek produce: the producer failed: CLUSTER_AUTHORIZATION_FAILED",
                 "line 1: CLUSTER_AUTHORIZATION_FAILED")
    assert run.code == 1 and "_PURGE_QUEUE" not in run.err, run

    # --producer removes what it added, and nothing else.
    removed = ok(cli(admin, "acls", "remove", "--force", "--producer", "--allow-principal",
                     "User:alice", "--topic", topic, "--transactional-id", tid,
                     "--idempotent", "--json")).json()
    assert same(removed["acls"], *producer)
    assert same(listed(admin, "--topic", topic, "--group", group), *consumer)


def test_a_user_who_is_not_a_super_user_is_refused(broker: BrokerProcess,
                                                   configs: dict[str, Path]) -> None:
    s = suffix()
    alice = configs["alice"]
    run = failed(cli(alice, "acls", "add", "--allow-principal", "User:alice", "--topic",
                     f"mine-{s}"), "odradek acls add: cannot add ACLs: "
                 "CLUSTER_AUTHORIZATION_FAILED", "ALTER on the cluster")
    assert run.code == 1 and len(run.err.strip().splitlines()) == 1
    # librdkafka would list nothing; the command says why.
    failed(cli(alice, "acls", "list"), "odradek acls list: cannot list ACLs: "
           "CLUSTER_AUTHORIZATION_FAILED")
    failed(cli(alice, "acls", "remove", "--force", "--topic", f"mine-{s}"),
           "CLUSTER_AUTHORIZATION_FAILED")
    # -X wins over --command-config: the admin's file, alice's credentials.
    failed(cli(configs["admin"], "users", "list", "-X", "sasl.username=alice", "-X",
               "sasl.password=alice-secret"), "odradek users list: cannot describe the "
           "SCRAM users: CLUSTER_AUTHORIZATION_FAILED")
    failed(cli(alice, "users", "add", f"u-{s}", "--password", "pw"),
           "CLUSTER_AUTHORIZATION_FAILED")
    # An anonymous client on the PLAINTEXT listener is no super user either.
    run = failed(odradek(broker, "acls", "list"), "CLUSTER_AUTHORIZATION_FAILED")
    assert run.code == 1
    # A wrong password is said at once, not after the timeout.
    started = time.monotonic()
    failed(cli(configs["admin"], "acls", "list", "-X", "sasl.password=guess"),
           "cannot authenticate: _AUTHENTICATION")
    assert time.monotonic() - started < 10
    assert listed(configs["admin"], "--topic", f"mine-{s}") == []


def test_acls_and_users_over_sasl_ssl(broker: BrokerProcess, tls: dict[str, str],
                                      configs: dict[str, Path]) -> None:
    s = suffix()
    admin_ssl = configs["admin-ssl"]
    assert "security.protocol=SASL_SSL" in admin_ssl.read_text()
    ok(cli(admin_ssl, "acls", "add", "--allow-principal", f"User:carol-{s}", "--operation",
           "Describe", "--topic", f"tls-{s}"))
    assert same(listed(admin_ssl, "--topic", f"tls-{s}"),
                acl("TOPIC", f"tls-{s}", f"User:carol-{s}", "DESCRIBE"))
    ok(cli(admin_ssl, "users", "add", f"carol-{s}", "--mechanism", "SCRAM-SHA-512",
           "--password", "carol-pw"))
    assert login(broker, f"carol-{s}", "carol-pw", "SCRAM-SHA-512", tls["ca"]) is None
    ok(cli(admin_ssl, "acls", "remove", "--force", "--topic", f"tls-{s}"))
    ok(cli(admin_ssl, "users", "delete", f"carol-{s}"))
    assert listed(configs["admin"], "--topic", f"tls-{s}") == []


def test_usage_mistakes_are_refused_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str]) -> None:
    no_broker = ["--bootstrap-server", "127.0.0.1:1"]
    for argv, message in [
        (["acls", "add", "--topic", "t"], "you must specify one of: --allow-principal"),
        (["acls", "add", "--allow-principal", "User:a"], "at least one resource"),
        (["acls", "add", "--allow-principal", "User:a", "--operation", "Write", "--group",
          "g"], "resource type GROUP only supports the operations Read, Describe, Delete"),
        (["acls", "add", "--allow-principal", "User:a", "--topic", "t",
          "--resource-pattern-type", "match"], "not valid when adding ACLs"),
        (["acls", "add", "--producer", "--allow-principal", "User:a", "--group", "g"],
         "with --producer you must specify a --topic"),
        (["acls", "add", "--consumer", "--allow-principal", "User:a", "--topic", "t"],
         "with --consumer you must specify a --topic and a --group"),
        (["acls", "add", "--producer", "--allow-principal", "User:a", "--topic", "t",
          "--operation", "Read"], "--operation does not go with --producer"),
        (["acls", "add", "--idempotent", "--allow-principal", "User:a", "--topic", "t"],
         "--idempotent is only available with --producer"),
        (["acls", "remove", "--topic", "t", "--allow-host", "10.0.0.1"],
         "--allow-host needs --allow-principal"),
        (["users", "add", "u", "--password", "p", "--mechanism", "SCRAM-SHA-1"],
         "unknown SCRAM mechanism 'SCRAM-SHA-1'"),
        (["users", "add", "u", "v", "--password", "p"], "add takes one user"),
        (["users", "delete"], "name the users to delete"),
    ]:
        assert main([*argv, *no_broker]) == 2, argv
        assert message in capsys.readouterr().err, argv
    for argv, message in [
        (["acls", "add", "--allow-principal", "alice", "--topic", "t"], "TYPE:NAME"),
        (["acls", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
         "unknown operation 'Fly'"),
        (["acls", "list", "--resource-pattern-type", "glob"], "unknown pattern type"),
        (["acls", "list", "--allow-principal", "User:a"], "unrecognized arguments"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, argv


def test_producer_and_consumer_together_expand_as_kafka_acls_does() -> None:
    args = build_parser().parse_args([
        "acls", "add", "--producer", "--consumer", "--allow-principal", "User:a",
        "--allow-host", "10.0.0.1", "--topic", "t", "--group", "g", "--transactional-id",
        "x", "--resource-pattern-type", "prefixed"])
    acls.check_options(args, "add")
    expanded = {(kind.name, name, pattern.name):
                sorted((p, h, op.name, perm.name) for p, h, op, perm in entries)
                for (kind, name, pattern), entries in acls.requested_acls(args).items()}
    assert expanded == {
        ("TOPIC", "t", "PREFIXED"): [("User:a", "10.0.0.1", op, "ALLOW")
                                     for op in ("CREATE", "DESCRIBE", "READ", "WRITE")],
        ("TRANSACTIONAL_ID", "x", "PREFIXED"): [("User:a", "10.0.0.1", op, "ALLOW")
                                                for op in ("DESCRIBE", "WRITE")],
        ("GROUP", "g", "PREFIXED"): [("User:a", "10.0.0.1", "READ", "ALLOW")],
    }
    # Without principals, remove takes every ACL of each resource.
    args = build_parser().parse_args(["acls", "remove", "--topic", "t", "--cluster"])
    assert [(f.restype.name, f.name, f.principal, f.operation.name)
            for f in acls.removal_filters(args)] == [("TOPIC", "t", None, "ANY"),
                                                     ("BROKER", "kafka-cluster", None, "ANY")]


# ---- users ------------------------------------------------------------------------------

def test_scram_users_are_added_described_and_deleted(broker: BrokerProcess,
                                                     configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    carol, dave = f"carol-{s}", f"dave-{s}"
    secrets = [f"carol-secret-{s}", f"dave-secret-{s}"]
    runs = [ok(cli(admin, "users", "add", carol, "--mechanism", "both", "--iterations",
                   "8192", "--password", secrets[0], "--json"))]
    assert runs[0].json() == {"user": carol, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
                              "iterations": 8192}
    # Not a terminal: the password is stdin's first line.
    runs.append(ok(cli(admin, "users", "add", dave, stdin=secrets[1].encode() + b"\n")))
    assert runs[-1].out == (f"Completed updating config for user {dave}: SCRAM-SHA-256 with "
                            "4096 iterations.\n")
    runs.append(ok(cli(admin, "users", "describe", carol, "--entity-name", dave, "--json")))
    assert runs[-1].json() == [
        {"user": carol, "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192},
                                        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]},
        {"user": dave, "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}]
    runs.append(ok(cli(admin, "users", "list")))
    rows = [line.split() for line in runs[-1].out.splitlines()]
    assert rows[0] == ["USER", "MECHANISMS"]
    assert [carol, "SCRAM-SHA-256,SCRAM-SHA-512"] in rows and [dave, "SCRAM-SHA-256"] in rows

    assert login(broker, carol, secrets[0], "SCRAM-SHA-512") is None
    assert login(broker, dave, secrets[1], "SCRAM-SHA-256") is None
    assert "invalid credentials" in (login(broker, dave, "guess", "SCRAM-SHA-256") or "")

    runs.append(ok(cli(admin, "users", "delete", carol, "--mechanism", "SCRAM-SHA-512")))
    assert "invalid credentials" in (login(broker, carol, secrets[0], "SCRAM-SHA-512") or "")
    assert login(broker, carol, secrets[0], "SCRAM-SHA-256") is None
    runs.append(ok(cli(admin, "users", "delete", carol, dave, "--json")))
    assert runs[-1].json() == [{"user": carol, "mechanisms": ["SCRAM-SHA-256"]},
                               {"user": dave, "mechanisms": ["SCRAM-SHA-256"]}]
    assert "invalid credentials" in (login(broker, dave, secrets[1], "SCRAM-SHA-256") or "")
    runs.append(failed(cli(admin, "users", "describe", dave), "RESOURCE_NOT_FOUND"))
    runs.append(failed(cli(admin, "users", "add", dave, "--iterations", "100", "--password",
                           secrets[1]), "UNACCEPTABLE_CREDENTIAL: Too few iterations"))
    runs.append(failed(cli(admin, "users", "add", dave, stdin=b"\n"), "cannot be empty"))
    assert runs[-1].code == 2
    for run in runs:  # a password is never printed
        assert not any(secret in run.out + run.err for secret in secrets), run


def test_the_password_is_prompted_for_on_a_terminal(broker: BrokerProcess,
                                                    configs: dict[str, Path]) -> None:
    user, secret = f"erin-{suffix()}", f"typed-{suffix()}"
    master, slave = pty.openpty()
    # A session of its own: no controlling terminal, so getpass reads the pty on stdin
    # (and never the terminal of whoever runs the tests).
    process = subprocess.Popen(
        [sys.executable, "-m", "odradek", "users", "add", user, "--command-config",
         str(configs["admin"])], stdin=slave, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    os.close(slave)
    assert process.stderr is not None
    try:
        prompts = b""
        for prompt in (b"Password for user " + user.encode() + b": ", b"Again: "):
            deadline = time.monotonic() + 15
            while prompt not in prompts and time.monotonic() < deadline:
                if select.select([process.stderr], [], [], 0.2)[0]:
                    prompts += os.read(process.stderr.fileno(), 1024)
            assert prompt in prompts, prompts
            prompts = prompts.split(prompt, 1)[1]
            os.write(master, secret.encode() + b"\n")
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
        os.close(master)
    assert process.returncode == 0, err
    assert secret.encode() not in out + err
    assert login(broker, user, secret, "SCRAM-SHA-256") is None
    ok(cli(configs["admin"], "users", "delete", user))


def test_a_producer_as_a_new_scram_user(broker: BrokerProcess,
                                        configs: dict[str, Path]) -> None:
    """The whole way: a SCRAM user made by `users add`, given a producer's ACLs by
    `acls add --producer`, writes."""
    s = suffix()
    admin = configs["admin"]
    user, topic = f"frank-{s}", f"frank-{s}"
    ok(cli(admin, "topics", "create", topic, "--partitions", "1"))
    ok(cli(admin, "users", "add", user, "--password", "frank-pw", "--mechanism",
           "SCRAM-SHA-512"))
    ok(cli(admin, "acls", "add", "--producer", "--idempotent", "--allow-principal",
           f"User:{user}", "--topic", topic))
    producer = Producer({**settings(broker, user, "frank-pw", "SCRAM-SHA-512"),
                         "enable.idempotence": True, "message.timeout.ms": 10000})
    outcome: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(15)
    assert outcome == [None]
