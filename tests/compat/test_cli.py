"""The `odradek` client commands (topics, produce, consume) run as real processes against
one real broker process: what an operator types is what is tested.

Parts the broker does not speak yet (CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs) are skipped, not failed, when librdkafka reports them unsupported.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.broker import BrokerProcess
from support.murmur2 import partition_for_key

UNSUPPORTED = "_UNSUPPORTED_FEATURE"


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # No auto-creation: a typo in a topic name must be an error, not a new topic.
    process = BrokerProcess(tmp_path_factory.mktemp("cli-broker"),
                            {"auto.create.topics.enable": "false"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


class Run:
    """A finished `python -m odradek ...`."""

    def __init__(self, done: subprocess.CompletedProcess[bytes]) -> None:
        self.code = done.returncode
        self.stdout = done.stdout
        self.out = done.stdout.decode("utf-8", "replace")
        self.err = done.stderr.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines()]

    def __repr__(self) -> str:
        return f"exit {self.code}\nstdout: {self.out}\nstderr: {self.err}"


def odradek(broker: BrokerProcess | None, *args: str, stdin: bytes = b"",
            timeout: float = 30) -> Run:
    env = dict(os.environ)
    env.pop("ODRADEK_BOOTSTRAP", None)
    if broker is not None:
        env["ODRADEK_BOOTSTRAP"] = broker.bootstrap
    done = subprocess.run([sys.executable, "-m", "odradek", *args], input=stdin,
                          capture_output=True, timeout=timeout, env=env)
    return Run(done)


def ok(run: Run) -> Run:
    assert run.code == 0, run
    assert "Traceback" not in run.err, run
    return run


def failed(run: Run, *needles: str) -> Run:
    """A non-zero exit with a short, clear message on stderr and no traceback."""
    assert run.code != 0, run
    assert "Traceback" not in run.err, run
    for needle in needles:
        assert needle in run.err, run
    return run


def create(broker: BrokerProcess, name: str, partitions: int = 1, *extra: str) -> None:
    ok(odradek(broker, "topics", "create", name, "--partitions", str(partitions),
               "--replication-factor", "1", *extra))


def skip_if_unsupported(run: Run, api: str) -> None:
    if run.code != 0 and UNSUPPORTED in run.err:
        pytest.skip(f"the broker does not support {api} yet: {run.err.strip()}")


def consume_all(broker: BrokerProcess, topic: str, *extra: str) -> list[dict[str, Any]]:
    """Every record from the start (or from what `extra` says) to the end, as JSON."""
    start = [] if any(a.startswith("--from") for a in extra) else ["--from-beginning"]
    return ok(odradek(broker, "consume", topic, *start, "--until-end", "--json",
                      "--timeout", "20s", *extra)).json_lines()


# ---- topics ------------------------------------------------------------------------------

def test_topics_create_list_describe_delete(cli_broker: BrokerProcess) -> None:
    created = ok(odradek(cli_broker, "topics", "create", "cli-round-trip", "--partitions", "3",
                         "--replication-factor", "1", "--config", "retention.ms=3600000",
                         "--json")).json()
    assert created == {"name": "cli-round-trip", "created": True, "existed": False,
                       "validate_only": False}
    failed(odradek(cli_broker, "topics", "create", "cli-round-trip"), "TOPIC_ALREADY_EXISTS")
    again = ok(odradek(cli_broker, "topics", "create", "cli-round-trip", "--if-not-exists",
                       "--json")).json()
    assert again["existed"] is True and again["created"] is False
    ok(odradek(cli_broker, "topics", "create", "cli-only-validated", "--partitions", "2",
               "--validate-only"))

    listed = {t["name"]: t for t in ok(odradek(cli_broker, "topics", "list", "--json")).json()}
    assert listed["cli-round-trip"] == {"name": "cli-round-trip", "partitions": 3,
                                        "replication_factor": 1, "internal": False,
                                        "error": None}
    assert "cli-only-validated" not in listed
    table = ok(odradek(cli_broker, "topics", "list")).out.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert ["cli-round-trip", "3", "1"] in [line.split() for line in table[1:]]

    described = odradek(cli_broker, "topics", "describe", "cli-round-trip", "--json")
    assert "Traceback" not in described.err, described
    [topic] = described.json()
    assert topic["name"] == "cli-round-trip" and topic["internal"] is False
    assert len(base64.urlsafe_b64decode(topic["topic_id"] + "==")) == 16
    assert "+" not in topic["topic_id"] and "/" not in topic["topic_id"]  # Kafka's spelling
    assert topic["partition_count"] == 3 and topic["replication_factor"] == 1
    assert topic["partitions"] == [{"partition": p, "leader": 1, "replicas": [1], "isr": [1]}
                                   for p in range(3)]
    if topic["configs"] is None:  # no DescribeConfigs yet: said so, and a failed exit
        assert topic["configs_error"]["code"] == UNSUPPORTED, described
        failed(described, "cannot describe its configs")
    else:
        ok(described)
        assert topic["configs"] == {"retention.ms": "3600000"}
    human = odradek(cli_broker, "topics", "describe", "cli-round-trip").out
    assert f"Topic: cli-round-trip  TopicId: {topic['topic_id']}  PartitionCount: 3" in human
    assert human.splitlines()[2].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR"]

    deleted = ok(odradek(cli_broker, "topics", "delete", "cli-round-trip", "--json")).json()
    assert deleted == [{"name": "cli-round-trip", "deleted": True}]
    assert "cli-round-trip" not in ok(odradek(cli_broker, "topics", "list")).out
    failed(odradek(cli_broker, "topics", "delete", "cli-round-trip"), "UNKNOWN_TOPIC_OR_PART")
    ok(odradek(cli_broker, "topics", "delete", "cli-round-trip", "--if-exists"))


def test_describe_unknown_topic_fails_but_describes_the_others(cli_broker: BrokerProcess
                                                               ) -> None:
    create(cli_broker, "cli-described", 2)
    run = failed(odradek(cli_broker, "topics", "describe", "cli-described", "cli-no-such",
                         "--json"), "cli-no-such", "UNKNOWN_TOPIC_OR_PART")
    known, unknown = run.json()
    assert known["name"] == "cli-described" and known["partition_count"] == 2
    assert unknown == {"name": "cli-no-such",
                       "error": {"code": "UNKNOWN_TOPIC_OR_PART",
                                 "message": "Broker: Unknown topic or partition"}}


def test_create_with_an_invalid_name_fails_clearly(cli_broker: BrokerProcess) -> None:
    run = failed(odradek(cli_broker, "topics", "create", "no spaces allowed"),
                 "cannot create topic no spaces allowed", "TOPIC_EXCEPTION", "illegal")
    assert len(run.err.strip().splitlines()) == 1, run
    assert "no spaces allowed" not in ok(odradek(cli_broker, "topics", "list")).out


def test_alter_partitions(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-grow", 2)
    grown = odradek(cli_broker, "topics", "alter", "cli-grow", "--partitions", "4")
    skip_if_unsupported(grown, "CreatePartitions")
    ok(grown)
    [topic] = odradek(cli_broker, "topics", "describe", "cli-grow", "--json").json()
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2, 3]
    failed(odradek(cli_broker, "topics", "alter", "cli-grow", "--partitions", "3"),
           "INVALID_PARTITIONS")


def test_alter_configs(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-configs", 1, "--config", "segment.bytes=1048576")
    altered = odradek(cli_broker, "topics", "alter", "cli-configs", "--config",
                      "retention.ms=60000", "--config", "cleanup.policy=compact",
                      "--delete-config", "segment.bytes")
    skip_if_unsupported(altered, "IncrementalAlterConfigs")
    ok(altered)
    described = odradek(cli_broker, "topics", "describe", "cli-configs", "--json")
    skip_if_unsupported(described, "DescribeConfigs")
    [topic] = ok(described).json()
    assert topic["configs"] == {"cleanup.policy": "compact", "retention.ms": "60000"}
    failed(odradek(cli_broker, "topics", "alter", "cli-configs", "--config",
                   "retention.ms=soon"), "cannot change the configs of topic cli-configs")


def test_alter_needs_a_change() -> None:
    failed(odradek(None, "topics", "alter", "whatever"), "nothing to change")


# ---- produce and consume -----------------------------------------------------------------

KEYED_LINES = [f"user-{i}\tevent {i} é\n" for i in range(40)]


def test_produce_and_consume_round_trip(cli_broker: BrokerProcess) -> None:
    topic, partitions = "cli-records", 4
    create(cli_broker, topic, partitions)
    summary = ok(odradek(cli_broker, "produce", topic, "--key-separator", "\\t",
                         "--header", "source=cli", "--header", "run=1", "--json",
                         stdin="".join(KEYED_LINES).encode())).json()
    payload = sum(len(line.rstrip("\n").replace("\t", "", 1).encode()) for line in KEYED_LINES)
    assert summary["records"] == len(KEYED_LINES) and summary["failed"] == 0
    assert summary["bytes"] == payload
    assert sum(summary["partitions"].values()) == len(KEYED_LINES)

    records = consume_all(cli_broker, topic)
    assert len(records) == len(KEYED_LINES)
    sent = {line.split("\t")[0]: line.rstrip("\n").split("\t")[1] for line in KEYED_LINES}
    for r in records:
        assert r["topic"] == topic
        assert r["value"] == sent[r["key"]]
        assert r["headers"] == [{"key": "source", "value": "cli"}, {"key": "run", "value": "1"}]
        # librdkafka's murmur2_random puts a key where Kafka's Java client would.
        assert r["partition"] == partition_for_key(r["key"].encode(), partitions), r
        assert r["timestamp_type"] == "CreateTime" and r["timestamp"] > 0
    for p in range(partitions):
        offsets = [r["offset"] for r in records if r["partition"] == p]
        assert offsets == list(range(len(offsets)))  # in order, from 0, no gaps

    template = "{partition}|{offset}|{key}|{value}|{headers}|{topic}"
    lines = ok(odradek(cli_broker, "consume", topic, "--from-beginning", "--until-end",
                       "--format", template)).out.splitlines()
    assert sorted(lines) == sorted(
        f"{r['partition']}|{r['offset']}|{r['key']}|{r['value']}|source:cli,run:1|{topic}"
        for r in records)


def test_default_format_gives_back_the_lines_exactly(cli_broker: BrokerProcess,
                                                     tmp_path: Path) -> None:
    create(cli_broker, "cli-lines", 1)
    data = b"plain\n  spaced  \n\nwindows\r\nbytes \xff\xfe\nunicode \xe2\x9c\x93\nlast"
    source = tmp_path / "lines.txt"
    source.write_bytes(data)
    ok(odradek(cli_broker, "produce", "cli-lines", "--file", str(source), "--acks", "1",
               "--compression", "zstd"))
    out = ok(odradek(cli_broker, "consume", "cli-lines", "--from-beginning",
                     "--until-end")).stdout
    # Each line is one record; \r\n endings are line endings, and every record ends in \n.
    assert out == data.replace(b"\r\n", b"\n") + b"\n"

    records = consume_all(cli_broker, "cli-lines")
    binary = records[4]
    assert binary["value_encoding"] == "base64"
    assert base64.b64decode(binary["value"]) == b"bytes \xff\xfe"
    assert records[5]["value"] == "unicode \u2713" and "value_encoding" not in records[5]
    assert records[2]["value"] == "" and records[0]["key"] is None


def test_headers_per_line(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-line-headers", 1)
    lines = b"trace:abc,flag\tk1=v1\n\tk2=v2\n"
    ok(odradek(cli_broker, "produce", "cli-line-headers", "--parse-headers",
               "--key-separator", "=", "--header", "all=yes", stdin=lines))
    first, second = consume_all(cli_broker, "cli-line-headers")
    assert (first["key"], first["value"]) == ("k1", "v1")
    assert first["headers"] == [{"key": "all", "value": "yes"},
                                {"key": "trace", "value": "abc"},
                                {"key": "flag", "value": None}]
    assert (second["key"], second["value"]) == ("k2", "v2")
    assert second["headers"] == [{"key": "all", "value": "yes"}]


def test_produce_to_one_partition_with_each_acks(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-pinned", 3)
    # acks=0 last: nothing tells when its records are appended, so the consumer waits for
    # six records rather than stopping at the end it sees when it starts.
    for acks, codec in (("1", "gzip"), ("all", "lz4"), ("0", "none")):
        ok(odradek(cli_broker, "produce", "cli-pinned", "--partition", "2", "--acks", acks,
                   "--compression", codec, "--key-separator", ":",
                   stdin=f"k:{acks}-a\nk:{acks}-b\n".encode()))
    records = ok(odradek(cli_broker, "consume", "cli-pinned", "--from-beginning", "--json",
                         "--max-messages", "6", "--timeout", "20s")).json_lines()
    assert {r["partition"] for r in records} == {2}
    assert [r["value"] for r in records] == ["1-a", "1-b", "all-a", "all-b", "0-a", "0-b"]


def test_malformed_line_stops_the_input(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-malformed", 1)
    run = failed(odradek(cli_broker, "produce", "cli-malformed", "--key-separator", ",",
                         stdin=b"a,1\nno separator\nb,2\n"), "line 2: no key separator ','")
    assert "produced 1 record" in run.err
    assert [r["value"] for r in consume_all(cli_broker, "cli-malformed")] == ["1"]


def test_consume_from_an_offset_and_max_messages(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-offsets", 2)
    lines = "".join(f"v{i}\n" for i in range(10)).encode()
    ok(odradek(cli_broker, "produce", "cli-offsets", "--partition", "1", stdin=lines))

    def values(*args: str) -> list[str]:
        return ok(odradek(cli_broker, "consume", "cli-offsets", *args)).out.splitlines()

    assert values("--partition", "1", "--offset", "7", "--until-end") == ["v7", "v8", "v9"]
    assert values("--partition", "1", "--offset", "-2", "--until-end") == ["v8", "v9"]
    assert values("--from-beginning", "--max-messages", "3") == ["v0", "v1", "v2"]
    assert values("--partition", "0", "--from-beginning", "--until-end") == []
    failed(odradek(cli_broker, "consume", "cli-offsets", "--partition", "1", "--offset", "11"),
           "offset 11 is out of range in partition 1")
    failed(odradek(cli_broker, "consume", "cli-offsets", "--offset", "3"), "needs --partition")
    failed(odradek(cli_broker, "consume", "cli-offsets", "--partition", "5", "--until-end"),
           "has no partition 5")


def test_consume_from_timestamp(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-times", 2)
    ok(odradek(cli_broker, "produce", "cli-times", "-K", ":",
               stdin=b"a:early-1\nb:early-2\nc:early-3\n"))
    early = consume_all(cli_broker, "cli-times")
    latest_early = max(r["timestamp"] for r in early)
    while time.time() * 1000 <= latest_early + 1:  # the next records get a later stamp
        time.sleep(0.001)
    ok(odradek(cli_broker, "produce", "cli-times", "-K", ":",
               stdin=b"a:late-1\nb:late-2\nc:late-3\n"))
    late = [r for r in consume_all(cli_broker, "cli-times") if r["value"].startswith("late")]
    boundary = min(r["timestamp"] for r in late)
    assert boundary > latest_early

    by_ms = consume_all(cli_broker, "cli-times", "--from-timestamp", str(boundary))
    assert sorted(r["value"] for r in by_ms) == ["late-1", "late-2", "late-3"]
    iso = datetime.fromtimestamp(boundary / 1000, UTC).isoformat(timespec="milliseconds")
    by_iso = consume_all(cli_broker, "cli-times", "--from-timestamp", iso)
    assert by_iso == by_ms
    assert consume_all(cli_broker, "cli-times", "--from-timestamp", "2999-01-01T00:00:00Z") == []


def test_until_end_exits_at_once_on_an_empty_topic(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-empty", 3)
    started = time.monotonic()
    run = ok(odradek(cli_broker, "consume", "cli-empty", "--from-beginning", "--until-end"))
    assert run.out == "" and "consumed 0 records" in run.err
    assert time.monotonic() - started < 10


def test_consume_idle_timeout_ends_the_wait(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-idle", 1)
    run = ok(odradek(cli_broker, "consume", "cli-idle", "--timeout", "500ms"))
    assert "no records for 0.5s" in run.err


# ---- errors ------------------------------------------------------------------------------

def test_consume_unknown_topic(cli_broker: BrokerProcess) -> None:
    run = failed(odradek(cli_broker, "consume", "cli-no-such-topic", "--timeout", "10s"),
                 "cannot consume from topic cli-no-such-topic", "UNKNOWN_TOPIC_OR_PART")
    assert len(run.err.strip().splitlines()) == 1, run


def test_produce_unknown_topic(cli_broker: BrokerProcess) -> None:
    failed(odradek(cli_broker, "produce", "cli-never-created", "--timeout", "500ms",
                   "--acks", "1", stdin=b"x\n"), "1 record failed", "line 1:")


def test_bad_format_field() -> None:
    failed(odradek(None, "consume", "t", "--format", "{value} {nope}"),
           "--format has no field {nope}")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_broker_down_is_a_clear_error() -> None:
    down = f"127.0.0.1:{closed_port()}"
    for args in (["topics", "list"], ["topics", "create", "t"], ["consume", "t"]):
        run = failed(odradek(None, *args, "--bootstrap-server", down, "--timeout", "500ms"))
        assert any(name in run.err for name in ("_TRANSPORT", "_TIMED_OUT")), run
        assert len(run.err.strip().splitlines()) == 1, run
    failed(odradek(None, "produce", "t", "--bootstrap-server", down, "--timeout", "500ms",
                   stdin=b"x\n"), "1 record failed", "_MSG_TIMED_OUT")


def test_an_unreachable_cluster_is_reported_within_seconds() -> None:
    """With the default 30 s timeout, a command that reaches no broker at all gives up
    after a few seconds and says which address it tried and why."""
    down = f"127.0.0.1:{closed_port()}"
    for args in (["topics", "list"], ["topics", "create", "t"], ["partitions", "reassignments"]):
        began = time.monotonic()
        run = failed(odradek(None, *args, "--bootstrap-server", down, timeout=20),
                     "cannot reach the cluster", down, "Connection refused")
        assert time.monotonic() - began < 15, run


def test_settings_from_a_command_config_file(cli_broker: BrokerProcess, tmp_path: Path
                                             ) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"# where the cluster is\nbootstrap.servers={cli_broker.bootstrap}\n"
                      "client.id = from-file\n")
    create(cli_broker, "cli-config-file", 1)
    # The file's bootstrap.servers beats the default; no ODRADEK_BOOTSTRAP here.
    assert "cli-config-file" in ok(odradek(None, "topics", "list", "--command-config",
                                           str(config))).out
    assert "cli-config-file" in ok(odradek(None, "topics", "list", "-X",
                                           f"bootstrap.servers={cli_broker.bootstrap}")).out
    failed(odradek(None, "topics", "list", "-X", "no.such.setting=1"),
           "invalid client configuration")


def test_ctrl_c_ends_consume_with_its_summary(cli_broker: BrokerProcess) -> None:
    create(cli_broker, "cli-interrupted", 1)
    ok(odradek(cli_broker, "produce", "cli-interrupted", stdin=b"a\nb\nc\n"))
    env = dict(os.environ, ODRADEK_BOOTSTRAP=cli_broker.bootstrap)
    consume = subprocess.Popen(
        [sys.executable, "-m", "odradek", "consume", "cli-interrupted", "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert consume.stdout is not None
        assert [consume.stdout.readline() for _ in range(3)] == [b"a\n", b"b\n", b"c\n"]
        consume.send_signal(signal.SIGINT)  # waiting for more, as it does without --timeout
        _, err = consume.communicate(timeout=30)
    finally:
        consume.kill()
    assert consume.returncode == 130, err
    assert b"consumed 3 records" in err and b"Traceback" not in err, err
