"""ConfigManager without a network: IncrementalAlterConfigs' list operations, dynamic broker
configs kept in the metadata store and loaded again, and what a change tells the broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.config_manager import (
    AlterConfigOp,
    ConfigManager,
    _apply_ops,
    _topic_list_default,
    load_dynamic_broker_configs,
)
from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import decode_request, encode_request
from odradek.protocol.messages import incremental_alter_configs_request as iac
from odradek.server.config import BrokerConfig, ConfigSource, ConfigSynonym

TOPIC, BROKER = 2, 4


class NoPartitions:
    """The controller's PartitionListener, for a broker without logs."""

    async def become_leader(self, topic: Any, partitions: list[int]) -> None: ...

    async def remove_partitions(self, topic: Any) -> None: ...

    def topic_config_changed(self, topic: Any) -> None: ...


def manager(tmp_path: Path, config: BrokerConfig | None = None) -> ConfigManager:
    controller = Controller(1, EmbeddedMetadataStore(tmp_path))
    asyncio.run(controller.startup(NoPartitions()))
    return ConfigManager(config or BrokerConfig.default(), controller)


def incremental(configs: ConfigManager, name: str, ops: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> tuple[int, str | None]:
    body = iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        iac.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
            iac.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    request = decode_request(encode_request(body, 1, correlation_id=1)[4:])
    (response,) = asyncio.run(configs.handle_incremental_alter_configs(
        request, None)).responses  # type: ignore[arg-type,attr-defined]
    return response.error_code, response.error_message


class Op:
    def __init__(self, name: str, op: AlterConfigOp, value: str | None) -> None:
        self.name, self.config_operation, self.value = name, op, value


def test_list_operations_start_from_kafkas_default() -> None:
    ops = [Op("cleanup.policy", AlterConfigOp.APPEND, "compact,delete")]
    assert _apply_ops({}, ops, _topic_list_default) == {"cleanup.policy": "delete,compact"}
    ops = [Op("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")]
    assert _apply_ops({}, ops, _topic_list_default) == {"cleanup.policy": ""}  # neither
    ops = [Op("cleanup.policy", AlterConfigOp.SUBTRACT, "compact"),
           Op("retention.ms", AlterConfigOp.DELETE, None),
           Op("segment.ms", AlterConfigOp.SET, "100")]
    current = {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    assert _apply_ops(current, ops, _topic_list_default) == {"cleanup.policy": "delete",
                                                             "segment.ms": "100"}
    with pytest.raises(KafkaError) as info:
        _apply_ops({}, [Op("retention.ms", AlterConfigOp.APPEND, "1")], _topic_list_default)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG
    assert str(info.value) == "Can't APPEND to key retention.ms because its type is not LIST."


def test_broker_changes_are_stored_and_announced(tmp_path: Path) -> None:
    configs = manager(tmp_path)
    announced: list[BrokerConfig] = []
    configs.on_broker_config_change = announced.append
    set_retention = [("log.retention.ms", AlterConfigOp.SET, "1000")]

    assert incremental(configs, "", set_retention, validate_only=True) == (0, None)
    assert announced == [] and configs.store.broker_configs() == {}

    assert incremental(configs, "", set_retention) == (0, None)
    assert incremental(configs, "1", [("message.max.bytes", AlterConfigOp.SET, "5000")]) == (
        0, None)
    assert configs.store.broker_configs() == {"<default>/log.retention.ms": "1000",
                                              "1/message.max.bytes": "5000"}
    assert [c.log_config.retention_ms for c in announced] == [1000, 1000]
    assert announced[-1].log_config.max_message_bytes == 5000
    assert configs.config is announced[-1]
    (entry,) = configs.topic_config_entries({}, ["retention.ms"])
    assert (entry.value, entry.source) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    # Refused changes leave everything as it was.
    assert incremental(configs, "1", [("num.partitions", AlterConfigOp.SET, "2")])[0] == (
        ErrorCode.INVALID_REQUEST)
    assert incremental(configs, "1", [("log.cleanup.policy", AlterConfigOp.APPEND, "nope")])[
        0] == ErrorCode.INVALID_REQUEST
    assert len(announced) == 2

    # APPEND on a broker list config starts from its default.
    assert incremental(configs, "", [("log.cleanup.policy", AlterConfigOp.APPEND, "compact")]
                       ) == (0, None)
    assert configs.config.dynamic_defaults["log.cleanup.policy"] == "delete,compact"

    # What is stored comes back at the next start, on top of server.properties.
    static = BrokerConfig.from_properties({"log.retention.hours": "5"})
    loaded = load_dynamic_broker_configs(static, EmbeddedMetadataStore(tmp_path))
    assert loaded.dynamic_defaults == {"log.retention.ms": "1000",
                                       "log.cleanup.policy": "delete,compact"}
    assert loaded.dynamic == {"message.max.bytes": "5000"}
    assert loaded.properties == {"log.retention.hours": "5"}
    assert loaded.log_config.retention_ms == 1000


def test_stored_configs_that_no_longer_apply_are_skipped(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    store.set_broker_configs({
        "<default>/log.retention.ms": "1000",
        "<default>/num.partitions": "3",  # not dynamic
        "1/no.such.config": "1",
        "1/log.segment.bytes": "2000000",
        "2/log.retention.ms": "7",  # another broker's
    })
    loaded = load_dynamic_broker_configs(BrokerConfig.default(), store)
    assert loaded.dynamic_defaults == {"log.retention.ms": "1000"}
    assert loaded.dynamic == {"log.segment.bytes": "2000000"}
    assert "num.partitions" in caplog.text and "no.such.config" in caplog.text


def alter_topic(configs: ConfigManager, name: str, ops: list[tuple[str, int, str | None]]
                ) -> tuple[int, str | None]:
    body = iac.IncrementalAlterConfigsRequest(validate_only=False, resources=[
        iac.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=[
            iac.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    request = decode_request(encode_request(body, 1, correlation_id=1)[4:])
    (response,) = asyncio.run(configs.handle_incremental_alter_configs(
        request, None)).responses  # type: ignore[arg-type,attr-defined]
    return response.error_code, response.error_message


NO_BROKER_DEFAULT = {
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "remote.storage.enable": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}


def test_topic_configs_without_a_broker_default(tmp_path: Path) -> None:
    configs = manager(tmp_path)
    entries = {e.name: e for e in configs.topic_config_entries({})}
    for name, value in NO_BROKER_DEFAULT.items():
        e = entries[name]
        assert (e.value, e.source, e.synonyms) == (value, ConfigSource.DEFAULT_CONFIG, ()), name
        assert not e.read_only and not e.is_sensitive and "no effect" in e.documentation
    assert entries["leader.replication.throttled.replicas"].config_type == 7  # LIST
    assert entries["remote.storage.enable"].config_type == 1  # BOOLEAN
    # message.downconversion.enable has one: log.message.downconversion.enable.
    e = entries["message.downconversion.enable"]
    assert (e.value, e.source) == ("true", ConfigSource.DEFAULT_CONFIG)
    assert e.synonyms == (ConfigSynonym("log.message.downconversion.enable", "true",
                                        ConfigSource.DEFAULT_CONFIG),)

    overrides = {"leader.replication.throttled.replicas": "0:1,1:1",
                 "remote.log.copy.disable": "true", "message.downconversion.enable": "false"}
    entries = {e.name: e for e in configs.topic_config_entries(overrides)}
    e = entries["leader.replication.throttled.replicas"]
    assert (e.value, e.source, e.synonyms) == ("0:1,1:1", ConfigSource.TOPIC_CONFIG, (
        ConfigSynonym("leader.replication.throttled.replicas", "0:1,1:1",
                      ConfigSource.TOPIC_CONFIG),))
    assert entries["remote.log.copy.disable"].synonyms == (
        ConfigSynonym("remote.log.copy.disable", "true", ConfigSource.TOPIC_CONFIG),)
    e = entries["message.downconversion.enable"]
    assert [s.name for s in e.synonyms] == ["message.downconversion.enable",
                                            "log.message.downconversion.enable"]

    # The broker's own setting changes the default of message.downconversion.enable.
    set_default = [("log.message.downconversion.enable", AlterConfigOp.SET, "false")]
    assert incremental(configs, "", set_default) == (0, None)
    (e,) = configs.topic_config_entries({}, ["message.downconversion.enable"])
    assert (e.value, e.source) == ("false", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_alter_kafka_only_topic_configs(tmp_path: Path) -> None:
    configs = manager(tmp_path)
    asyncio.run(configs.controller.create_topic("t", 2, 1, {}))
    # What kafka-reassign-partitions.sh does around a reassignment: set the throttles, then
    # remove them.
    throttle = [("leader.replication.throttled.replicas", AlterConfigOp.SET, "0:1,1:1"),
                ("follower.replication.throttled.replicas", AlterConfigOp.SET, "*")]
    assert alter_topic(configs, "t", throttle) == (0, None)
    assert configs.controller.topics["t"].configs == {
        "leader.replication.throttled.replicas": "0:1,1:1",
        "follower.replication.throttled.replicas": "*"}
    assert alter_topic(configs, "t", [
        ("leader.replication.throttled.replicas", AlterConfigOp.DELETE, None),
        ("follower.replication.throttled.replicas", AlterConfigOp.DELETE, None)]) == (0, None)
    assert configs.controller.topics["t"].configs == {}
    # APPEND starts from Kafka's default, the empty list.
    assert alter_topic(configs, "t", [
        ("leader.replication.throttled.replicas", AlterConfigOp.APPEND, "0:1")]) == (0, None)
    assert configs.controller.topics["t"].configs == {
        "leader.replication.throttled.replicas": "0:1"}

    code, message = alter_topic(configs, "t", [
        ("follower.replication.throttled.replicas", AlterConfigOp.SET, "0-1")])
    assert code == ErrorCode.INVALID_CONFIG and message is not None
    assert "[partitionId]:[brokerId]" in message
    for value in ("false", "FALSE"):
        assert alter_topic(configs, "t", [
            ("remote.storage.enable", AlterConfigOp.SET, value),
            ("remote.log.copy.disable", AlterConfigOp.SET, "true"),
            ("remote.log.delete.on.disable", AlterConfigOp.SET, "true")]) == (0, None)
    assert alter_topic(configs, "t", [("remote.storage.enable", AlterConfigOp.SET, "true")]
                       ) == (ErrorCode.INVALID_CONFIG,
                             "remote.storage.enable=true is invalid: tiered storage is not "
                             "supported (Odradek has no remote log storage), so it must be false")
    assert configs.controller.topics["t"].configs["remote.storage.enable"] == "FALSE"


# --- Kafka 3.9's names ----------------------------------------------------------------------


def test_kafka_39_topic_configs_warn_when_ignored(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    configs = manager(tmp_path)
    asyncio.run(configs.controller.create_topic("t", 1, 1, {}))
    with caplog.at_level("WARNING", logger="odradek.broker.config_manager"):
        # librdkafka's test suite: message.format.version=0.10.0.0 (CreateTopics checks so)
        configs.validate_topic_configs({"message.format.version": "0.10.0.0",
                                        "retention.ms": "1000", "compression.type": None})
        assert alter_topic(configs, "t", [
            ("message.timestamp.difference.max.ms", AlterConfigOp.SET, "60000"),
            ("compression.gzip.level", AlterConfigOp.SET, "5"),
            ("message.format.version", AlterConfigOp.SET, "2.8")]) == (0, None)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "topic config message.format.version=0.10.0.0 is accepted and has no effect: Odradek "
        "always writes record batches v2 (message format 2), as Kafka 3.x does from "
        "inter.broker.protocol.version 3.0; deprecated, and removed in Kafka 4.0",
        "topic config compression.gzip.level=5 is accepted and has no effect: Odradek stores "
        "batches as the producer compressed them",
    ]  # not retention.ms nor the difference (both in effect), nor 2.8 (v2, as written)
    # Describing a topic logs nothing.
    caplog.clear()
    entries = {e.name: e for e in configs.topic_config_entries(
        configs.controller.topics["t"].configs)}
    assert caplog.records == []
    assert entries["message.format.version"].value == "2.8"
    assert entries["message.format.version"].synonyms[-1] == ConfigSynonym(
        "log.message.format.version", "3.0-IV1", ConfigSource.DEFAULT_CONFIG)
    assert entries["message.timestamp.before.max.ms"].value == "60000"  # Kafka 3.9's rule
    assert alter_topic(configs, "t", [("no.such.config", AlterConfigOp.SET, "1")])[0] == (
        ErrorCode.INVALID_CONFIG)


def test_kafka_39_broker_configs_dynamically(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    configs = manager(tmp_path)
    with caplog.at_level("WARNING", logger="odradek.broker.config_manager"):
        assert incremental(configs, "1", [
            ("sasl.kerberos.min.time.before.relogin", AlterConfigOp.SET, "58000"),
            ("leader.replication.throttled.rate", AlterConfigOp.SET, "1000000")]) == (0, None)
        assert incremental(configs, "", [
            ("background.threads", AlterConfigOp.SET, "4")], validate_only=True) == (0, None)
    assert configs.store.broker_configs() == {
        "1/sasl.kerberos.min.time.before.relogin": "58000",
        "1/leader.replication.throttled.rate": "1000000"}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2  # none for the validation only
    assert warnings[0].startswith("broker 1: sasl.kerberos.min.time.before.relogin=58000 is "
                                  "accepted and has no effect: Kerberos (GSSAPI)")
    assert "quotas" in warnings[1]

    # APPEND on one of Kafka 3.9's list configs, kept in order.
    assert incremental(configs, "", [
        ("metric.reporters", AlterConfigOp.APPEND, "b.Reporter,a.Reporter")]) == (0, None)
    assert configs.config.dynamic_defaults["metric.reporters"] == "b.Reporter,a.Reporter"

    # Refused as Kafka refuses them, or because they would pretend to a security.
    for name, ops, says in [
        ("", [("sasl.kerberos.min.time.before.relogin", AlterConfigOp.SET, "1")],
         "Cannot update these configs at default cluster level, broker id must be specified"),
        ("1", [("ssl.keystore.location", AlterConfigOp.SET, "/k.jks")],
         "only per-listener using the listener prefix"),
        ("1", [("sasl.jaas.config", AlterConfigOp.SET, "x")],
         "Password encoder secret not configured"),
        ("1", [("listener.name.external.ssl.client.auth", AlterConfigOp.SET, "required")],
         "Only a TLS listener's keystore and truststore"),
        ("1", [("authorizer.class.name", AlterConfigOp.SET, "x")],
         "Cannot update these configs dynamically"),
    ]:
        code, message = incremental(configs, name, ops)
        assert code == ErrorCode.INVALID_REQUEST and message is not None, ops
        assert says in message, message

    # Stored ones are warned about again at the next start.
    caplog.clear()
    with caplog.at_level("WARNING", logger="odradek.broker.config_manager"):
        load_dynamic_broker_configs(BrokerConfig.default(), EmbeddedMetadataStore(tmp_path))
    assert "sasl.kerberos.min.time.before.relogin=58000" in caplog.text
