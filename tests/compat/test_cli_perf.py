"""`odradek perf produce|consume` as real processes against one real broker process: the
records counted are the records sent and read, the summaries parse in Kafka's formats, the
throughput limit holds, and Ctrl-C ends a run with the summary so far."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.broker import BrokerProcess
from test_cli import consume_all, create, failed, odradek, ok

# kafka-producer-perf-test.sh's closing line.
PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.")
PRODUCER_WINDOW = re.compile(r"\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), "
                             r"[\d.]+ ms avg latency, [\d.]+ ms max latency\.")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER_LINE = re.compile(
    rf"({DATE}), ({DATE}), ([\d.]+), ([\d.]+), (\d+), ([\d.]+), (\d+), (\d+), ([\d.]+), "
    r"([\d.]+)")


@pytest.fixture(scope="module")
def perf_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("perf-cli"),
                            {"auto.create.topics.enable": "false",
                             "group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def producer_summary(text: str) -> dict[str, float]:
    m = PRODUCER_SUMMARY.search(text)
    assert m is not None, text
    names = ["records", "records_per_sec", "mb_per_sec", "avg", "max", "p50", "p95", "p99",
             "p999"]
    return {name: float(value) for name, value in zip(names, m.groups(), strict=True)}


def start(broker: BrokerProcess, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, ODRADEK_BOOTSTRAP=broker.bootstrap)
    return subprocess.Popen([sys.executable, "-m", "odradek", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def interrupt_after_progress(process: subprocess.Popen[bytes], until: str = ""
                             ) -> tuple[str, str]:
    """Waits for a progress line on stderr (one that contains `until`), sends SIGINT, and
    returns (stdout, stderr)."""
    seen = []
    try:
        assert process.stderr is not None
        while True:
            line = process.stderr.readline().decode()
            assert line, f"the process ended before the progress line: {seen}"
            seen.append(line)
            if until in line:
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return out.decode(), "".join(seen) + err.decode()


def test_produce_holds_the_throughput_limit_and_reports_like_kafka(
        perf_broker: BrokerProcess) -> None:
    create(perf_broker, "perf-limited", 2)
    began = time.monotonic()
    run = ok(odradek(perf_broker, "perf", "produce", "--topic", "perf-limited",
                     "--num-records", "120", "--record-size", "64", "--throughput", "80",
                     "--reporting-interval", "400ms"))
    took = time.monotonic() - began
    s = producer_summary(run.out)
    assert s["records"] == 120
    # 120 records at 80/s take 1.5 s at least; loosely, so that a slow machine passes.
    assert took >= 1.3, run
    assert s["records_per_sec"] <= 80 * 1.25, run
    assert s["avg"] <= s["max"] and s["p50"] <= s["p95"] <= s["p99"] <= s["p999"] <= s["max"]
    assert PRODUCER_WINDOW.search(run.err), run  # progress lines while it ran (not a tty)
    assert len(consume_all(perf_broker, "perf-limited")) == 120


def test_produce_json_with_client_settings(perf_broker: BrokerProcess, tmp_path: Path) -> None:
    create(perf_broker, "perf-json", 3)
    config = tmp_path / "producer.properties"
    config.write_text("client.id=perf-from-file\nlinger.ms=20\n")
    summary = ok(odradek(perf_broker, "perf", "produce", "--topic", "perf-json",
                         "--num-records", "2000", "--record-size", "100", "--throughput",
                         "-1", "--acks", "1", "--compression", "gzip", "--command-config",
                         str(config), "--producer-props", "linger.ms=5", "batch.size=16384",
                         "--json")).json()
    assert summary["topic"] == "perf-json" and summary["records"] == 2000
    assert summary["bytes"] == 200_000 and summary["failed"] == 0
    assert summary["interrupted"] is False
    assert 0 <= summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"] <= \
        summary["p999_ms"] <= summary["max_latency_ms"]
    assert summary["records_per_sec"] > 0 and summary["mb_per_sec"] > 0
    # And read back with perf consume, in Kafka's format then as JSON.
    run = ok(odradek(perf_broker, "perf", "consume", "--topic", "perf-json", "--messages",
                     "2000", "--timeout", "20s"))
    header, line = run.out.strip().splitlines()
    assert header == CONSUMER_HEADER
    m = CONSUMER_LINE.fullmatch(line)
    assert m is not None, run
    assert int(m.group(5)) == 2000 and abs(float(m.group(3)) - 200_000 / 2**20) < 0.001
    doc = ok(odradek(perf_broker, "perf", "consume", "--topic", "perf-json", "--messages",
                     "2000", "--group", "perf-readers", "--from-beginning", "--json",
                     "--timeout", "20s")).json()
    assert doc["records"] == 2000 and doc["bytes"] == 200_000 and doc["group"] == "perf-readers"
    assert doc["timed_out"] is False and doc["interrupted"] is False
    assert doc["rebalance_time_ms"] + doc["fetch_time_ms"] <= doc["elapsed_s"] * 1000 + 1
    # The group committed what it read, as Kafka's consumer perf test does.
    described = ok(odradek(perf_broker, "groups", "describe", "perf-readers", "--json")).json()
    assert described["total_lag"] == 0
    assert sum(r["committed_offset"] for r in described["partitions"]) == 2000


def test_payload_file(perf_broker: BrokerProcess, tmp_path: Path) -> None:
    create(perf_broker, "perf-payloads", 1)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha|beta|gamma")
    ok(odradek(perf_broker, "perf", "produce", "--topic", "perf-payloads", "--num-records",
               "30", "--payload-file", str(payloads), "--payload-delimiter", "|"))
    values = {r["value"] for r in consume_all(perf_broker, "perf-payloads")}
    assert values <= {"alpha", "beta", "gamma"} and len(values) >= 2


def test_consume_gives_up_after_its_timeout(perf_broker: BrokerProcess) -> None:
    create(perf_broker, "perf-short", 1)
    ok(odradek(perf_broker, "perf", "produce", "--topic", "perf-short", "--num-records", "5",
               "--record-size", "10"))
    run = failed(odradek(perf_broker, "perf", "consume", "--topic", "perf-short",
                         "--messages", "10", "--timeout", "1s", "--json"),
                 "exiting before consuming the expected number of records (5 of 10)")
    assert run.code == 1 and run.json()["records"] == 5 and run.json()["timed_out"] is True


def test_usage_and_cluster_errors(perf_broker: BrokerProcess) -> None:
    run = odradek(perf_broker, "perf", "produce", "--topic", "x", "--num-records", "5")
    assert run.code == 2 and "--record-size" in run.err, run
    assert odradek(perf_broker, "perf", "produce", "--topic", "x", "--num-records", "5",
                   "--record-size", "1", "--throughput", "0").code == 2
    failed(odradek(perf_broker, "perf", "produce", "--topic", "perf-nosuch", "--num-records",
                   "5", "--record-size", "10"), "perf-nosuch", "UNKNOWN_TOPIC")
    failed(odradek(perf_broker, "perf", "consume", "--topic", "perf-nosuch", "--messages",
                   "5"), "perf-nosuch", "UNKNOWN_TOPIC")
    bad = failed(odradek(perf_broker, "perf", "produce", "--topic", "x", "--num-records", "5",
                         "--record-size", "1", "--producer-props", "no.such.setting=1"),
                 "invalid client configuration")
    assert bad.code == 2


def test_ctrl_c_ends_produce_with_the_summary_so_far(perf_broker: BrokerProcess) -> None:
    create(perf_broker, "perf-interrupted", 1)
    process = start(perf_broker, "perf", "produce", "--topic", "perf-interrupted",
                    "--num-records", "100000", "--record-size", "20", "--throughput", "100",
                    "--reporting-interval", "200ms")
    out, err = interrupt_after_progress(process)
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    s = producer_summary(out)
    assert 0 < s["records"] < 100_000
    # Every record it counted was acknowledged, so it is in the log.
    assert len(consume_all(perf_broker, "perf-interrupted")) == s["records"]


def test_ctrl_c_ends_consume_with_the_summary_so_far(perf_broker: BrokerProcess) -> None:
    create(perf_broker, "perf-waiting", 1)
    ok(odradek(perf_broker, "perf", "produce", "--topic", "perf-waiting", "--num-records",
               "50", "--record-size", "10"))
    process = start(perf_broker, "perf", "consume", "--topic", "perf-waiting", "--messages",
                    "1000", "--timeout", "60s", "--reporting-interval", "200ms", "--json")
    out, err = interrupt_after_progress(process, until="50 of 1000 in all")
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    doc = json.loads(out)
    assert doc["records"] == 50 and doc["interrupted"] is True and doc["timed_out"] is False
