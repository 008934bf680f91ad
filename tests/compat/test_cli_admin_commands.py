"""The operator commands a Kafka user reaches for, run as real processes against one real
broker process: `topics offsets` (kafka-get-offsets.sh), `topics describe --all`,
`configs describe|alter` (kafka-configs.sh), `records delete` (kafka-delete-records.sh)
and `log-dirs describe` (kafka-log-dirs.sh), with their --json, exit codes and failures.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from support.broker import BrokerProcess
from test_cli import Run, closed_port, create, failed, odradek, ok

from odradek.cli.main import main
from odradek.cli.wire import WireError, send_request
from odradek.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest

STATIC_RETENTION_BYTES = "1073741824"  # log.retention.bytes in the broker's settings


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("cli-admin")
    process = BrokerProcess(data, {
        "auto.create.topics.enable": "false",
        "log.dirs": f"{data / 'a'},{data / 'b'}",
        "log.retention.bytes": STATIC_RETENTION_BYTES,
    }).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


# Record timestamps: BASE + 1000, BASE + 2000...: recent, so that retention (7 days by
# default) leaves them alone, and whole seconds, so that ISO 8601 times are easy to write.
BASE = (int(time.time()) - 600) * 1000


def produce(broker: BrokerProcess, topic: str, partition: int, count: int) -> None:
    """`count` records with the CreateTime timestamps BASE + 1000 * (1, 2, ...)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=partition,
                         timestamp=BASE + 1000 * (i + 1))
    assert producer.flush(20) == 0


def offsets(broker: BrokerProcess, topic: str, *extra: str) -> dict[int, dict[str, Any]]:
    rows = ok(odradek(broker, "topics", "offsets", topic, "--json", *extra)).json()
    return {r["partition"]: r for r in rows}


def table(run: Run) -> list[list[str]]:
    return [line.split() for line in run.out.splitlines()]


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A usage mistake: exit status 2 and a message, found before anything is sent (so
    run in this process, without the cost of starting one)."""
    try:
        code = main([*args, "--bootstrap-server", f"127.0.0.1:{closed_port()}"])
    except SystemExit as e:  # argparse's own checks
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == 2, (args, err)
    assert err.strip() and "Traceback" not in err, (args, err)
    return err


# ---- topics offsets ----------------------------------------------------------------------

def test_topics_offsets(broker: BrokerProcess) -> None:
    create(broker, "adm-offsets", 3)
    produce(broker, "adm-offsets", 0, 5)
    rows = offsets(broker, "adm-offsets")
    assert sorted(rows) == [0, 1, 2]
    assert rows[0]["log_start_offset"] == 0 and rows[0]["high_watermark"] == 5
    assert rows[0]["size"] > 0 and rows[0]["leader"] == 1
    assert [(rows[p]["log_start_offset"], rows[p]["high_watermark"], rows[p]["size"])
            for p in (1, 2)] == [(0, 0, 0), (0, 0, 0)]
    assert "offset" not in rows[0]  # only with --time

    lines = table(ok(odradek(broker, "topics", "offsets", "adm-offsets")))
    assert lines[0] == ["TOPIC", "PARTITION", "LOG-START-OFFSET", "HIGH-WATERMARK", "SIZE"]
    assert lines[1] == ["adm-offsets", "0", "0", "5", str(rows[0]["size"])]

    # --time as kafka-get-offsets: the first record at or after the time...
    iso = datetime.fromtimestamp((BASE + 2500) / 1000, UTC).isoformat()
    for when in (str(BASE + 2500), iso, iso.replace("+00:00", "Z")):
        at = offsets(broker, "adm-offsets", "--time", when, "--partitions", "0,1")
        assert sorted(at) == [0, 1]
        assert (at[0]["offset"], at[0]["timestamp"]) == (2, BASE + 3000), when
        assert at[1]["offset"] is None  # no record at or after it
    assert offsets(broker, "adm-offsets", "--time", str(BASE + 99_000), "--partitions",
                   "0")[0]["offset"] is None
    # ...and Kafka's names and numbers for the special times.
    for when, expected in (("earliest", 0), ("-2", 0), ("latest", 5), ("-1", 5),
                           ("max-timestamp", 4), ("-3", 4)):
        assert offsets(broker, "adm-offsets", "--time", when, "--partitions", "0")[0][
            "offset"] == expected, when
    lines = table(ok(odradek(broker, "topics", "offsets", "adm-offsets", "--time",
                             "max-timestamp", "--partitions", "0")))
    assert lines[0][-2:] == ["OFFSET", "TIMESTAMP"] and lines[1][-2:] == ["4", str(BASE + 5000)]


def test_topics_offsets_failures(broker: BrokerProcess,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    create(broker, "adm-offsets-known", 1)
    run = failed(odradek(broker, "topics", "offsets", "adm-offsets-known", "adm-no-such",
                         "--json"), "adm-no-such", "UNKNOWN_TOPIC_OR_PART")
    rows = run.json()
    assert rows[0]["topic"] == "adm-offsets-known" and rows[0]["high_watermark"] == 0
    assert rows[1] == {"topic": "adm-no-such", "error": {
        "code": "UNKNOWN_TOPIC_OR_PART", "message": rows[1]["error"]["message"]}}
    failed(odradek(broker, "topics", "offsets", "adm-offsets-known", "--partitions", "0,7"),
           "no partition 7")
    for bad in ("yesterday", "-7"):
        assert "--time" in usage_error(capsys, "topics", "offsets", "t", "--time", bad)


# ---- topics describe --all ---------------------------------------------------------------

def test_topics_describe_all_configs(broker: BrokerProcess) -> None:
    create(broker, "adm-describe", 1, "--config", "retention.ms=3600000")
    [plain] = ok(odradek(broker, "topics", "describe", "adm-describe", "--json")).json()
    assert plain["configs"] == {"retention.ms": "3600000"} and "all_configs" not in plain
    for flag in ("--all", "--all-configs"):
        [topic] = ok(odradek(broker, "topics", "describe", "adm-describe", flag,
                             "--json")).json()
        assert topic["configs"] == {"retention.ms": "3600000"}  # unchanged
        configs = {c["name"]: c for c in topic["all_configs"]}
        assert list(configs) == sorted(configs)
        assert configs["retention.ms"] == {
            "name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
            "read_only": False, "sensitive": False}
        assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
        assert configs["cleanup.policy"]["value"] == "delete"
        # A topic default that comes from the broker's server.properties:
        assert configs["retention.bytes"]["source"] == "STATIC_BROKER_CONFIG"
        assert configs["retention.bytes"]["value"] == STATIC_RETENTION_BYTES
    out = ok(odradek(broker, "topics", "describe", "adm-describe", "--all")).out
    assert "Configs: retention.ms=3600000" in out
    assert "All configs for topic adm-describe:" in out
    assert "NAME" in out and "SOURCE" in out and "READ-ONLY" in out and "SENSITIVE" in out
    assert ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG", "false", "false"] in [
        line.split() for line in out.splitlines()]


# ---- configs describe / alter ------------------------------------------------------------

def configs_of(broker: BrokerProcess, *args: str) -> list[dict[str, Any]]:
    described: list[dict[str, Any]] = ok(odradek(broker, "configs", "describe", *args,
                                                 "--json")).json()
    return described


def test_configs_describe(broker: BrokerProcess, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    create(broker, "adm-configs-describe", 1, "--config", "segment.ms=600000")
    [own] = configs_of(broker, "--entity-type", "topics", "--entity-name",
                       "adm-configs-describe")
    assert own["entity_type"] == "topics" and own["entity_name"] == "adm-configs-describe"
    assert [(c["name"], c["value"], c["source"]) for c in own["configs"]] == [
        ("segment.ms", "600000", "DYNAMIC_TOPIC_CONFIG")]
    [every] = configs_of(broker, "--entity-type", "topics", "--entity-name",
                         "adm-configs-describe", "--all")
    assert len(every["configs"]) > 20
    assert {c["source"] for c in every["configs"]} >= {"DYNAMIC_TOPIC_CONFIG",
                                                        "DEFAULT_CONFIG",
                                                        "STATIC_BROKER_CONFIG"}

    # Brokers: with no name, each broker and the cluster-wide default; the settings from
    # the command line (server.properties) are static and read-only, node.id too.
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={broker.bootstrap}\n")
    listed = ok(odradek(None, "configs", "describe", "--entity-type", "brokers",
                        "--command-config", str(config), "--json")).json()
    assert [(b["entity_name"], b["entity_default"]) for b in listed] == [("1", False),
                                                                         (None, True)]
    [one] = configs_of(broker, "--entity-type", "brokers", "--entity-name", "1", "--all")
    configs = {c["name"]: c for c in one["configs"]}
    assert configs["log.retention.bytes"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["node.id"]["read_only"] is True
    assert configs["log.cleaner.threads"]["read_only"] is False
    out = ok(odradek(broker, "configs", "describe", "--entity-type", "brokers")).out
    assert "Dynamic configs for broker 1 are:" in out
    assert "Default configs for brokers in the cluster are:" in out
    out = ok(odradek(broker, "configs", "describe", "--entity-type", "brokers",
                     "--entity-name", "1", "--all")).out
    assert "All configs for broker 1 are:" in out
    [node_id] = [line.split() for line in out.splitlines() if line.startswith("node.id ")]
    assert (node_id[0], node_id[1], node_id[3]) == ("node.id", "1", "true")

    failed(odradek(broker, "configs", "describe", "--entity-type", "topics", "--entity-name",
                   "adm-no-such"), "topic adm-no-such", "UNKNOWN_TOPIC_OR_PART")
    failed(odradek(broker, "configs", "describe", "--entity-type", "brokers",
                   "--entity-name", "9"), "no broker 9")
    for usage in (["--entity-type", "topics", "--entity-default"],
                  ["--entity-type", "brokers", "--entity-name", "one"],
                  ["--entity-type", "groups"]):
        usage_error(capsys, "configs", "describe", *usage)


def test_configs_alter_topic(broker: BrokerProcess,
                             capsys: pytest.CaptureFixture[str]) -> None:
    create(broker, "adm-configs-topic", 1)
    topic = ["--entity-type", "topics", "--entity-name", "adm-configs-topic"]
    run = ok(odradek(broker, "configs", "alter", *topic, "--add-config",
                     "retention.ms=5000,cleanup.policy=[compact,delete]", "--json"))
    result = run.json()
    assert result["set"] == {"retention.ms": "5000", "cleanup.policy": "compact,delete"}
    changes = {c["name"]: c for c in result["changes"]}
    assert changes["retention.ms"] == {
        "name": "retention.ms", "old_value": "604800000", "old_source": "DEFAULT_CONFIG",
        "new_value": "5000", "new_source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False}
    assert changes["cleanup.policy"]["new_value"] == "compact,delete"
    [own] = configs_of(broker, *topic)
    assert {c["name"]: c["value"] for c in own["configs"]} == {
        "retention.ms": "5000", "cleanup.policy": "compact,delete"}

    out = ok(odradek(broker, "configs", "alter", *topic, "--delete-config",
                     "retention.ms")).out
    assert "Completed updating config for topic adm-configs-topic." in out
    assert ["retention.ms", "5000", "(DYNAMIC_TOPIC_CONFIG)", "604800000",
            "(DEFAULT_CONFIG)"] in [line.split() for line in out.splitlines()]

    # Deleting what is not set on the topic, as kafka-configs refuses it.
    failed(odradek(broker, "configs", "alter", *topic, "--delete-config", "segment.ms"),
           "segment.ms", "not set on topic adm-configs-topic")
    failed(odradek(broker, "configs", "alter", *topic, "--add-config", "no.such.config=1"),
           "INVALID_CONFIG", "no.such.config")
    failed(odradek(broker, "configs", "alter", "--entity-type", "topics", "--entity-name",
                   "adm-no-such", "--add-config", "retention.ms=1"), "UNKNOWN_TOPIC_OR_PART")
    for usage in ([], ["--add-config", "retention.ms"],
                  ["--add-config", "retention.ms=1", "--delete-config", "retention.ms"]):
        usage_error(capsys, "configs", "alter", *topic, *usage)
    assert "--entity-name or --entity-default" in usage_error(
        capsys, "configs", "alter", "--entity-type", "topics", "--add-config", "retention.ms=1")


def test_configs_alter_brokers(broker: BrokerProcess) -> None:
    one = ["--entity-type", "brokers", "--entity-name", "1"]
    changes = ok(odradek(broker, "configs", "alter", *one, "--add-config",
                         "log.cleaner.threads=2", "--json")).json()["changes"]
    assert changes == [{"name": "log.cleaner.threads", "old_value": "1",
                        "old_source": "DEFAULT_CONFIG", "new_value": "2",
                        "new_source": "DYNAMIC_BROKER_CONFIG", "sensitive": False}]
    [own] = configs_of(broker, *one)
    assert [(c["name"], c["value"], c["source"]) for c in own["configs"]] == [
        ("log.cleaner.threads", "2", "DYNAMIC_BROKER_CONFIG")]
    ok(odradek(broker, "configs", "alter", *one, "--delete-config", "log.cleaner.threads"))
    assert configs_of(broker, *one)[0]["configs"] == []

    # Read-only and unknown broker configs: the broker's refusal, and what it means.
    failed(odradek(broker, "configs", "alter", *one, "--add-config", "broker.id=5"),
           "INVALID_REQUEST", "broker.id", "read-only")
    failed(odradek(broker, "configs", "alter", *one, "--add-config", "no.such.config=1"),
           "INVALID_REQUEST", "no.such.config")
    failed(odradek(broker, "configs", "alter", "--entity-type", "brokers", "--entity-name",
                   "9", "--add-config", "log.cleaner.threads=2"), "no broker 9")

    # The cluster-wide default (through Odradek's own socket), seen by the topics too.
    default = ["--entity-type", "brokers", "--entity-default"]
    out = ok(odradek(broker, "configs", "alter", *default, "--add-config",
                     "log.retention.ms=7200000")).out
    assert "Completed updating default config for brokers in the cluster." in out
    try:
        [described] = configs_of(broker, *default)
        assert described["entity_default"] is True and described["entity_name"] is None
        assert [(c["name"], c["value"], c["source"]) for c in described["configs"]] == [
            ("log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
        [on_broker] = configs_of(broker, *one, "--all")
        retention = {c["name"]: c for c in on_broker["configs"]}["log.retention.ms"]
        assert (retention["value"], retention["source"]) == (
            "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    finally:
        result = ok(odradek(broker, "configs", "alter", *default, "--delete-config",
                            "log.retention.ms", "--json")).json()
    assert result["changes"][0]["old_value"] == "7200000"
    assert result["changes"][0]["new_value"] is None
    assert configs_of(broker, *default)[0]["configs"] == []


# ---- records delete ----------------------------------------------------------------------

def test_records_delete(broker: BrokerProcess, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    create(broker, "adm-records", 2)
    produce(broker, "adm-records", 0, 5)
    produce(broker, "adm-records", 1, 2)
    run = ok(odradek(broker, "records", "delete", "--topic", "adm-records", "--partition",
                     "0", "--offset", "2"))
    assert table(run) == [["TOPIC", "PARTITION", "LOW-WATERMARK", "ERROR"],
                          ["adm-records", "0", "2", "-"]]
    assert offsets(broker, "adm-records")[0]["log_start_offset"] == 2

    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "adm-records", "partition": 0, "offset": 3},
        {"topic": "adm-records", "partition": 1, "offset": 9},
        {"topic": "adm-no-such", "partition": 0, "offset": 1}]}))
    run = failed(odradek(broker, "records", "delete", "--offset-json-file", str(plan),
                         "--json"), "adm-records-1: OFFSET_OUT_OF_RANGE",
                 "adm-no-such-0: UNKNOWN_TOPIC_OR_PART")
    rows = run.json()
    assert rows[0] == {"topic": "adm-records", "partition": 0, "offset": 3,
                       "low_watermark": 3, "error": None}
    assert rows[1]["error"]["code"] == "OFFSET_OUT_OF_RANGE"
    assert rows[1]["low_watermark"] is None
    assert rows[2]["error"]["code"] == "UNKNOWN_TOPIC_OR_PART"

    # -1: up to the high watermark; --offsets-json reads the same file, - is stdin.
    everything = json.dumps({"partitions": [{"topic": "adm-records", "partition": 1,
                                             "offset": -1}]}).encode()
    rows = ok(odradek(broker, "records", "delete", "--offsets-json", "-", "--json",
                      stdin=everything)).json()
    assert rows == [{"topic": "adm-records", "partition": 1, "offset": -1,
                     "low_watermark": 2, "error": None}]
    after = offsets(broker, "adm-records")
    assert (after[0]["log_start_offset"], after[1]["log_start_offset"]) == (3, 2)

    for usage in ([], ["--topic", "adm-records", "--offset", "1"],
                  ["--topic", "adm-records", "--partition", "0", "--offset", "-5"],
                  ["--offset-json-file", str(plan), "--topic", "adm-records"]):
        usage_error(capsys, "records", "delete", *usage)
    plan.write_text('{"partitions": [{"topic": "t"}]}')
    assert "not kafka-delete-records.sh's JSON" in usage_error(
        capsys, "records", "delete", "--offset-json-file", str(plan))


# ---- log-dirs describe -------------------------------------------------------------------

def test_log_dirs_describe(broker: BrokerProcess) -> None:
    create(broker, "adm-log-dirs", 2)
    produce(broker, "adm-log-dirs", 0, 3)
    described = ok(odradek(broker, "log-dirs", "describe", "--json")).json()
    assert described["version"] == 1
    [b] = described["brokers"]
    assert b["broker"] == 1 and set(b) == {"broker", "logDirs"}
    data = broker.data_dir
    assert [d["logDir"] for d in b["logDirs"]] == [str(data / "a"), str(data / "b")]
    for d in b["logDirs"]:
        assert set(d) == {"logDir", "error", "partitions"} and d["error"] is None
        for p in d["partitions"]:
            assert set(p) == {"partition", "size", "offsetLag", "isFuture"}
    partitions = {p["partition"]: p for d in b["logDirs"] for p in d["partitions"]}
    size = offsets(broker, "adm-log-dirs")[0]["size"]
    assert partitions["adm-log-dirs-0"] == {"partition": "adm-log-dirs-0", "size": size,
                                            "offsetLag": 0, "isFuture": False}
    assert size > 0 and partitions["adm-log-dirs-1"]["size"] == 0

    only = ok(odradek(broker, "log-dirs", "describe", "--broker-list", "1", "--topic-list",
                      "adm-log-dirs", "--json")).json()
    names = sorted(p["partition"] for d in only["brokers"][0]["logDirs"]
                   for p in d["partitions"])
    assert names == ["adm-log-dirs-0", "adm-log-dirs-1"]

    lines = table(ok(odradek(broker, "log-dirs", "describe", "--topic-list",
                             "adm-log-dirs")))
    assert lines[0] == ["BROKER", "LOG-DIR", "ERROR", "PARTITIONS", "SIZE", "TOTAL-BYTES",
                        "USABLE-BYTES"]
    assert ["BROKER", "LOG-DIR", "PARTITION", "SIZE", "OFFSET-LAG", "IS-FUTURE"] in lines
    assert any(line[2:] == ["adm-log-dirs-0", str(size), "0", "false"] for line in lines)

    failed(odradek(broker, "log-dirs", "describe", "--broker-list", "1,9"), "no broker 9")
    # TLS and SASL work (tests/compat/test_cli_quotas.py); a mechanism the CLI's own
    # socket has no client for is refused before anything is sent.
    run = failed(odradek(broker, "log-dirs", "describe", "-X",
                         "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=OAUTHBEARER"),
                 "SASL mechanism OAUTHBEARER (it would need a token source) is not supported")
    assert run.code == 2


def test_log_dirs_describe_an_offline_dir(tmp_path: Path) -> None:
    """A log dir the broker can no longer reach is KAFKA_STORAGE_ERROR, the others are
    still described (a broker of its own: this one is damaged on purpose)."""
    own = BrokerProcess(tmp_path, {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"}).start()
    try:
        shutil.rmtree(tmp_path / "b")
        described = ok(odradek(own, "log-dirs", "describe", "--json")).json()
        dirs = {d["logDir"]: d for d in described["brokers"][0]["logDirs"]}
        assert dirs[str(tmp_path / "a")]["error"] is None
        assert dirs[str(tmp_path / "b")] == {"logDir": str(tmp_path / "b"),
                                             "error": "KAFKA_STORAGE_ERROR",
                                             "partitions": []}
        lines = table(ok(odradek(own, "log-dirs", "describe")))
        assert [str(tmp_path / "b"), "KAFKA_STORAGE_ERROR"] in [line[1:3] for line in lines]
    finally:
        own.kill()


# ---- an unreachable cluster, and the socket helper ---------------------------------------

def test_an_unreachable_cluster_is_reported_within_seconds() -> None:
    down = f"127.0.0.1:{closed_port()}"
    commands = [
        ["topics", "offsets", "t"],
        ["topics", "describe", "t", "--all"],
        ["configs", "describe", "--entity-type", "brokers", "--entity-default"],
        ["configs", "alter", "--entity-type", "topics", "--entity-name", "t",
         "--add-config", "retention.ms=1"],
        ["records", "delete", "--topic", "t", "--partition", "0", "--offset", "1"],
        ["log-dirs", "describe"],
    ]
    # All at once: each waits about 3 s for the connections to keep failing.
    began = time.monotonic()
    runs: list[Run] = []
    threads = [threading.Thread(target=lambda c=c: runs.append(
        odradek(None, *c, "--bootstrap-server", down, timeout=30))) for c in commands]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - began < 15
    assert len(runs) == len(commands)
    for run in runs:
        failed(run, "cannot reach the cluster", down, "Connection refused")


def test_wire_errors_name_the_address() -> None:
    port = closed_port()
    with pytest.raises(WireError, match=f"broker 3 at 127.0.0.1:{port}: cannot connect"):
        send_request("127.0.0.1", port, DescribeLogDirsRequest(topics=None), timeout=2,
                     node_id=3)
    # A peer that accepts but never answers: the timeout, and the address.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        with pytest.raises(WireError, match=f"{address}: no answer to ApiVersions within"):
            send_request("127.0.0.1", silent.getsockname()[1],
                         DescribeLogDirsRequest(topics=None), timeout=0.5)
        assert time.monotonic() - began < 3


def test_wire_request_to_the_broker(broker: BrokerProcess) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    response = send_request(host, int(port), DescribeLogDirsRequest(topics=None), timeout=5)
    assert [r.log_dir for r in response.results] == [  # type: ignore[attr-defined]
        str(broker.data_dir / "a"), str(broker.data_dir / "b")]


def test_help_lists_the_commands() -> None:
    done = subprocess.run([sys.executable, "-m", "odradek", "--help"], capture_output=True,
                          text=True, timeout=30)
    for name in ("configs", "records", "log-dirs"):
        assert name in done.stdout
