"""The pure parts of `odradek quotas` and of the CLI socket's security settings: the entity
options as kafka-configs.sh takes them, --add-config and --delete-config values, and the
client settings (librdkafka's and Java's names) turned into TLS and SASL. No broker: the
commands themselves run against one in tests/compat/test_cli_quotas.py."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from support.certs import CertificateAuthority, write_pem_keystore, write_pem_truststore

from odradek.cli import quotas
from odradek.cli.client import CliError
from odradek.cli.main import build_parser, main
from odradek.cli.quotas import CLIENT_ID, USER, Part
from odradek.cli.wire import bootstrap_addresses, broker_security


def parts(*argv: str, exact: bool = False) -> list[Part]:
    action = "alter" if exact else "describe"
    args = build_parser().parse_args(["quotas", action, *argv])
    return quotas.entity_parts(args.entity, exact=exact)


def test_entity_options_as_kafka_configs_takes_them() -> None:
    assert parts() == []
    assert parts("--user", "alice") == [Part(USER, "alice")]
    assert parts("--client", "app", "--user-defaults") == [Part(USER, None),
                                                          Part(CLIENT_ID, "app")]
    assert parts("--user", "--client-id", "app") == [Part(USER, None, any_name=True),
                                                     Part(CLIENT_ID, "app")]
    assert parts("--entity-type", "users", "--entity-type", "clients",
                 "--entity-default") == [Part(USER, None, any_name=True),
                                         Part(CLIENT_ID, None)]
    assert parts("--entity-type", "clients", "--entity-name", "app", "--entity-type", "users",
                 "--entity-name", "bob", exact=True) == [Part(USER, "bob"),
                                                        Part(CLIENT_ID, "app")]
    assert parts("--user-default", "--client-default", exact=True) == [
        Part(USER, None), Part(CLIENT_ID, None)]


@pytest.mark.parametrize(("argv", "exact", "message"), [
    (["--user", "a", "--user", "b"], True, "the user is given twice"),
    (["--user", "a", "--entity-type", "users", "--entity-default"], True, "given twice"),
    (["--user", ""], True, "cannot be empty (--user-defaults is the default user)"),
    (["--entity-name", "a"], True, "--entity-name needs an --entity-type before it"),
    (["--entity-type", "users"], True, "--entity-type users needs --entity-name"),
    (["--entity-type", "ips", "--entity-name", "1.2.3.4"], True, "IP quotas"),
    (["--entity-type", "topics", "--entity-name", "t"], True, "odradek configs"),
    (["--entity-type", "groups"], False, "expected users or clients"),
    (["--user"], False, None),
])
def test_entity_mistakes(argv: list[str], exact: bool, message: str | None) -> None:
    if message is None:
        assert parts(*argv, exact=exact)
        return
    with pytest.raises(CliError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        parts(*argv, exact=exact)
    assert e.value.exit_code == 2


def test_add_and_delete_config_values() -> None:
    assert quotas.parse_add_config(["producer_byte_rate=1048576, consumer_byte_rate=2e6",
                                    "request_percentage=12.5,"]) == {
        "producer_byte_rate": 1048576.0, "consumer_byte_rate": 2e6,
        "request_percentage": 12.5}
    # Negative and fractional byte rates are the broker's to refuse, with its message.
    assert quotas.parse_add_config(["producer_byte_rate=-1.5"]) == {
        "producer_byte_rate": -1.5}
    for bad, message in [("producer_byte_rate=1MB", "'1MB' is not a number"),
                         ("producer_byte_rate=", "'' is not a number"),
                         ("producer_byte_rate=nan", "must be a finite number"),
                         ("producer_byte_rate=[1,2]", "is not a number"),
                         ("=5", "wants KEY=VALUE"),
                         ("producer_byte_rate=1,producer_byte_rate=2", "twice")]:
        with pytest.raises(CliError, match=message.replace("[", r"\[")):
            quotas.parse_add_config([bad])
    assert quotas.parse_delete_config(["a,b", "b, c"]) == ["a", "b", "c"]
    with pytest.raises(CliError, match="wants KEY"):
        quotas.parse_delete_config(["a,,b"])


def test_output_helpers() -> None:
    assert quotas.number(1048576.0) == 1048576 and isinstance(quotas.number(2.0), int)
    assert quotas.number(12.5) == 12.5
    assert quotas.entity_label([Part(USER, "alice"), Part(CLIENT_ID, None)]) == (
        "user 'alice', the default client-id")
    assert quotas.entity_label({"client-id": "app"}) == "client-id 'app'"


def test_usage_mistakes_exit_2_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str]) -> None:
    no_broker = ["--bootstrap-server", "127.0.0.1:1"]
    for argv, message in [
        (["alter", "--add-config", "producer_byte_rate=1"], "name the entity"),
        (["alter", "--user", "a"], "nothing to change"),
        (["alter", "--user", "a", "--add-config", "x=1", "--delete-config", "x"],
         "cannot be both added and deleted"),
        (["remove", "--entity-type", "clients"], "needs --entity-name or --entity-default"),
        (["list", "-X", "security.protocol=carrier-pigeon"], "is not one of PLAINTEXT"),
    ]:
        assert main(["quotas", *argv, *no_broker]) == 2, argv
        assert message in capsys.readouterr().err, argv
    with pytest.raises(SystemExit) as exit_info:
        main(["quotas", "alter", "--user", "--add-config", "x=1"])
    assert exit_info.value.code == 2


# ---- the socket's security settings ------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority("Unit CA")
    client = ca.issue("client")
    (d / "client.crt").write_text(client.chain_pem())
    (d / "client-sec1.key").write_text(client.traditional_key_pem())
    (d / "client-pkcs8-encrypted.key").write_text(client.key_pem("pw"))
    (d / "cas").mkdir()
    write_pem_truststore(d / "cas" / "one.pem", ca)
    (d / "cas" / "README").write_text("not a certificate")
    return {"ca": write_pem_truststore(d / "ca.pem", ca), "dir": d / "cas",
            "keystore": write_pem_keystore(d / "client.pem", client),
            "cert": d / "client.crt", "sec1": d / "client-sec1.key",
            "encrypted": d / "client-pkcs8-encrypted.key"}


def test_plaintext_has_no_security() -> None:
    assert broker_security({}) is None
    assert broker_security({"security.protocol": "plaintext"}) is None


def test_librdkafka_tls_settings(pki: dict[str, Path]) -> None:
    security = broker_security({"security.protocol": "ssl", "ssl.ca.location": str(pki["ca"])})
    assert security is not None and security.security_protocol == "SSL"
    assert security.ssl_context is not None and security.check_hostname
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    # A directory of CA files, hostname checks off, a client certificate with a SEC1 key
    # (librdkafka reads it; Kafka's PEM keystore would not).
    security = broker_security({
        "security.protocol": "SSL", "ssl.ca.location": str(pki["dir"]),
        "ssl.endpoint.identification.algorithm": "none",
        "ssl.certificate.location": str(pki["cert"]), "ssl.key.location": str(pki["sec1"])})
    assert security is not None and not security.check_hostname
    assert security.ssl_context is not None and not security.ssl_context.check_hostname
    # An encrypted PKCS#8 key with its password.
    assert broker_security({
        "security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]),
        "ssl.certificate.location": str(pki["cert"]), "ssl.key.location": str(pki["encrypted"]),
        "ssl.key.password": "pw"}) is not None


def test_java_tls_settings(pki: dict[str, Path]) -> None:
    # PEM stores named without their type, as cluster docs often write them.
    security = broker_security({"security.protocol": "SSL",
                                "ssl.truststore.location": str(pki["ca"]),
                                "ssl.keystore.location": str(pki["keystore"])})
    assert security is not None and security.ssl_context is not None


@pytest.mark.parametrize(("settings", "message"), [
    ({"ssl.ca.location": "/nonexistent/ca.pem"},
     "ssl.ca.location: cannot read /nonexistent/ca.pem"),
    ({"ssl.ca.location": "{dir}/README"}, "Invalid ssl.ca.location:"),
    ({"ssl.certificate.location": "{cert}"}, "ssl.certificate.location needs ssl.key.location"),
    ({"ssl.ca.location": "{ca}", "ssl.certificate.location": "{cert}",
      "ssl.key.location": "{encrypted}"}, "ssl.key.password"),
    ({"ssl.ca.location": "{ca}", "ssl.truststore.location": "{ca}"}, "give one"),
    ({"ssl.endpoint.identification.algorithm": "ftp"}, "unknown algorithm 'ftp'"),
    ({"enable.ssl.certificate.verification": "false"}, "give the broker's CA"),
])
def test_tls_mistakes_name_the_setting(pki: dict[str, Path], settings: dict[str, str],
                                       message: str) -> None:
    values = {k: v.format(**{n: str(p) for n, p in pki.items()}) for k, v in settings.items()}
    with pytest.raises(CliError, match=message) as e:
        broker_security({"security.protocol": "SSL", **values})
    assert e.value.exit_code == 2


def test_sasl_settings(pki: dict[str, Path]) -> None:
    security = broker_security({"security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanisms": "scram-sha-512", "sasl.username": "admin",
                                "sasl.password": "pw"})
    assert security is not None
    assert (security.security_protocol, security.sasl_mechanism, security.username,
            security.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", "pw")
    # The Java client's JAAS line.
    security = broker_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "ssl.ca.location": str(pki["ca"]),
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                            'required username="bob" password="bob-secret";'})
    assert security is not None and security.security_protocol == "SASL_SSL"
    assert (security.username, security.password) == ("bob", "bob-secret")
    for settings, message in [
        ({}, "GSSAPI \\(Kerberos, the default when sasl.mechanism is not set\\)"),
        ({"sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER \\(it would need a token source\\)"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "a"}, "needs sasl.username and "
         "sasl.password"),
        ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": "nonsense"},
         "invalid sasl.jaas.config"),
    ]:
        with pytest.raises(CliError, match=message):
            broker_security({"security.protocol": "SASL_PLAINTEXT", **settings})


def test_bootstrap_addresses() -> None:
    assert bootstrap_addresses({"bootstrap.servers": "a:1, SASL_SSL://b:2,[::1]:3"}) == [
        ("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(CliError, match="is not HOST:PORT"):
        bootstrap_addresses({"bootstrap.servers": "a"})
