"""Every config name Kafka 3.9 accepts is accepted, against a real broker process: a
server.properties full of Kafka 3.9's broker settings (deprecated, Kerberos, TLS, quotas,
KRaft tuning...) starts a broker that warns about each one it ignores; CreateTopics,
AlterConfigs and IncrementalAlterConfigs take Kafka 3.9's topic and broker names through
confluent-kafka's AdminClient; and what would pretend to a security Odradek lacks, or is no
Kafka name at all, is still refused with a clear message."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from support.broker import BrokerProcess

from odradek.protocol.errors import ErrorCode

# A broad sample of Kafka 3.9's broker settings Odradek accepts and ignores, as a Kafka 3.9
# server.properties would set them. Each is warned about at start-up.
IGNORED = {
    # deprecated
    "inter.broker.protocol.version": "2.8",
    "log.message.format.version": "0.10.0",
    "offsets.commit.required.acks": "-1",
    # Kerberos and Java's TLS machinery
    "sasl.kerberos.service.name": "kafka",
    "sasl.kerberos.min.time.before.relogin": "60000",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "ssl.keymanager.algorithm": "SunX509",
    # tuning, threads, quotas
    "num.network.threads": "3",
    "num.io.threads": "8",
    "background.threads": "10",
    "socket.send.buffer.bytes": "102400",
    "socket.listen.backlog.size": "50",
    "replication.quota.window.num": "11",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "fetch.purgatory.purge.interval.requests": "1000",
    "zookeeper.max.in.flight.requests": "10",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "broker.id.generation.enable": "true",
    "metrics.num.samples": "2",
    "transaction.state.log.load.buffer.size": "5242880",
    # KRaft, tiered storage, new group protocols: ignored in ZooKeeper mode
    "controller.quorum.election.timeout.ms": "1000",
    "remote.log.manager.thread.pool.size": "10",
    "group.consumer.heartbeat.interval.ms": "5000",
    "unstable.api.versions.enable": "false",  # internal in Kafka
}
# TLS and SASL settings on a broker without TLS or SASL listeners: in effect for such
# listeners, as in Kafka, so not warned about; the secrets are never logged.
SECURITY = {
    "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;",
    "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": "also-secret",
    "connections.max.reauth.ms": "0",
    "ssl.keystore.location": "/etc/kafka/secrets/broker.keystore.jks",
    "ssl.keystore.password": "keystore-secret",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "listener.name.plaintext.ssl.keystore.type": "PKCS12",
}
# Kafka 3.9 settings at values that mean, in Kafka too, what Odradek does: no warning.
IN_EFFECT = {
    "authorizer.class.name": "",
    "ssl.client.auth": "none",
    "security.inter.broker.protocol": "PLAINTEXT",
    "zookeeper.set.acl": "false",
    "process.roles": "",
    "log.retention.hours": "168",
    "num.partitions": "1",
    "max.connections.per.ip": "1000",  # in effect (connection limits), not warned about
}
SECRETS = ("keystore-secret", "also-secret", "Krb5LoginModule")

# AlterConfigs (the legacy API) is tested on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("# Kafka 3.9\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class ConfiguredBroker(BrokerProcess):
    """A broker started with --config FILE (then the test's --set overrides)."""

    def __init__(self, data_dir: Path, config: Path) -> None:
        super().__init__(data_dir)
        self.config = config

    def argv(self) -> list[str]:
        argv = super().argv()
        at = argv.index("serve") + 1
        return [*argv[:at], "--config", str(self.config), *argv[at:]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfiguredBroker]:
    tmp = tmp_path_factory.mktemp("kafka39")
    config = write_properties(tmp / "server.properties", {**IGNORED, **SECURITY, **IN_EFFECT})
    process = ConfiguredBroker(tmp / "data", config).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text()


@pytest.fixture(scope="module")
def admin(broker: ConfiguredBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def warnings(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_text().splitlines() if " WARNING " in line]


def error_of(future: Any) -> tuple[int, str]:
    with pytest.raises(KafkaException) as info:
        future.result(30)
    error = info.value.args[0]
    return int(error.code()), error.str()


def describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(30)


def test_server_properties_with_kafka_39_names_starts_with_warnings(
        broker: ConfiguredBroker, admin: AdminClient) -> None:
    warned = {m.group(1) for line in warnings(broker)
              if (m := re.search(r": (\S+?)=.* is accepted and has no effect: ", line))}
    assert warned == set(IGNORED)
    text = broker.log_text()
    assert "sasl.kerberos.min.time.before.relogin=60000 is accepted and has no effect: " \
           "Kerberos (GSSAPI)" in text
    assert "log.message.format.version=0.10.0 is accepted and has no effect: Odradek always " \
           "writes record batches v2" in text
    assert not any(secret in text for secret in SECRETS)
    assert "refused" not in text and "invalid" not in text
    # DescribeConfigs lists them as set, passwords without their value.
    configs = describe(admin, ResourceType.BROKER, "1")
    entry = configs["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("60000", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["ssl.keystore.password"].is_sensitive
    assert configs["ssl.keystore.password"].value is None
    assert configs["inter.broker.protocol.version"].value == "2.8"
    assert configs["listener.name.plaintext.ssl.keystore.type"].value == "PKCS12"
    # Kafka 3.9's default where none is set
    entry = configs["sasl.kerberos.ticket.renew.jitter"]
    assert (entry.value, entry.source) == ("0.05", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["delegation.token.max.lifetime.ms"].value == "604800000"


TOPIC_CONFIGS = {
    "message.format.version": "0.10.0.0",  # as librdkafka's own test suite sets it
    "message.timestamp.difference.max.ms": "3600000",
    "message.downconversion.enable": "true",
    "compression.gzip.level": "5",
    "local.retention.ms": "-2",
    "leader.replication.throttled.replicas": "*",
    "remote.storage.enable": "false",
    "retention.ms": "3600000",
}


def test_create_topics_with_kafka_39_topic_configs(broker: ConfiguredBroker,
                                                   admin: AdminClient) -> None:
    topic = NewTopic("kafka39-created", 1, 1, config=TOPIC_CONFIGS)
    admin.create_topics([topic])["kafka39-created"].result(30)
    configs = describe(admin, ResourceType.TOPIC, "kafka39-created")
    for name, value in TOPIC_CONFIGS.items():
        entry = configs[name]
        assert (entry.value, entry.source) == (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # Kafka 3.9: the deprecated difference applies where before.max.ms is left at its default
    assert configs["message.timestamp.before.max.ms"].value == "3600000"
    text = broker.log_text()
    assert "topic config message.format.version=0.10.0.0 is accepted and has no effect" in text
    assert "topic config compression.gzip.level=5 is accepted and has no effect" in text
    assert "topic config retention.ms" not in text


def test_alter_configs_with_kafka_39_names(broker: ConfiguredBroker,
                                           admin: AdminClient) -> None:
    admin.create_topics([NewTopic("kafka39-altered", 1, 1)])["kafka39-altered"].result(30)
    # IncrementalAlterConfigs: a topic and this broker (librdkafka's suite sets a Kerberos
    # setting on a broker).
    topic = ConfigResource(ResourceType.TOPIC, "kafka39-altered", incremental_configs=[
        ConfigEntry("message.format.version", "0.11.0",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("message.timestamp.difference.max.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET)])
    node = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("leader.replication.throttled.rate", "1048576",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([topic, node]).values():
        future.result(30)
    configs = describe(admin, ResourceType.TOPIC, "kafka39-altered")
    assert configs["message.format.version"].value == "0.11.0"
    configs = describe(admin, ResourceType.BROKER, "1")
    entry = configs["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert configs["leader.replication.throttled.rate"].value == "1048576"
    assert "broker 1: sasl.kerberos.min.time.before.relogin=58000 is accepted" in (
        broker.log_text())

    # AlterConfigs (the legacy API): the topic's overrides become exactly these.
    topic = ConfigResource(ResourceType.TOPIC, "kafka39-altered", set_config={
        "message.format.version": "0.10.0.0", "compression.zstd.level": "9"})
    admin.alter_configs([topic])[topic].result(30)
    configs = describe(admin, ResourceType.TOPIC, "kafka39-altered")
    assert configs["message.format.version"].value == "0.10.0.0"
    assert configs["message.timestamp.difference.max.ms"].source == (
        ConfigSource.DEFAULT_CONFIG.value)
    node = ConfigResource(ResourceType.BROKER, "1", set_config={
        "sasl.kerberos.ticket.renew.jitter": "0.1", "num.io.threads": "4"})
    admin.alter_configs([node])[node].result(30)
    configs = describe(admin, ResourceType.BROKER, "1")
    assert configs["sasl.kerberos.ticket.renew.jitter"].value == "0.1"
    assert configs["sasl.kerberos.min.time.before.relogin"].value == "60000"  # static again


def test_what_would_mislead_or_is_unknown_is_refused(broker: ConfiguredBroker,
                                                     admin: AdminClient,
                                                     tmp_path: Path) -> None:
    # A listener's TLS client authentication: only keystores and truststores are reloaded.
    node = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("listener.name.plaintext.ssl.client.auth", "required",
                    incremental_operation=AlterConfigOpType.SET)])
    code, message = error_of(admin.incremental_alter_configs([node])[node])
    assert code == ErrorCode.INVALID_REQUEST
    assert "Only a TLS listener's keystore and truststore" in message
    assert "listener.name.plaintext.ssl.client.auth" in message
    # An unknown topic config is INVALID_CONFIG, as in Kafka ("Unknown topic config name").
    topic = NewTopic("kafka39-unknown", 1, 1, config={"no.such.config": "1"})
    code, message = error_of(admin.create_topics([topic])["kafka39-unknown"])
    assert code == ErrorCode.INVALID_CONFIG and "no.such.config is not a topic config" in message
    topic = ConfigResource(ResourceType.TOPIC, "kafka39-created", set_config={
        "message.format.version": "0.10.3"})
    code, message = error_of(admin.alter_configs([topic])[topic])
    assert code == ErrorCode.INVALID_CONFIG and "must be a Kafka version" in message

    # At start-up: a Java authorizer, and a name no Kafka 3.9 broker reads (Kafka would ignore it
    # without a word; Odradek refuses it, so that a typo cannot pass unnoticed).
    for settings, says in [
        ({"authorizer.class.name": "com.example.CustomAuthorizer"},
         "authorizer.class.name=com.example.CustomAuthorizer is invalid: must be one of"),
        ({"no.such.config": "1"}, "no.such.config is not a broker config"),
    ]:
        config = write_properties(tmp_path / "refused.properties", {**IN_EFFECT, **settings})
        argv = ConfiguredBroker(tmp_path / "refused-data", config).argv()
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert run.returncode == 2, run.stderr
        assert f"odradek serve: invalid configuration: {says}" in run.stderr
