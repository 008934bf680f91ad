"""BrokerConfig: server.properties parsing, Kafka's names and defaults, synonyms and
precedence, listeners, DescribeConfigs entries, dynamic updates, and the generated docs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.server.config import (
    BROKER_CONFIGS,
    DOCS_PATH,
    KRAFT_ONLY_CONFIGS,
    BrokerConfig,
    ConfigSource,
    ConfigSynonym,
    Listener,
    ignored_settings,
    load_properties,
    parse_properties,
    render_docs,
)
from odradek.server.kafka_configs import KAFKA_39_BROKER_CONFIGS, KafkaType, UpdateMode
from odradek.storage.config import LONG_MAX, TOPIC_CONFIGS, ConfigType, LogConfig, java_double
from odradek.storage.errors import InvalidConfigError, StorageError
from odradek.storage.log_manager import LogManagerConfig

S = ConfigSource
DYNAMIC, DYNAMIC_DEFAULT, STATIC, DEFAULT = (
    S.DYNAMIC_BROKER_CONFIG, S.DYNAMIC_DEFAULT_BROKER_CONFIG, S.STATIC_BROKER_CONFIG,
    S.DEFAULT_CONFIG,
)


def bad(props: dict[str, Any]) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as info:
        BrokerConfig.from_properties(props)
    return info.value


def entry(config: BrokerConfig, name: str, **kwargs: Any) -> Any:
    (found,) = config.describe([name], **kwargs)
    return found


# --- .properties syntax ---------------------------------------------------------------------


def test_properties_separators_and_comments() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   # an indented comment\n"
        "\n"
        "a=1\n"
        "b = 2\n"
        "c:3\n"
        "d : 4\n"
        "e 5\n"
        "f\t\t6\n"
        "   g=7   \n"
        "h\n"
        "i=\n"
        "j==x\n"
        "k=a=b:c\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "",
        "i": "", "j": "=x", "k": "a=b:c",
    }


def test_properties_continuations() -> None:
    text = (
        "listeners=PLAINTEXT://a:1,\\\n"
        "          PLAINTEXT2://b:2\n"
        "two.backslashes=x\\\\\n"
        "next=y\n"
        "# a comment ends at its line \\\n"
        "after.comment=z\n"
        "at.end=w\\"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2",
        "two.backslashes": "x\\",
        "next": "y",
        "after.comment": "z",
        "at.end": "w",
    }


def test_properties_escapes() -> None:
    text = (
        "tab=a\\tb\n"
        "newline=a\\nb\n"
        "unicode=caf\\u00e9\n"
        "pair=\\uD83D\\uDE00\n"
        "key\\=with\\:separators\\ and\\ spaces=v\n"
        "other=\\q\\\\\n"
        "kept.space=v\\ \n"
        "leading=\\  v\n"
    )
    assert parse_properties(text) == {
        "tab": "a\tb",
        "newline": "a\nb",
        "unicode": "café",
        "pair": "\U0001f600",
        "key=with:separators and spaces": "v",
        "other": "q\\",
        "kept.space": "v ",
        "leading": "  v",
    }


def test_properties_line_endings_and_duplicates() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\na=4") == {"a": "4", "b": "2", "c": "3"}
    # A form feed is whitespace in .properties, not a line break as for str.splitlines.
    assert parse_properties("\fa\f=\fx\fy") == {"a": "x\fy"}


def test_properties_malformed_unicode_escape() -> None:
    with pytest.raises(ValueError, match=r"line 2: malformed \\uXXXX escape"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_load_properties_reads_utf8(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("broker.rack=zone-é\nnum.partitions = 3\n", encoding="utf-8")
    assert load_properties(path) == {"broker.rack": "zone-é", "num.partitions": "3"}
    path.write_bytes("broker.rack=zone-é\n".encode("iso-8859-1"))  # as Java would read it
    assert load_properties(path) == {"broker.rack": "zone-é"}
    path.write_text("bad=\\u00\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"server\.properties: line 1"):
        load_properties(path)


# A server.properties as Kafka's distribution ships it (ZooKeeper era), comments trimmed.
KAFKA_SERVER_PROPERTIES = """
broker.id=0
#listeners=PLAINTEXT://:9092
#advertised.listeners=PLAINTEXT://your.host.name:9092
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""

KAFKA_KRAFT_PROPERTIES = """
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
"""


def test_kafkas_sample_server_properties_load(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_SERVER_PROPERTIES)
    config = BrokerConfig.from_properties(load_properties(path))
    assert config.node_id == 0
    assert config.log_dirs == (Path("/tmp/kafka-logs"),)
    assert config.zookeeper_connect == "localhost:2181"
    assert config.get("zookeeper.connection.timeout.ms") == 18000
    assert config.get("offsets.topic.replication.factor") == 1
    assert config.get("group.initial.rebalance.delay.ms") == 0
    assert config.log_config == LogConfig()


def test_kraft_settings_are_refused() -> None:
    error = bad(parse_properties(KAFKA_KRAFT_PROPERTIES))
    assert error.key == "process.roles"
    assert "KRaft" in str(error) and "ZooKeeper" in str(error) and "embedded" in str(error)
    for name in KRAFT_ONLY_CONFIGS:
        assert bad({name: "x"}).key == name


# --- defaults -------------------------------------------------------------------------------

# The embedded single node's defaults; Kafka 4.0's where Kafka has one.
DEFAULTS = {
    "node.id": 1,
    "listeners": "PLAINTEXT://localhost:9092",
    "log.dir": "./odradek-data",
    "num.partitions": 1,
    "auto.create.topics.enable": True,
    "default.replication.factor": 1,
    "delete.topic.enable": True,
    "socket.request.max.bytes": 104857600,
    "connections.max.idle.ms": 600000,
    "message.max.bytes": 1048588,
    "fetch.max.bytes": 57671680,
    "max.incremental.fetch.session.cache.slots": 1000,
    "queued.max.requests": 500,
    "producer.id.expiration.ms": 86400000,
    "producer.id.expiration.check.interval.ms": 600000,
    "log.retention.check.interval.ms": 300000,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.flush.start.offset.checkpoint.interval.ms": 60000,
    "log.cleaner.enable": True,
    "log.cleaner.threads": 1,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offsets.commit.timeout.ms": 5000,
    "offsets.load.buffer.size": 5242880,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2**31 - 1,
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transactional.id.expiration.ms": 604800000,
    "transaction.max.timeout.ms": 900000,
    "zookeeper.session.timeout.ms": 18000,
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.wait.max.ms": 500,
    "num.replica.fetchers": 1,
    "unclean.leader.election.enable": False,
    "min.insync.replicas": 1,
    "controlled.shutdown.enable": True,
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 300,
    "leader.imbalance.per.broker.percentage": 10,
    "num.network.threads": 3,
    "num.io.threads": 8,
    "socket.send.buffer.bytes": 102400,
    "socket.receive.buffer.bytes": 102400,
    "num.recovery.threads.per.data.dir": 1,
    "log.retention.hours": 168,
    "log.roll.hours": 168,
    "log.segment.bytes": 1073741824,
    "log.message.downconversion.enable": True,  # a no-op since Kafka 4.0, still accepted
}
NO_DEFAULT = ("broker.id", "log.dirs", "advertised.listeners", "inter.broker.listener.name",
              "zookeeper.connect", "zookeeper.connection.timeout.ms", "broker.rack",
              "log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.flush.interval.ms")


def test_defaults() -> None:
    for name, value in DEFAULTS.items():
        assert BROKER_CONFIGS[name].default == value, name
    for name in NO_DEFAULT:
        assert BROKER_CONFIGS[name].default is None, name


def test_default_config_attributes() -> None:
    c = BrokerConfig.from_properties({})
    assert c == BrokerConfig.default()
    plaintext = Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT")
    assert c.node_id == 1
    assert c.listeners == c.advertised_listeners == (plaintext,)
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.log_dirs == (Path("./odradek-data"),)
    assert (c.num_partitions, c.default_replication_factor) == (1, 1)
    assert c.auto_create_topics_enable and c.delete_topic_enable
    assert c.message_max_bytes == 1048588
    assert c.socket_request_max_bytes == 104857600
    assert c.connections_max_idle_ms == 600000
    assert c.fetch_max_bytes == 57671680
    assert c.max_incremental_fetch_session_cache_slots == 1000
    assert c.queued_max_requests == 500
    assert c.producer_id_expiration_ms == 86400000
    assert c.zookeeper_connect is None and c.broker_rack is None
    assert c.log_config == LogConfig()
    assert c.properties == c.dynamic == c.dynamic_defaults == {}
    for entry_ in c.describe():
        assert entry_.source is DEFAULT, entry_.name


def test_get_is_typed() -> None:
    c = BrokerConfig.from_properties({"log.cleanup.policy": "compact,delete"})
    assert c.get("log.cleanup.policy") == frozenset({"compact", "delete"})
    assert c.get("log.cleaner.min.cleanable.ratio") == 0.5
    assert c.get("delete.topic.enable") is True
    assert c.get("zookeeper.connect") is None
    with pytest.raises(KeyError):
        c.get("no.such.setting")


def test_log_manager_config() -> None:
    c = BrokerConfig.from_properties({
        "log.dirs": "/a, /b",
        "log.retention.check.interval.ms": "1000",
        "log.flush.offset.checkpoint.interval.ms": "2000",
        "log.flush.start.offset.checkpoint.interval.ms": "3000",
        "log.cleaner.enable": "false",
        "log.cleaner.threads": "2",
        "producer.id.expiration.ms": "5000",
        "producer.id.expiration.check.interval.ms": "6000",
    })
    m = c.log_manager_config
    assert m.log_dirs == c.log_dirs == (Path("/a"), Path("/b"))
    assert m.retention_check_interval_ms == 1000
    assert m.recovery_point_checkpoint_interval_ms == 2000
    assert m.log_start_offset_checkpoint_interval_ms == 3000
    assert (m.cleaner_enable, m.cleaner_threads) == (False, 2)
    # Unset, the log manager keeps its own check of flush.ms rather than Kafka's "never".
    assert m.flush_check_interval_ms == LogManagerConfig(log_dirs=()).flush_check_interval_ms
    # Fields that LogManagerConfig may or may not have yet.
    names = {f.name for f in dataclasses.fields(LogManagerConfig)}
    if "producer_id_expiration_ms" in names:
        assert m.producer_id_expiration_ms == 5000  # type: ignore[attr-defined]
    if "producer_id_expiration_check_interval_ms" in names:
        assert m.producer_id_expiration_check_interval_ms == 6000  # type: ignore[attr-defined]


def test_flush_scheduler_interval() -> None:
    c = BrokerConfig.from_properties({"log.flush.scheduler.interval.ms": "250"})
    assert c.log_manager_config.flush_check_interval_ms == 250
    assert c.log_config.flush_ms == 250  # also the default of flush.ms, as in Kafka
    c = BrokerConfig.from_properties({"log.flush.scheduler.interval.ms": str(LONG_MAX)})
    assert c.log_manager_config.flush_check_interval_ms == 2**31 - 1  # "never", in range


# --- synonyms and precedence ----------------------------------------------------------------


def test_retention_synonyms() -> None:
    assert BrokerConfig.default().log_config.retention_ms == 168 * 3600_000
    hours = BrokerConfig.from_properties({"log.retention.hours": "24"})
    assert hours.log_config.retention_ms == hours.get("log.retention.ms") == 24 * 3600_000
    assert hours.get("log.retention.minutes") == 24 * 60
    minutes = BrokerConfig.from_properties({"log.retention.hours": "24",
                                            "log.retention.minutes": "30"})
    assert minutes.log_config.retention_ms == 30 * 60_000
    ms = BrokerConfig.from_properties({"log.retention.hours": "24",
                                       "log.retention.minutes": "30",
                                       "log.retention.ms": "1234"})
    assert ms.log_config.retention_ms == ms.get("log.retention.ms") == 1234
    assert ms.get("log.retention.hours") == 24  # a coarser name keeps its own value
    forever = BrokerConfig.from_properties({"log.retention.hours": "-1"})
    assert forever.log_config.retention_ms == -1


def test_roll_synonyms() -> None:
    c = BrokerConfig.from_properties({"log.roll.hours": "2"})
    assert c.log_config.segment_ms == c.get("log.roll.ms") == 2 * 3600_000
    c = BrokerConfig.from_properties({"log.roll.hours": "2", "log.roll.ms": "500"})
    assert c.log_config.segment_ms == 500


def test_node_id_and_broker_id() -> None:
    assert BrokerConfig.from_properties({"broker.id": "7"}).node_id == 7
    assert BrokerConfig.from_properties({"node.id": "7"}).node_id == 7
    assert BrokerConfig.from_properties({"node.id": "7", "broker.id": "7"}).node_id == 7
    error = bad({"node.id": "7", "broker.id": "8"})
    assert error.key == "broker.id"
    assert "node.id=7" in str(error) and "broker.id=8" in str(error)
    assert bad({"node.id": "-1"}).key == "node.id"


def test_log_dir_and_log_dirs() -> None:
    assert BrokerConfig.from_properties({"log.dir": "/x"}).log_dirs == (Path("/x"),)
    both = BrokerConfig.from_properties({"log.dir": "/x", "log.dirs": "/y,/z"})
    assert both.log_dirs == (Path("/y"), Path("/z"))
    assert entry(both, "log.dirs").synonyms == (
        ConfigSynonym("log.dirs", "/y,/z", STATIC),
        ConfigSynonym("log.dir", "/x", STATIC),
        ConfigSynonym("log.dir", "./odradek-data", DEFAULT),
    )
    assert bad({"log.dirs": " , "}).key == "log.dirs"
    assert bad({"log.dir": ""}).key == "log.dir"
    error = bad({"log.dirs": "/a,/b,/a/"})
    assert error.key == "log.dirs" and "twice" in str(error)


def test_zookeeper_connection_timeout_falls_back_to_session_timeout() -> None:
    c = BrokerConfig.from_properties({"zookeeper.session.timeout.ms": "9000"})
    assert c.get("zookeeper.connection.timeout.ms") == 9000
    c = BrokerConfig.from_properties({"zookeeper.connect": "zk:2181/odradek",
                                      "zookeeper.connection.timeout.ms": "100"})
    assert c.get("zookeeper.connection.timeout.ms") == 100
    assert c.zookeeper_connect == "zk:2181/odradek"


# --- unknown keys and invalid values --------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "key", "says"),
    [
        ({"num.partitons": "3"}, "num.partitons", "did you mean num.partitions?"),
        ({"no.such.thing": "1"}, "no.such.thing", "is not a broker config"),
        ({"retention.ms": "1"}, "retention.ms", "broker's default for it is log.retention.ms"),
        ({"remote.storage.enable": "false"}, "remote.storage.enable",
         "no broker setting supplies its default: set it on the topic"),
        ({"leader.replication.throttled.replicas": "*"}, "leader.replication.throttled.replicas",
         "no broker setting supplies its default"),
        ({"log.message.downconversion.enable": "yes"}, "log.message.downconversion.enable",
         "must be true or false"),
        ({"num.partitions": "many"}, "num.partitions", "must be an integer"),
        ({"num.partitions": "0"}, "num.partitions", "must be >= 1"),
        ({"num.partitions": "2147483648"}, "num.partitions", "32-bit"),
        ({"connections.max.idle.ms": "9223372036854775808"}, "connections.max.idle.ms",
         "64-bit"),
        ({"delete.topic.enable": "yes"}, "delete.topic.enable", "must be true or false"),
        ({"fetch.max.bytes": "1000"}, "fetch.max.bytes", "must be >= 1024"),
        ({"offsets.topic.replication.factor": "40000"}, "offsets.topic.replication.factor",
         "16-bit"),
        ({"leader.imbalance.per.broker.percentage": "101"},
         "leader.imbalance.per.broker.percentage", "between 0 and 100"),
        ({"log.cleaner.threads": "0"}, "log.cleaner.threads", "must be >= 1"),
        ({"log.roll.hours": "0"}, "log.roll.hours", "segment.ms=0"),
        ({"log.retention.minutes": "x"}, "log.retention.minutes", "must be an integer"),
        ({"log.segment.bytes": "10"}, "log.segment.bytes", "must be >= 61"),
        ({"log.cleanup.policy": "delete,archive"}, "log.cleanup.policy", "compact, delete"),
        ({"compression.type": "brotli"}, "compression.type", "must be one of"),
        ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type", "CreateTime"),
        ({"log.cleaner.min.cleanable.ratio": "1.5"}, "log.cleaner.min.cleanable.ratio",
         "between 0 and 1"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas", "must be >= 1"),
        ({"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
         "group.min.session.timeout.ms", "must be <= group.max.session.timeout.ms"),
        ({"replica.fetch.wait.max.ms": "40000"}, "replica.fetch.wait.max.ms",
         "must be <= replica.lag.time.max.ms"),
        ({"log.cleaner.min.compaction.lag.ms": "5", "log.cleaner.max.compaction.lag.ms": "3"},
         "log.cleaner.min.compaction.lag.ms", "must be <= max.compaction.lag.ms"),
    ],
)
def test_invalid_settings_name_the_key(props: dict[str, str], key: str, says: str) -> None:
    error = bad(props)
    assert error.key == key
    assert key in str(error)
    assert says in str(error)
    assert isinstance(error, StorageError) and error.error_code == ErrorCode.INVALID_CONFIG


# --- listeners ------------------------------------------------------------------------------


def test_listeners_parsing() -> None:
    c = BrokerConfig.from_properties({
        "listeners": "plaintext://:9092, INTERNAL://10.0.0.1:0,IPV6://[::1]:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,internal:plaintext,"
                                          "IPV6:PLAINTEXT",
        "advertised.listeners": "PLAINTEXT://broker.example:9092,INTERNAL://10.0.0.1:0",
    })
    assert c.listeners == (
        Listener("PLAINTEXT", "", 9092, "PLAINTEXT"),
        Listener("INTERNAL", "10.0.0.1", 0, "PLAINTEXT"),
        Listener("IPV6", "::1", 9094, "PLAINTEXT"),
    )
    assert c.listeners[0].bind_host is None  # every interface
    assert c.listeners[1].bind_host == "10.0.0.1"
    assert [str(listener) for listener in c.listeners] == [
        "PLAINTEXT://:9092", "INTERNAL://10.0.0.1:0", "IPV6://[::1]:9094",
    ]
    assert [listener.name for listener in c.advertised_listeners] == ["PLAINTEXT", "INTERNAL"]
    assert c.advertised_listeners[0].host == "broker.example"
    assert c.inter_broker_listener_name == "PLAINTEXT"


def test_inter_broker_listener_name() -> None:
    props = {"listeners": "CLIENT://:9092,REPLICATION://:9093",
             "advertised.listeners": "CLIENT://a:9092,REPLICATION://b:9093",
             "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT"}
    assert BrokerConfig.from_properties(props).inter_broker_listener_name == "CLIENT"
    chosen = BrokerConfig.from_properties({**props, "inter.broker.listener.name": "replication"})
    assert chosen.inter_broker_listener_name == "REPLICATION"
    error = bad({**props, "inter.broker.listener.name": "OTHER"})
    assert error.key == "inter.broker.listener.name" and "CLIENT, REPLICATION" in str(error)


@pytest.mark.parametrize(
    ("props", "key", "says"),
    [
        ({"listeners": "localhost:9092"}, "listeners", "is not NAME://host:port"),
        ({"listeners": "PLAINTEXT://host"}, "listeners", "is not NAME://host:port"),
        ({"listeners": "PLAINTEXT://host:http"}, "listeners", "is not NAME://host:port"),
        ({"listeners": ""}, "listeners", "at least one"),
        ({"listeners": "PLAINTEXT://:65536"}, "listeners", "between 0 and 65535"),
        ({"listeners": "PLAINTEXT://:-1"}, "listeners", "between 0 and 65535"),
        ({"listeners": "PLAINTEXT://a:1,plaintext://b:2"}, "listeners", "unique"),
        ({"listeners": "PLAINTEXT://a:1,SSL://b:1",
          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:PLAINTEXT"},
         "listeners", "own port"),
        ({"listeners": "CLIENT://:9092"}, "listeners",
         "no security protocol is defined for listener CLIENT"),
        ({"listeners": "SSL://:9093", "security.inter.broker.protocol": "SASL_SSL"},
         "security.inter.broker.protocol", "must name an advertised listener (SSL)"),
        ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map",
         "is not NAME:PROTOCOL"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map",
         "TLS is not a security protocol"),
        ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,plaintext:SSL"},
         "listener.security.protocol.map", "mapped twice"),
        ({"advertised.listeners": "OTHER://a:1"}, "advertised.listeners",
         "OTHER is not one of the listeners (PLAINTEXT)"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners",
         "meta-address 0.0.0.0"),
        ({"advertised.listeners": "PLAINTEXT://[::]:9092"}, "advertised.listeners",
         "meta-address ::"),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners",
         "advertised.listeners is unset"),
        ({"advertised.listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "advertised.listeners",
         "unique"),
    ],
)
def test_listener_errors(props: dict[str, str], key: str, says: str) -> None:
    error = bad(props)
    assert error.key == key
    assert says in str(error)


def test_bind_all_interfaces_with_advertised_host() -> None:
    c = BrokerConfig.from_properties({"listeners": "PLAINTEXT://0.0.0.0:9092",
                                      "advertised.listeners": "PLAINTEXT://kafka.local:9092"})
    assert c.listeners[0].host == "0.0.0.0"
    assert c.advertised_listeners == (Listener("PLAINTEXT", "kafka.local", 9092, "PLAINTEXT"),)


# --- DescribeConfigs ------------------------------------------------------------------------


def test_describe_lists_every_setting() -> None:
    entries = BrokerConfig.default().describe()
    # All but Kafka's internal settings and its dynamic-only quotas, as Kafka lists them.
    assert [e.name for e in entries] == [n for n, k in BROKER_CONFIGS.items() if k.listed]
    unlisted = {n for n, k in BROKER_CONFIGS.items() if not k.listed}
    assert {n for n, k in KAFKA_39_BROKER_CONFIGS.items() if k.internal} == unlisted
    assert all(e.documentation for e in entries)
    assert BrokerConfig.default().describe(["num.partitions", "nope"])[0].name == "num.partitions"
    assert len(BrokerConfig.default().describe(["nope"])) == 0


def test_describe_entry_fields() -> None:
    c = BrokerConfig.from_properties({"num.partitions": "3"})
    e = entry(c, "num.partitions")
    assert (e.value, e.source, e.read_only, e.is_sensitive) == ("3", STATIC, True, False)
    assert e.config_type == ConfigType.INT
    assert e.synonyms == (ConfigSynonym("num.partitions", "3", STATIC),
                          ConfigSynonym("num.partitions", "1", DEFAULT))
    assert entry(c, "log.retention.ms").config_type == ConfigType.LONG
    assert entry(c, "log.cleanup.policy").config_type == ConfigType.LIST
    assert entry(c, "offsets.topic.replication.factor").config_type == 4  # SHORT
    assert entry(c, "message.max.bytes").read_only is False
    unset = entry(c, "zookeeper.connect")
    assert (unset.value, unset.source, unset.synonyms) == (None, DEFAULT, ())
    assert "Accepted, no effect." in entry(c, "num.io.threads").documentation


def test_describe_retention_synonyms_in_precedence_order() -> None:
    c = BrokerConfig.default()
    e = entry(c, "log.retention.ms")
    assert (e.value, e.source) == (str(168 * 3600_000), DEFAULT)
    assert e.synonyms == (ConfigSynonym("log.retention.hours", "168", DEFAULT),)

    c = BrokerConfig.from_properties({"log.retention.hours": "24",
                                      "log.retention.minutes": "90"})
    c = c.with_dynamic({"log.retention.ms": "5000"}, cluster_default=True)
    c = c.with_dynamic({"log.retention.ms": "1000"})
    e = entry(c, "log.retention.ms")
    assert (e.value, e.source, e.read_only) == ("1000", DYNAMIC, False)
    assert e.synonyms == (
        ConfigSynonym("log.retention.ms", "1000", DYNAMIC),
        ConfigSynonym("log.retention.ms", "5000", DYNAMIC_DEFAULT),
        ConfigSynonym("log.retention.minutes", "90", STATIC),
        ConfigSynonym("log.retention.hours", "24", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    )
    # A coarser name lists only itself and what it falls back to.
    e = entry(c, "log.retention.hours")
    assert (e.value, e.source, e.read_only) == ("24", STATIC, True)
    assert e.synonyms == (ConfigSynonym("log.retention.hours", "24", STATIC),
                          ConfigSynonym("log.retention.hours", "168", DEFAULT))
    e = entry(c, "log.retention.minutes")
    assert (e.value, e.source) == ("90", STATIC)


def test_describe_node_id_from_broker_id() -> None:
    e = entry(BrokerConfig.from_properties({"broker.id": "5"}), "node.id")
    assert (e.value, e.source) == ("5", STATIC)
    assert e.synonyms == (ConfigSynonym("broker.id", "5", STATIC),
                          ConfigSynonym("node.id", "1", DEFAULT))


def test_describe_cluster_default_resource() -> None:
    c = BrokerConfig.default().with_dynamic({"log.retention.ms": "5000"}, cluster_default=True)
    c = c.with_dynamic({"log.retention.ms": "1000", "num.io.threads": "4"})
    (e,) = c.describe(cluster_default=True)
    assert (e.name, e.value, e.source) == ("log.retention.ms", "5000", DYNAMIC_DEFAULT)
    assert e.synonyms[0] == ConfigSynonym("log.retention.ms", "5000", DYNAMIC_DEFAULT)
    assert all(s.source is not DYNAMIC for s in e.synonyms)


# --- dynamic updates ------------------------------------------------------------------------


def test_with_dynamic_overrides_static() -> None:
    static = BrokerConfig.from_properties({"log.retention.hours": "24",
                                           "message.max.bytes": "2000"})
    updated = static.with_dynamic({"log.retention.ms": "60000", "message.max.bytes": "3000",
                                   "log.cleaner.threads": "3"})
    assert updated.dynamic == {"log.retention.ms": "60000", "message.max.bytes": "3000",
                               "log.cleaner.threads": "3"}
    assert updated.properties == static.properties
    assert updated.log_config.retention_ms == 60000
    assert updated.message_max_bytes == updated.log_config.max_message_bytes == 3000
    assert updated.log_manager_config.cleaner_threads == 3
    # The original is untouched.
    assert static.dynamic == {} and static.log_config.retention_ms == 24 * 3600_000
    # None removes an override: the static value applies again.
    back = updated.with_dynamic({"message.max.bytes": None, "log.retention.ms": None})
    assert back.dynamic == {"log.cleaner.threads": "3"}
    assert back.message_max_bytes == 2000 and back.log_config.retention_ms == 24 * 3600_000
    assert back.with_dynamic({"message.max.bytes": None}) == back  # removing nothing


def test_per_broker_overrides_cluster_default() -> None:
    c = BrokerConfig.default().with_dynamic({"min.insync.replicas": "2"}, cluster_default=True)
    assert c.dynamic_defaults == {"min.insync.replicas": "2"}
    assert c.log_config.min_insync_replicas == 2
    c = c.with_dynamic({"min.insync.replicas": "3"})
    assert c.log_config.min_insync_replicas == 3
    assert entry(c, "min.insync.replicas").source is DYNAMIC
    c = c.with_dynamic({"min.insync.replicas": None})
    assert c.log_config.min_insync_replicas == 2
    assert entry(c, "min.insync.replicas").source is DYNAMIC_DEFAULT


def test_with_dynamic_refuses_static_settings() -> None:
    c = BrokerConfig.default()
    with pytest.raises(InvalidConfigError) as info:
        c.with_dynamic({"num.partitions": "3", "log.retention.hours": "1",
                        "log.retention.ms": "5"})
    assert str(info.value) == (
        "Cannot update these configs dynamically: {log.retention.hours, num.partitions}"
    )
    assert info.value.key == "log.retention.hours"
    for name in ("listeners", "node.id", "log.dirs", "log.roll.hours",
                 "log.flush.scheduler.interval.ms"):
        with pytest.raises(InvalidConfigError, match="Cannot update these configs"):
            c.with_dynamic({name: None})


def test_with_dynamic_validates() -> None:
    c = BrokerConfig.default()
    for updates, key in [
        ({"log.retention.ms": "soon"}, "log.retention.ms"),
        ({"message.max.bytes": "-1"}, "message.max.bytes"),
        ({"no.such.setting": "1"}, "no.such.setting"),
        ({"process.roles": "broker"}, "process.roles"),
        ({"log.cleaner.min.compaction.lag.ms": "10",
          "log.cleaner.max.compaction.lag.ms": "5"}, "log.cleaner.min.compaction.lag.ms"),
    ]:
        with pytest.raises(InvalidConfigError) as info:
            c.with_dynamic(updates)
        assert info.value.key == key
    assert c.dynamic == {}


def test_dynamic_flags_follow_kafka() -> None:
    for topic in TOPIC_CONFIGS.values():
        if not topic.synonyms:  # no broker setting supplies its default
            continue
        first, *rest = topic.synonyms
        # log.message.format.version: Kafka 3.9 does not update it dynamically
        assert BROKER_CONFIGS[first.name].dynamic == (first.name != "log.message.format.version")
        assert not any(BROKER_CONFIGS[s.name].dynamic for s in rest)
    # Every name follows Kafka 3.9's update mode, but the listeners: dynamic in Kafka, not here.
    differ = {name for name, kafka in KAFKA_39_BROKER_CONFIGS.items()
              if BROKER_CONFIGS[name].dynamic != kafka.dynamic}
    assert differ == {"listeners", "advertised.listeners", "listener.security.protocol.map"}
    for name, kafka in KAFKA_39_BROKER_CONFIGS.items():
        key = BROKER_CONFIGS[name]
        assert key.per_broker == (key.dynamic and kafka.update_mode is UpdateMode.PER_BROKER)
    implemented = {k.name for k in BROKER_CONFIGS.values()
                   if k.dynamic and not k.no_effect and not k.refused}
    security = {k.name for k in BROKER_CONFIGS.values()
                if k.name.startswith(("ssl.", "sasl."))}
    assert implemented - {s.name for t in TOPIC_CONFIGS.values() for s in t.synonyms} - (
        security) == {
        "log.cleaner.threads", "producer.id.expiration.ms", "num.replica.fetchers",
        "transaction.partition.verification.enable",
        # connection limits (server/connection_quotas.py), followed as they change
        "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
    }


# --- the table ------------------------------------------------------------------------------


def test_topic_defaults_are_derived_from_topic_configs() -> None:
    derived = {key.name for key in BROKER_CONFIGS.values() if key.topic is not None}
    assert derived == {s.name for t in TOPIC_CONFIGS.values() for s in t.synonyms}
    for topic in TOPIC_CONFIGS.values():
        for synonym in topic.synonyms:
            key = BROKER_CONFIGS[synonym.name]
            assert key.topic is topic
            assert key.scale == synonym.scale
            assert key.type is (ConfigType.INT if synonym.scale != 1 else topic.type)
        if topic.synonyms:
            last = BROKER_CONFIGS[topic.synonyms[-1].name]
            assert last.default is not None
    # Topic configs without a broker synonym derive no broker setting.
    without = {t.name for t in TOPIC_CONFIGS.values() if not t.synonyms}
    assert without == {"leader.replication.throttled.replicas",
                       "follower.replication.throttled.replicas", "remote.storage.enable",
                       "remote.log.copy.disable", "remote.log.delete.on.disable"}
    assert not any(key.topic is not None and key.topic.name in without
                   for key in BROKER_CONFIGS.values())
    downconversion = BROKER_CONFIGS["log.message.downconversion.enable"]
    assert downconversion.topic is TOPIC_CONFIGS["message.downconversion.enable"]
    assert downconversion.dynamic and downconversion.default is True
    assert "UNSUPPORTED_VERSION" in downconversion.doc
    assert BrokerConfig.default().log_config == LogConfig.from_broker_properties({})
    props = {"log.segment.bytes": "1000", "log.roll.hours": "3", "log.cleanup.policy": "compact",
             "compression.type": "zstd", "unclean.leader.election.enable": "true",
             "log.message.downconversion.enable": "false"}
    assert BrokerConfig.from_properties(props).log_config == LogConfig.from_broker_properties(
        props
    )


def test_every_default_is_valid_and_documented() -> None:
    for key in BROKER_CONFIGS.values():
        assert key.doc and key.group, key.name
        if key.default is not None:
            assert key.coerce(key.format(key.default)) == key.default, key.name


def test_docs_table_in_step_with_code() -> None:
    current = DOCS_PATH.read_text(encoding="utf-8")
    assert render_docs(current) == current, "run: python -m odradek.server.config"
    for name in BROKER_CONFIGS:
        assert f"| `{name}` |" in current


def test_the_example_server_properties_is_true() -> None:
    """config/server.properties sets Odradek's defaults, so that it changes nothing until
    edited, and every setting it shows, commented out or not, is one the broker takes."""
    path = Path(__file__).parent.parent / "config" / "server.properties"
    props = load_properties(str(path))
    configured, default = BrokerConfig.from_properties(props), BrokerConfig.from_properties({})
    assert configured.log_dirs == default.log_dirs
    for key in props.keys() - {"log.dirs"}:
        assert configured.get(key) == default.get(key), key
    commented = [line[1:].partition("=") for line in path.read_text().splitlines()
                 if line.startswith("#") and "=" in line and " " not in line.split("=")[0]]
    assert commented
    for key, _, value in commented:
        BrokerConfig.from_properties({key: value})  # raises InvalidConfigError if refused


# --- Kafka 3.9's names ----------------------------------------------------------------------


def kafka_text(config: Any) -> str:
    """A Kafka 3.9 default as it would be written in server.properties."""
    if isinstance(config.default, bool):
        return "true" if config.default else "false"
    return str(config.default)


# What Odradek refuses of Kafka 3.9's defaults: broker.id=-1 asks ZooKeeper for an id, and
# Odradek generates none (node.id is set, or 1).
KAFKA_DEFAULTS_REFUSED = {"broker.id", "node.id"}


def test_every_kafka_39_broker_config_is_accepted(caplog: pytest.LogCaptureFixture) -> None:
    """A server.properties setting every Kafka 3.9 broker config that has a default to that
    default starts a broker: each is known, and the default passes its checks."""
    assert set(KAFKA_39_BROKER_CONFIGS) <= set(BROKER_CONFIGS)
    props = {name: kafka_text(config) for name, config in KAFKA_39_BROKER_CONFIGS.items()
             if config.default is not None and name not in KAFKA_DEFAULTS_REFUSED}
    assert len(props) > 250
    props["listeners"] = "PLAINTEXT://localhost:0"  # Kafka's own binds every interface
    with caplog.at_level("WARNING", logger="odradek.server.config"):
        config = BrokerConfig.from_properties(props)
    for name, raw in props.items():
        assert config.properties[name] == raw
        assert entry(config, name).source is STATIC, name
    warned = {r.getMessage().split("=", 1)[0] for r in caplog.records}
    ignored = {name for name in props if BROKER_CONFIGS[name].ignored(
        BROKER_CONFIGS[name].coerce(props[name]))}
    assert warned == ignored
    assert {"sasl.kerberos.min.time.before.relogin", "inter.broker.protocol.version",
            "num.network.threads", "replication.quota.window.num"} <= warned
    assert "log.message.format.version" not in warned  # 3.0-IV1 asks for v2: no change
    assert "num.partitions" not in warned and "log.retention.hours" not in warned


def test_kafka_39_types_and_defaults_are_described() -> None:
    config = BrokerConfig.default()
    for name, kafka in KAFKA_39_BROKER_CONFIGS.items():
        key = BROKER_CONFIGS[name]
        assert key.config_type == int(kafka.type), name  # DescribeConfigs' type codes
        assert key.sensitive == (kafka.type is KafkaType.PASSWORD), name
        if key.no_effect or key.refused:  # not Odradek's: Kafka 3.9's default, in Kafka's form
            assert key.default == kafka.default, name
            if kafka.internal:
                continue
            e = entry(config, name)
            shown = None if kafka.default is None or key.sensitive else kafka_text(kafka)
            if kafka.type is KafkaType.DOUBLE:
                shown = java_double(kafka.default)
            assert (e.value, e.source, e.read_only) == (shown, DEFAULT, not kafka.dynamic), name
            assert "no effect" in e.documentation or "refused" not in e.documentation, name
    e = entry(config, "log.cleaner.io.max.bytes.per.second")
    assert e.value == "1.7976931348623157E308"  # as Java's Double.toString writes it
    e = entry(config, "ssl.keystore.password")
    assert (e.value, e.is_sensitive, e.config_type) == (None, True, 9)
    assert entry(config, "authorizer.class.name").value == ""
    assert entry(config, "group.consumer.assignors").value == (
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor")  # a list, in order
    assert entry(config, "group.consumer.assignors").config_type == 7
    assert entry(config, "principal.builder.class").config_type == 8  # CLASS
    assert entry(config, "sasl.login.refresh.buffer.seconds").config_type == 4  # SHORT
    assert entry(config, "inter.broker.protocol.version").value == "3.9-IV0"
    assert entry(config, "log.message.format.version").value == "3.0-IV1"


def test_deprecated_settings_are_kafka_39s() -> None:
    c = BrokerConfig.from_properties({"inter.broker.protocol.version": "2.8",
                                      "log.message.format.version": "0.10.0.0",
                                      "log.message.timestamp.difference.max.ms": "60000",
                                      "offsets.commit.required.acks": "1"})
    assert c.get("log.message.format.version") == "0.10.0.0"
    assert c.log_config.message_format_version == "0.10.0.0"
    # Kafka 3.9: the difference applies where before.max.ms / after.max.ms keep defaults
    assert c.log_config.message_timestamp_before_max_ms == 60000
    assert c.log_config.message_timestamp_after_max_ms == 60000
    assert c.get("offsets.commit.required.acks") == 1
    for name, raw in [("inter.broker.protocol.version", "4.0"),  # not a production version
                      ("inter.broker.protocol.version", "three"),
                      ("log.message.format.version", "0.10.3"),
                      ("offsets.commit.required.acks", "40000")]:  # a short
        assert bad({name: raw}).key == name
    ok = BrokerConfig.from_properties({"inter.broker.protocol.version": "4.0-IV1"})
    assert ok.get("inter.broker.protocol.version") == "4.0-IV1"


def test_ignored_settings_warnings() -> None:
    warnings = ignored_settings({
        "sasl.kerberos.min.time.before.relogin": "58000",
        "log.message.format.version": "0.10.0",  # Kafka 3.9 warns: v0/v1 are not written
        "message.max.bytes": "2000",  # has its effect
        "ssl.keystore.password": "secret",
        "num.io.threads": None,  # a removal
        "listener.name.sasl_ssl.plain.sasl.jaas.config": "jaas-secret",
    })
    assert warnings[0] == (
        "sasl.kerberos.min.time.before.relogin=58000 is accepted and has no effect: Kerberos "
        "(GSSAPI) and the client-side login, which Odradek's brokers do not use: they "
        "authenticate clients with PLAIN, SCRAM and OAUTHBEARER")
    assert warnings[1].startswith("log.message.format.version=0.10.0 is accepted and has no "
                                  "effect: Odradek always writes record batches v2")
    # TLS and SASL settings have their effect (issue 17); Java's machinery has none.
    assert len(warnings) == 2
    assert ignored_settings({"ssl.keymanager.algorithm": "PKIX"})[0].startswith(
        "ssl.keymanager.algorithm=PKIX is accepted and has no effect: Java's TLS machinery")
    assert ignored_settings({"log.message.format.version": "2.8"}) == []  # writes v2 anyway
    assert ignored_settings({"inter.broker.protocol.version": "3.9"})  # Odradek's own
    assert ignored_settings({"compression.zstd.level": "5"})  # a topic default with no effect


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("zookeeper.set.acl", "true", "no ACLs on the znodes"),
        ("zookeeper.ssl.client.enable", "true", "without TLS"),
        ("create.topic.policy.class.name", "com.example.Policy", "unchecked"),
        ("alter.config.policy.class.name", "com.example.Policy", "unchecked"),
        ("remote.log.storage.system.enable", "true", "no tiered storage"),
        ("zookeeper.metadata.migration.enable", "true", "no KRaft mode"),
        ("controller.quorum.voters", "1@localhost:9093", "no KRaft mode"),
    ],
)
def test_settings_that_would_mislead_are_refused(name: str, value: str, says: str) -> None:
    error = bad({name: value})
    assert error.key == name
    assert str(error).startswith(f"{name}={value} is refused: ")
    assert says in str(error)


def test_the_authorizer_is_kafkas_acl_authorizer() -> None:
    for name in ("kafka.security.authorizer.AclAuthorizer",
                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        config = BrokerConfig.from_properties({"authorizer.class.name": name,
                                               "super.users": "User:admin;User:ops"})
        assert config.get("authorizer.class.name") == name
        assert config.get("allow.everyone.if.no.acl.found") is False
    error = bad({"authorizer.class.name": "com.example.MyAuthorizer"})
    assert error.key == "authorizer.class.name"
    assert "kafka.security.authorizer.AclAuthorizer" in str(error)


def test_inter_broker_listener_is_named_once() -> None:
    error = bad({"inter.broker.listener.name": "PLAINTEXT",
                 "security.inter.broker.protocol": "PLAINTEXT"})
    assert str(error) == ("Only one of inter.broker.listener.name and "
                          "security.inter.broker.protocol should be set.")


def test_refused_settings_take_their_default() -> None:
    c = BrokerConfig.from_properties({
        "authorizer.class.name": "", "ssl.client.auth": "none", "zookeeper.set.acl": "false",
        "security.inter.broker.protocol": "PLAINTEXT", "process.roles": "",
        "zookeeper.ssl.client.enable": "false", "remote.log.storage.system.enable": "false",
        "zookeeper.metadata.migration.enable": "false"})
    assert c.get("security.inter.broker.protocol") == "PLAINTEXT"
    assert entry(c, "ssl.client.auth").source is STATIC


def test_listener_prefixed_settings() -> None:
    props = {"listener.name.internal.ssl.keystore.location": "/etc/kafka/k.jks",
             "listener.name.internal.ssl.keystore.password": "pw",
             "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "jaas",
             "listener.name.external.max.connections": "100"}
    c = BrokerConfig.from_properties(props)
    e = entry(c, "listener.name.internal.ssl.keystore.location")
    assert (e.value, e.source, e.read_only, e.config_type) == ("/etc/kafka/k.jks", STATIC,
                                                               False, ConfigType.STRING)
    assert e.synonyms == (ConfigSynonym(e.name, "/etc/kafka/k.jks", STATIC),)
    e = entry(c, "listener.name.internal.ssl.keystore.password")
    assert (e.value, e.is_sensitive, e.synonyms[0].value) == (None, True, None)
    e = entry(c, "listener.name.external.max.connections")
    assert e.value == "100"
    assert e.synonyms[-1] == ConfigSynonym("max.connections", str(2**31 - 1), DEFAULT)
    assert entry(c, "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config").is_sensitive
    names = [e.name for e in c.describe()]
    assert names[-len(props):] == list(props)  # after the table's, when set
    assert "listener.name.internal.ssl.keystore.location" not in [
        e.name for e in BrokerConfig.default().describe()]
    for name in ("listener.name.internal.num.partitions", "listener.name.x.no.such",
                 "listener.name.internal", "listener.name..ssl.protocol"):
        assert bad({name: "1"}).key == name
    assert bad({"listener.name.x.max.connections": "-1"}).key == "listener.name.x.max.connections"


def test_kafka_39_dynamic_rules() -> None:
    c = BrokerConfig.default()
    # Accepted dynamically, no effect: Kafka 3.9's per-broker and cluster-wide settings.
    c = c.with_dynamic({"sasl.kerberos.min.time.before.relogin": "58000",
                        "background.threads": "5", "leader.replication.throttled.rate": "100",
                        "metric.reporters": ""})
    assert c.get("sasl.kerberos.min.time.before.relogin") == 58000
    assert entry(c, "leader.replication.throttled.rate").source is DYNAMIC
    c = c.with_dynamic({"background.threads": "6", "max.connections": "10",
                        "listener.name.x.max.connection.creation.rate": "5"},
                       cluster_default=True)
    assert c.get("background.threads") == 5  # the per-broker value wins
    for updates, cluster_default, says in [
        ({"sasl.kerberos.min.time.before.relogin": "1"}, True,
         "Cannot update these configs at default cluster level, broker id must be specified: "
         "{sasl.kerberos.min.time.before.relogin}"),
        ({"listener.name.x.ssl.protocol": "TLSv1.3"}, True, "at default cluster level"),
        ({"ssl.keystore.location": "/k.jks", "ssl.truststore.location": "/t.jks"}, False,
         "These security configs can be dynamically updated only per-listener using the "
         "listener prefix: {ssl.keystore.location, ssl.truststore.location}"),
        ({"sasl.jaas.config": "x"}, False, "Password encoder secret not configured"),
        ({"listener.name.x.ssl.key.password": "x"}, False, "password.encoder.secret"),
        ({"listener.name.x.ssl.key.password": "x"}, True, "broker id must be specified"),
        ({"inter.broker.protocol.version": "3.9"}, False, "Cannot update these configs"),
        ({"authorizer.class.name": "x"}, False, "Cannot update these configs"),
        ({"listener.name.internal.ssl.client.auth": "required"}, False,
         "Only a TLS listener's keystore and truststore (listener.name.<listener>."
         "ssl.keystore.location, ...) can be updated dynamically"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, False, "Only a TLS listener's keystore"),
        ({"background.threads": "0"}, False, "must be >= 1"),
    ]:
        with pytest.raises(InvalidConfigError) as info:
            c.with_dynamic(updates, cluster_default=cluster_default)
        assert says in str(info.value), updates
    # Removing a password is no update of one.
    assert c.with_dynamic({"sasl.jaas.config": None}) == c
    # A listener's keystore and truststore are reloaded (KIP-226).
    reloaded = c.with_dynamic({"listener.name.internal.ssl.keystore.location": "/k.p12",
                               "listener.name.internal.ssl.truststore.type": "PEM"})
    assert reloaded.listener_values("INTERNAL", ["ssl.keystore.location"]) == {
        "ssl.keystore.location": "/k.p12"}


def test_kafka_39_short_and_list_settings() -> None:
    c = BrokerConfig.from_properties({"group.consumer.assignors": " b ,a",
                                      "group.coordinator.rebalance.protocols": "classic",
                                      "sasl.login.refresh.buffer.seconds": "100"})
    assert c.get("group.consumer.assignors") == "b,a"  # Kafka's list, in order
    assert entry(c, "group.consumer.assignors").value == "b,a"
    for name, raw in [("group.coordinator.rebalance.protocols", "classic,nope"),
                      ("group.share.max.groups", "101"),  # Kafka's [1,...,100]
                      ("sasl.login.refresh.buffer.seconds", "32768"),  # a short
                      ("ssl.client.auth", "maybe"),
                      ("background.threads", "many")]:
        assert bad({name: raw}).key == name
