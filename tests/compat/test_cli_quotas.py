"""`odradek quotas` run as a real process against a broker process with Kafka's
AclAuthorizer and PLAINTEXT, SASL_PLAINTEXT, SASL_SSL and SSL (client certificates
required) listeners: what `kafka-configs.sh --entity-type users|clients --alter/--describe`
does, over each of them with the settings of `--command-config`. And the other commands
that send their own requests (wire.py: log-dirs, configs --entity-default), which now work
on a secured listener too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.broker import BrokerProcess
from support.certs import (
    CertificateAuthority,
    name,
    write_pem_keystore,
    write_pem_truststore,
)
from test_cli import Run, failed, odradek, ok

ADMIN_PASSWORD = "admin-secret"
USERS = {"admin": ADMIN_PASSWORD, "alice": "alice-secret"}
SCRAM_PASSWORD = "admin-scram-secret"
CLIENT_CN = "quota-admin"  # the TLS client's principal is User:CN=quota-admin


def jaas(module: str, users: dict[str, str] | None = None) -> str:
    options = " ".join(f'user_{u}="{p}"' for u, p in (users or {}).items())
    return f"org.apache.kafka.common.security.{module} required {options};"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority("Odradek Quotas CA")
    client = ca.issue(None, subject=name(CN=CLIENT_CN))
    # librdkafka's form: certificate and key in files of their own, the key in OpenSSL's
    # traditional (SEC1) form, which Kafka's PEM keystores do not read.
    (d / "client.crt").write_text(client.chain_pem())
    (d / "client.key").write_text(client.traditional_key_pem())
    other = CertificateAuthority("Someone Else's CA")
    return {"ca": str(write_pem_truststore(d / "ca.pem", ca)),
            "other-ca": str(write_pem_truststore(d / "other-ca.pem", other)),
            "server": str(write_pem_keystore(d / "server.pem", ca.issue())),
            "client-keystore": str(write_pem_keystore(d / "client.pem", client)),
            "client-cert": str(d / "client.crt"), "client-key": str(d / "client.key")}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, tls: dict[str, str]
                  ) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": tls["server"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls["ca"],
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:admin;User:CN={CLIENT_CN}",
        "connection.failed.authentication.delay.ms": "0",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = jaas(
            "plain.PlainLoginModule", USERS)
        settings[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"] = jaas(
            "scram.ScramLoginModule")
    process = BrokerProcess(tmp_path_factory.mktemp("quotas"), settings).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def write_config(path: Path, values: dict[str, str]) -> Path:
    path.write_text("# client settings\n" + "".join(f"{k}={v}\n" for k, v in values.items()))
    return path


@pytest.fixture(scope="module")
def configs(secure_broker: BrokerProcess, tls: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """--command-config files, one per way in."""
    d = tmp_path_factory.mktemp("client-configs")
    b = secure_broker

    def sasl(user: str, listener: str = "SASL_PLAINTEXT", mechanism: str = "PLAIN",
             password: str | None = None) -> dict[str, str]:
        out = {"bootstrap.servers": b.address(listener), "security.protocol": listener,
               "sasl.mechanism": mechanism, "sasl.username": user,
               "sasl.password": password or USERS[user]}
        return {**out, "ssl.ca.location": tls["ca"]} if listener == "SASL_SSL" else out

    files = {
        "admin": sasl("admin"),
        "alice": sasl("alice"),
        "scram-ssl": sasl("admin", "SASL_SSL", "SCRAM-SHA-512", SCRAM_PASSWORD),
        # librdkafka's names for a client certificate...
        "mtls": {"bootstrap.servers": b.address("SSL"), "security.protocol": "SSL",
                 "ssl.ca.location": tls["ca"], "ssl.certificate.location": tls["client-cert"],
                 "ssl.key.location": tls["client-key"]},
        # ... and the Java client's, PEM files without their store types.
        "mtls-java": {"bootstrap.servers": b.address("SSL"), "security.protocol": "SSL",
                      "ssl.truststore.location": tls["ca"],
                      "ssl.keystore.location": tls["client-keystore"]},
    }
    return {key: write_config(d / f"{key}.properties", values)
            for key, values in files.items()}


def cli(config: Path | None, *args: str) -> Run:
    extra = ["--command-config", str(config)] if config is not None else []
    return odradek(None, "quotas", *args, *extra, timeout=30)


def suffix() -> str:
    return uuid.uuid4().hex[:6]


def listed(config: Path, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok(cli(config, "list", "--json", *args)).json()
    return found


def entry(entity: dict[str, str | None], **quotas: float) -> dict[str, Any]:
    return {"entity": entity, "quotas": quotas}


# ---- alter, list, describe, remove ---------------------------------------------------------

def test_alter_then_list_and_describe(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    alice, app = f"alice-{s}", f"app-{s}"
    run = ok(cli(admin, "alter", "--user", alice, "--add-config",
                 "producer_byte_rate=1048576,consumer_byte_rate=2097152"))
    assert run.out == f"Completed updating the quotas of user '{alice}'.\n"
    ok(cli(admin, "alter", "--user", alice, "--client-id", app, "--add-config",
           "request_percentage=12.5"))
    # kafka-configs.sh's own spelling of an entity.
    ok(cli(admin, "alter", "--entity-type", "clients", "--entity-name", app, "--add-config",
           "producer_byte_rate=4096", "--add-config", "consumer_byte_rate=8192"))

    assert listed(admin, "--user", alice) == [
        entry({"user": alice}, producer_byte_rate=1048576, consumer_byte_rate=2097152),
        entry({"user": alice, "client-id": app}, request_percentage=12.5)]
    assert listed(admin, "--user", alice, "--strict") == [
        entry({"user": alice}, producer_byte_rate=1048576, consumer_byte_rate=2097152)]
    assert listed(admin, "--client-id", app, "--strict") == [
        entry({"client-id": app}, producer_byte_rate=4096, consumer_byte_rate=8192)]
    assert entry({"user": alice, "client-id": app}, request_percentage=12.5) in listed(admin)

    table = [line.split() for line in ok(cli(admin, "list", "--user", alice)).out.splitlines()]
    assert table == [
        ["USER", "CLIENT-ID", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE",
         "REQUEST_PERCENTAGE"],
        [alice, "-", "1048576", "2097152", "-"],
        [alice, app, "-", "-", "12.5"]]
    table = [line.split() for line in
             ok(cli(admin, "describe", "--client-id", app)).out.splitlines()]
    assert table == [["USER", "CLIENT-ID", "QUOTA", "VALUE"],
                     [alice, app, "request_percentage", "12.5"],
                     ["-", app, "producer_byte_rate", "4096"],
                     ["-", app, "consumer_byte_rate", "8192"]]

    # Delete one key, then every key of an entity.
    ok(cli(admin, "alter", "--user", alice, "--delete-config", "consumer_byte_rate"))
    assert listed(admin, "--user", alice, "--strict") == [
        entry({"user": alice}, producer_byte_rate=1048576)]
    run = ok(cli(admin, "remove", "--client-id", app, "--json"))
    assert run.json() == {"entity": {"client-id": app},
                          "deleted": ["producer_byte_rate", "consumer_byte_rate"],
                          "validate_only": False}
    ok(cli(admin, "remove", "--user", alice))
    ok(cli(admin, "alter", "--user", alice, "--client", app, "--delete-config",
           "request_percentage"))
    assert listed(admin, "--user", alice) == []
    assert listed(admin, "--client-id", app) == []
    failed(cli(admin, "remove", "--user", alice), f"user '{alice}' has no quotas")


def test_defaults(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    # Far above anything the other tests send: a default applies to every client.
    big = "producer_byte_rate=1073741824"
    try:
        ok(cli(admin, "alter", "--user-defaults", "--add-config", big))
        ok(cli(admin, "alter", "--user", f"bob-{s}", "--client-defaults", "--add-config",
               "consumer_byte_rate=1073741824"))
        ok(cli(admin, "alter", "--entity-type", "users", "--entity-default", "--entity-type",
               "clients", "--entity-default", "--add-config", "request_percentage=200"))
        assert listed(admin, "--user-default", "--strict") == [
            entry({"user": None}, producer_byte_rate=1073741824)]
        assert listed(admin, "--client-default") == [
            entry({"user": f"bob-{s}", "client-id": None}, consumer_byte_rate=1073741824),
            entry({"user": None, "client-id": None}, request_percentage=200)]
        # Without a name: any user's, the default included.
        assert {(e["entity"]["user"], e["entity"]["client-id"])
                for e in listed(admin, "--user", "--client-id")} >= {
            (f"bob-{s}", None), (None, None)}
        rows = [line.split() for line in
                ok(cli(admin, "list", "--user-default")).out.splitlines()]
        assert ["<default>", "-", "1073741824", "-"] in rows
        assert ["<default>", "<default>", "-", "200"] in rows
    finally:
        for entity in (["--user-defaults"], ["--user", f"bob-{s}", "--client-defaults"],
                       ["--user-defaults", "--client-defaults"]):
            cli(admin, "remove", *entity)
    assert listed(admin, "--user-default") == []
    assert listed(admin, "--user", f"bob-{s}") == []


def test_validate_only_changes_nothing(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    user = f"carol-{s}"
    run = ok(cli(admin, "alter", "--user", user, "--add-config", "producer_byte_rate=1000",
                 "--validate-only"))
    assert "nothing changed" in run.out
    assert listed(admin, "--user", user) == []
    # What the broker would refuse, it refuses when validating too.
    failed(cli(admin, "alter", "--user", user, "--add-config", "producer_byte_rate=1.5",
               "--validate-only"), "INVALID_REQUEST", "must be a Long value")
    ok(cli(admin, "alter", "--user", user, "--add-config", "producer_byte_rate=1000"))
    run = ok(cli(admin, "remove", "--user", user, "--validate-only", "--json"))
    assert run.json()["validate_only"] is True
    assert listed(admin, "--user", user) == [entry({"user": user}, producer_byte_rate=1000)]
    assert ok(cli(admin, "alter", "--user", user, "--delete-config", "producer_byte_rate",
                  "--json")).json() == {"entity": {"user": user}, "set": {},
                                        "deleted": ["producer_byte_rate"],
                                        "validate_only": False}
    assert listed(admin, "--user", user) == []


def test_bad_input_is_a_clear_error(configs: dict[str, Path]) -> None:
    s = suffix()
    admin = configs["admin"]
    user = f"dave-{s}"
    # The broker's refusals, word for word, and nothing changed.
    run = failed(cli(admin, "alter", "--user", user, "--add-config", "unknown_rate=5"),
                 f"odradek quotas alter: cannot alter the quotas of user '{user}': "
                 "INVALID_REQUEST: Invalid configuration key unknown_rate")
    assert run.code == 1 and len(run.err.strip().splitlines()) == 1
    failed(cli(admin, "alter", "--user", user, "--add-config", "consumer_byte_rate=-1"),
           "INVALID_REQUEST", "must be a non-negative value")
    # Ours, before anything is sent: exit status 2.
    for args, message in [
        (["--add-config", "producer_byte_rate=fast"],
         "cannot parse the value of producer_byte_rate: 'fast' is not a number"),
        (["--add-config", "producer_byte_rate=inf"], "must be a finite number"),
        (["--add-config", "producer_byte_rate"], "--add-config wants KEY=VALUE"),
        ([], "nothing to change"),
        (["--add-config", "producer_byte_rate=1", "--delete-config", "producer_byte_rate"],
         "cannot be both added and deleted"),
    ]:
        run = failed(cli(admin, "alter", "--user", user, *args), message)
        assert run.code == 2, run
    run = failed(cli(admin, "alter", "--add-config", "producer_byte_rate=1"),
                 "name the entity")
    assert run.code == 2
    assert listed(admin, "--user", user) == []


def test_refused_without_the_rights(secure_broker: BrokerProcess,
                                    configs: dict[str, Path]) -> None:
    run = failed(cli(configs["alice"], "list"), "odradek quotas list: cannot describe the "
                 "client quotas: CLUSTER_AUTHORIZATION_FAILED", "are you a super user?")
    assert run.code == 1 and len(run.err.strip().splitlines()) == 1
    failed(cli(configs["alice"], "alter", "--user", "alice", "--add-config",
               "producer_byte_rate=1"), "cannot alter the quotas of user 'alice': "
           "CLUSTER_AUTHORIZATION_FAILED")
    # The PLAINTEXT listener's anonymous user is no super user either.
    failed(cli(None, "list", "--bootstrap-server", secure_broker.bootstrap),
           "CLUSTER_AUTHORIZATION_FAILED")
    # A wrong password is said at once, naming the broker.
    started = time.monotonic()
    failed(cli(configs["admin"], "list", "-X", "sasl.password=guess"),
           f"{secure_broker.address('SASL_PLAINTEXT')}: authentication with SASL/PLAIN "
           "failed: SASL_AUTHENTICATION_FAILED")
    assert time.monotonic() - started < 10


# ---- TLS and SASL ------------------------------------------------------------------------------

def test_over_sasl_ssl_with_scram(secure_broker: BrokerProcess, configs: dict[str, Path],
                                  tls: dict[str, str]) -> None:
    s = suffix()
    ok(odradek(None, "users", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--password",
               SCRAM_PASSWORD, "--command-config", str(configs["admin"])))
    scram = configs["scram-ssl"]
    assert "security.protocol=SASL_SSL" in scram.read_text()
    ok(cli(scram, "alter", "--user", f"erin-{s}", "--client-id", f"etl-{s}",
           "--add-config", "producer_byte_rate=65536,request_percentage=50"))
    assert listed(scram, "--user", f"erin-{s}") == [
        entry({"user": f"erin-{s}", "client-id": f"etl-{s}"}, producer_byte_rate=65536,
              request_percentage=50)]
    # -X overrides the file, as for every command.
    failed(cli(scram, "list", "-X", "sasl.password=guess"),
           "authentication with SASL/SCRAM-SHA-512 failed")
    failed(cli(scram, "list", "-X", f"ssl.ca.location={tls['other-ca']}"),
           f"{secure_broker.address('SASL_SSL')}: TLS handshake failed: the broker's "
           "certificate is not trusted")
    failed(cli(scram, "list", "-X", "sasl.mechanism=OAUTHBEARER"),
           "SASL mechanism OAUTHBEARER (it would need a token source) is not supported")
    ok(cli(scram, "remove", "--user", f"erin-{s}", "--client-id", f"etl-{s}"))
    assert listed(scram, "--user", f"erin-{s}") == []


def test_over_mutual_tls(configs: dict[str, Path]) -> None:
    s = suffix()
    ok(cli(configs["mtls"], "alter", "--client-id", f"tls-{s}", "--add-config",
           "consumer_byte_rate=1024"))
    assert listed(configs["mtls-java"], "--client-id", f"tls-{s}") == [
        entry({"client-id": f"tls-{s}"}, consumer_byte_rate=1024)]
    ok(cli(configs["mtls-java"], "remove", "--client-id", f"tls-{s}"))
    # Without a client certificate the listener hangs up: said, with the address.
    failed(cli(configs["mtls"], "list", "-X", "ssl.certificate.location=",
               "-X", "ssl.key.location="), "odradek quotas list: cannot reach the cluster")


def test_a_plain_client_on_a_secured_listener_is_told(secure_broker: BrokerProcess) -> None:
    started = time.monotonic()
    failed(cli(None, "list", "--bootstrap-server", secure_broker.address("SSL"),
               "--timeout", "10s"), "cannot reach the cluster",
           secure_broker.address("SSL"), "is it a TLS listener?")
    failed(cli(None, "list", "--bootstrap-server", secure_broker.address("SASL_PLAINTEXT"),
               "--timeout", "10s"), secure_broker.address("SASL_PLAINTEXT"),
           "closed the connection before answering DescribeClientQuotas",
           "does the listener want SASL?")
    # And SASL on a listener that has none.
    failed(cli(None, "list", "--bootstrap-server", secure_broker.bootstrap, "-X",
               "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X",
               "sasl.username=admin", "-X", f"sasl.password={ADMIN_PASSWORD}"),
           "refused SASL mechanism PLAIN", "is it a SASL listener?")
    assert time.monotonic() - started < 20


def test_the_other_wire_commands_on_secured_listeners(secure_broker: BrokerProcess,
                                                      configs: dict[str, Path]) -> None:
    """log-dirs and configs --entity-default send their own requests too (wire.py): over
    SASL_SSL with SCRAM and over mutual TLS now, as librdkafka's commands do."""
    ok(odradek(None, "users", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--password",
               SCRAM_PASSWORD, "--command-config", str(configs["admin"])))
    for config in (configs["scram-ssl"], configs["mtls"]):
        described = ok(odradek(None, "log-dirs", "describe", "--json", "--command-config",
                               str(config))).json()
        assert [b["broker"] for b in described["brokers"]] == [1]
        ok(odradek(None, "configs", "describe", "--entity-type", "brokers",
                   "--entity-default", "--command-config", str(config)))
