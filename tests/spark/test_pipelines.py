"""The classic pipelines (odradek/pipelines) end to end: seeded generated input on a real
broker, the pipeline on the shared Spark session (local[2]) with availableNow triggers, and
its output checked against the same computation in plain Python."""

from __future__ import annotations

import json
import operator
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Hashable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support.broker import BrokerProcess
from support.registry import RegistryProcess
from support.spark import await_query, consume_all, create_topic

from odradek.cli.main import main
from odradek.pipelines import activity, logs, mirror, reprocess, route
from odradek.pipelines.common import Record, ensure_topics, iso

# Event times start a whole minute ago, 20 minutes back: recent enough that retention
# (7 days) keeps the records, aligned so windows are easy to read when a test fails.
START = (int(time.time()) // 60 - 20) * 60 * 1000


def run_all(queries: list[Any]) -> None:
    for query in queries:
        assert await_query(query) is None


def windows(batches: Iterable[list[tuple[int, Hashable]]], window_ms: int,
            delay_ms: int) -> tuple[dict[tuple[Hashable, int], int], int]:
    """Spark's windowed count in append mode with a watermark, micro-batch by micro-batch:
    ({(group, window start): count} of the windows written, number of late events dropped).
    The watermark after a batch is the latest event time seen minus the delay; a window is
    written when the watermark reaches its end, and an event is dropped when its window has
    reached the watermark already (however late the event itself is)."""
    watermark, dropped = 0, 0
    open_windows: dict[tuple[Hashable, int], int] = defaultdict(int)
    written: dict[tuple[Hashable, int], int] = {}
    for batch in batches:
        for t, group in batch:
            start = t - t % window_ms
            if start + window_ms <= watermark:
                dropped += 1
                continue
            open_windows[(group, start)] += 1
        if batch:
            watermark = max(watermark, max(t for t, _ in batch) - delay_ms)
        for key in [k for k in open_windows if k[1] + window_ms <= watermark]:
            written[key] = open_windows.pop(key)
    return written, dropped


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def values(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [json.loads(r[4]) for r in consume_all(bootstrap, topic)]


def test_activity_counts_views_per_page_per_minute(spark: Any, broker: BrokerProcess,
                                                   registry: RegistryProcess,
                                                   tmp_path: Path) -> None:
    source, sink = create_topic(broker, 2), create_topic(broker, 1)
    config = activity.ActivityConfig(
        bootstrap=broker.bootstrap, checkpoint=str(tmp_path / "checkpoint"), input=source,
        output=sink, table=str(tmp_path / "table"), available_now=True,
        schema_registry=registry.url)
    client = SchemaRegistryClient({"url": registry.url})
    deserialize = AvroDeserializer(client)
    batches = []
    for i in range(2):   # the second run continues from the checkpoints, with late events
        sent = activity.generate(broker.bootstrap, source, count=240, rate=2.0, seed=i,
                                 start=START + i * 120_000, schema_registry=registry.url)
        run_all(activity.run(spark, config))
        events = [deserialize(r.value, SerializationContext(source, MessageField.VALUE))
                  for r in sent]
        batches.append([(int(e["event_time"].timestamp() * 1000), e["page"]) for e in events])
    want, dropped = windows(batches, 60_000, 30_000)
    assert dropped > 0 and len(want) > 30
    table = spark.read.parquet(config.table).collect()
    assert sorted((r.page, int(r.window_start.timestamp() * 1000),
                   r.views) for r in table) == sorted((p, w, n) for (p, w), n in want.items())
    # The counts are Avro records, of a schema the sink made and registered for the topic.
    written = json.loads(client.get_latest_version(f"{sink}-value").schema.schema_str)
    assert [f["name"] for f in written["fields"]] == [
        "page", "window_start", "window_end", "views"]
    records = []
    for r in consume_all(broker.bootstrap, sink):
        count = deserialize(r[4], SerializationContext(sink, MessageField.VALUE))
        records.append((r[3], count["page"], int(count["window_start"].timestamp() * 1000),
                        int(count["window_end"].timestamp() * 1000), count["views"]))
    assert sorted(records) == sorted((p.encode(), p, w, w + 60_000, n)
                                     for (p, w), n in want.items())


def test_logs_error_rates_and_alerts(spark: Any, broker: BrokerProcess,
                                     tmp_path: Path) -> None:
    source = create_topic(broker, 2)
    config = logs.LogsConfig(
        bootstrap=broker.bootstrap, checkpoint=str(tmp_path / "checkpoint"), input=source,
        output=f"{source}-rates", alerts=f"{source}-alerts", window="10 seconds",
        watermark="5 seconds", max_errors=8, max_error_rate=0.5, min_lines=10,
        available_now=True)
    sent = logs.generate(broker.bootstrap, source, count=800, rate=10.0, seed=3, start=START)
    run_all(logs.run(spark, config))
    parsed = [re.match(logs.LINE, (r.value or b"").decode()) for r in sent]
    lines = [(ms(m[1]), (m[3], m[2] in logs.ERROR_LEVELS)) for m in parsed if m]
    assert len(lines) < len(sent)   # stack trace lines are dropped
    counted, _ = windows([lines], 10_000, 5_000)
    stats: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])   # lines, errors
    for ((service, error), w), n in counted.items():
        stats[(service, w)][0] += n
        stats[(service, w)][1] += n if error else 0
    rates, alerts = [], []
    for (service, w), (total, errors) in sorted(stats.items()):
        row = {"service": service, "window_start": iso(w), "window_end": iso(w + 10_000),
               "lines": total, "errors": errors, "error_rate": errors / total}
        rates.append(row)
        crossed = ([] if errors < 8 else ["errors"]) + (
            ["error_rate"] if total >= 10 and errors / total >= 0.5 else [])
        if crossed:
            alerts.append({**row, "crossed": crossed, "max_errors": 8, "max_error_rate": 0.5})
    assert len(rates) > 20 and {a["service"] for a in alerts} == {"payments"}
    key = operator.itemgetter("service", "window_start")
    assert sorted(values(broker.bootstrap, config.output), key=key) == rates
    assert sorted(values(broker.bootstrap, config.alerts), key=key) == alerts


def test_reprocess_rebuilds_the_latest_state_per_key(spark: Any, broker: BrokerProcess,
                                                     tmp_path: Path) -> None:
    source = create_topic(broker, 3)
    config = reprocess.ReprocessConfig(bootstrap=broker.bootstrap, input=source,
                                       table=str(tmp_path / "snapshot"))
    sent: list[Record] = []
    for i in range(2):   # the second snapshot replaces the first
        sent += reprocess.generate(broker.bootstrap, source, count=300, seed=i, customers=40,
                                   start=START + i * 60_000)
        latest = {r.key: r for r in sent}   # sent in order; a key lives in one partition
        want = sorted((r.key.decode(), r.value.decode(), r.partition, r.offset, r.timestamp)
                      for r in latest.values() if r.key and r.value is not None)
        rows = reprocess.run(spark, config).collect()
        assert sorted((r.key, r.value, r.partition, r.offset,
                       int(r.timestamp.timestamp() * 1000))
                      for r in rows) == want
    assert 0 < len(want) < len({r.key for r in sent})   # some customers were deleted


def parse(value: bytes | None) -> Any:
    try:
        return json.loads(value or b"")
    except ValueError:
        return None


def route_error(event: Any) -> str | None:
    """route's checks in plain Python."""
    if not isinstance(event, dict):
        return "not JSON"
    kind = event.get("type")
    if kind is None:
        return "no type"
    if kind not in route.REQUIRED:
        return f"unknown type {kind}"
    missing = [n for n in route.REQUIRED[kind] if event.get(n) is None]
    if missing:
        return "missing or malformed: " + ", ".join(missing)
    if kind == "order" and event["currency"] not in route.RATES_TO_EUR:
        return f"unknown currency {event['currency']}"
    if kind == "order" and event["amount"] <= 0:
        return "amount not positive"
    return None


def test_route_parses_checks_enriches_and_routes(spark: Any, broker: BrokerProcess,
                                                 tmp_path: Path) -> None:
    source = create_topic(broker, 2)
    config = route.RouteConfig(bootstrap=broker.bootstrap, checkpoint=str(tmp_path / "c"),
                               input=source, output=f"{source}-out",
                               dead_letter=f"{source}-invalid", available_now=True)
    sent = route.generate(broker.bootstrap, source, count=400, seed=5, start=START)
    run_all(route.run(spark, config))
    want: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for r in sent:
        event = parse(r.value)
        where = f"{r.topic}/{r.partition}/{r.offset}"
        error = route_error(event)
        if error is None:
            out = {**event, "event_date": event["ts"][:10]}
            want[f"{config.output}.{event['type']}"].append(
                (where, event["user"].encode(), out, []))
        else:
            want[config.dead_letter].append((where, r.key, r.value, [("error", error)]))
    assert len(want[config.dead_letter]) > 10 and len(want) == 4
    for topic in route.output_topics(config):
        got = []
        for record in consume_all(broker.bootstrap, topic):
            headers = dict(record[5])
            assert headers["source-app"] in route.APPS and headers["pipeline"] == b"route"
            assert abs(ms((headers["processed-at"] or b"").decode()) - time.time() * 1000) < 6e5
            value: Any = record[4]
            if topic != config.dead_letter:
                value = json.loads(value)
                if value["type"] == "order":   # Spark rounds half up, Python half to even
                    assert value.pop("amount_eur") == pytest.approx(
                        value["amount"] * route.RATES_TO_EUR[value["currency"]], abs=0.006)
            extra = [(k, v.decode()) for k, v in record[5][4:] if v is not None]
            got.append(((headers["source"] or b"").decode(), record[3], value, extra))
        assert sorted(got, key=str) == sorted(want[topic], key=str), topic


def without_offset(record: tuple[Any, ...]) -> tuple[Any, ...]:
    return record[:2] + record[3:]


def test_mirror_copies_topics_to_another_cluster(spark: Any, broker: BrokerProcess,
                                                 tmp_path: Path) -> None:
    target = BrokerProcess(tmp_path / "b", {"auto.create.topics.enable": "false"}).start()
    try:
        name = f"mirror-{uuid.uuid4().hex[:8]}"
        for topic, partitions, count in ((f"{name}-a", 3, 150), (f"{name}-b", 2, 90)):
            mirror.generate(broker.bootstrap, topic, count=count, seed=partitions,
                            start=START, partitions=partitions)
        config = mirror.MirrorConfig(
            bootstrap=broker.bootstrap, target=target.bootstrap, pattern=f"{name}-.*",
            checkpoint=str(tmp_path / "checkpoint"), available_now=True)
        run_all(mirror.run(spark, config))
        for topic in (f"{name}-a", f"{name}-b"):
            copied = consume_all(target.bootstrap, topic)
            # Same partitions, keys, values, headers, CreateTimes, in the same order; offsets
            # differ by the markers of the mirror's transactions.
            assert [without_offset(r) for r in copied] == [
                without_offset(r) for r in consume_all(broker.bootstrap, topic)] and copied
            assert {r[7] for r in copied} == {1}
            assert any(r[3] is None for r in copied) and any(r[4] is None for r in copied)
        # A target with fewer partitions than its source stops the mirror before it starts.
        mirror.generate(broker.bootstrap, f"{name}-c", count=5, start=START, partitions=2)
        ensure_topics(target.bootstrap, {f"{name}-c": 1})
        with pytest.raises(ValueError, match="fewer than the 2"):
            mirror.run(spark, mirror.MirrorConfig(bootstrap=broker.bootstrap,
                                                  target=target.bootstrap,
                                                  topics=f"{name}-c"))
    finally:
        target.stop()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:   # argparse's usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_lists_and_checks_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "pipeline", "list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == [
        "activity", "logs", "reprocess", "route", "mirror"]
    code, out, _ = run_cli(capsys, "pipeline", "list", "--json")
    assert {p["name"]: p["kind"] for p in json.loads(out)}["reprocess"] == "batch"
    for argv, message in [
        (["run", "nosuch"], "invalid choice: 'nosuch'"),
        (["run", "logs", "--max-errors", "many"], "invalid int value: 'many'"),
        (["generate", "activity", "--rate", "0"], "must be positive"),
        (["generate", "route", "--start", "yesterday"], "not an ISO 8601 time"),
        (["run", "mirror"], "give either topics or a pattern"),   # checked before Spark
    ]:
        code, _, err = run_cli(capsys, "pipeline", *argv)
        assert code == 2 and message in err, (argv, err)


def test_cli_generate_is_seedable(broker: BrokerProcess,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    topic = create_topic(broker, 2)
    argv = ["pipeline", "generate", "route", "--bootstrap-server", broker.bootstrap,
            "--topic", topic, "--count", "30", "--seed", "9", "--start", iso(START)]
    assert run_cli(capsys, *argv)[:2] == (0, f"sent 30 records to {topic}\n")
    # The same seed sends the same records: the topic holds each one twice.
    again = route.generate(broker.bootstrap, topic, count=30, seed=9, start=START)
    records = consume_all(broker.bootstrap, topic)
    sent = sorted((s.partition, s.key, s.value, s.timestamp) for s in again)
    written = sorted((r[1], r[3], r[4], r[6]) for r in records)
    assert written == sorted(sent + sent)


def test_cli_runs_pipelines(spark: Any, broker: BrokerProcess, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    # In-process, `pipeline run` uses the running (shared) session and leaves it running.
    common = ["--bootstrap-server", broker.bootstrap, "--conf", "spark.sql.shuffle.partitions=2"]
    source = create_topic(broker, 2)
    sent = reprocess.generate(broker.bootstrap, source, count=60, seed=1, start=START)
    keys = {r.key: r.value for r in sent}
    table = str(tmp_path / "snapshot")
    code, out, err = run_cli(capsys, "pipeline", "run", "reprocess", "--input", source,
                             "--table", table, *common)
    alive = sum(1 for v in keys.values() if v is not None)
    assert (code, out) == (0, f"reprocess: wrote {alive} rows to {table}\n"), err
    events = create_topic(broker, 2)
    sent = route.generate(broker.bootstrap, events, count=50, seed=2, start=START)
    code, out, err = run_cli(capsys, "pipeline", "run", "route", "--input", events,
                             "--output", events, "--dead-letter", "", "--available-now",
                             "--checkpoint", str(tmp_path / "c"), *common)
    assert code == 0, err
    assert out.splitlines() == [f"route: 1 query running, checkpoints in {tmp_path / 'c'}",
                                "route: batch 0, 50 records in"]
    # With --dead-letter '' the invalid records are dropped.
    routed = sum(len(consume_all(broker.bootstrap, f"{events}.{kind}")) for kind in route.REQUIRED)
    assert routed == sum(1 for r in sent if route_error(parse(r.value)) is None) < len(sent)
    assert not spark.streams.active and spark.range(1).count() == 1
