"""`odradek produce --transactional-id`: every record of a run in one transaction, committed
at the end, aborted when a line is malformed or on Ctrl-C, against a real broker process.
What read_committed readers see is read back with `odradek consume` (librdkafka's
isolation.level, which it defaults to read_committed, set explicitly with -X) and with
confluent-kafka consumers of either isolation level."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from support.broker import BrokerProcess
from test_cli import consume_all, create, failed, odradek, ok
from test_transactions import read, unique, values

COMMITTED = ("-X", "isolation.level=read_committed")


@pytest.fixture(scope="module")
def txn_cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn-cli-broker"),
                            {"auto.create.topics.enable": "false"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def test_produce_in_one_committed_transaction(txn_cli_broker: BrokerProcess) -> None:
    topic = unique("cli-txn")
    create(txn_cli_broker, topic, 2)
    lines = [b"k%d\tv%d" % (i, i) for i in range(20)]
    run = ok(odradek(txn_cli_broker, "produce", topic, "-K", "\\t", "--transactional-id",
                     unique("cli-tid"), stdin=b"\n".join(lines) + b"\n"))
    assert "produced 20 records" in run.err and "committed transaction" in run.err, run
    got = consume_all(txn_cli_broker, topic, *COMMITTED)
    assert sorted((r["key"], r["value"]) for r in got) == sorted(
        (f"k{i}", f"v{i}") for i in range(20))
    assert values(read(txn_cli_broker, topic, "read_committed", expect=20)) == sorted(
        b"v%d" % i for i in range(20))
    # A second run with the same id: a new transaction of the same producer, and --json.
    again = ok(odradek(txn_cli_broker, "produce", topic, "--json", "--transactional-id",
                       "cli-fixed-id", stdin=b"x\ny\n"))
    assert again.json()["transaction"] == "committed" and again.json()["records"] == 2
    again = ok(odradek(txn_cli_broker, "produce", topic, "--json", "--transactional-id",
                       "cli-fixed-id", stdin=b"z\n"))
    assert again.json()["transaction"] == "committed"
    assert len(read(txn_cli_broker, topic, "read_committed", expect=23)) == 23


def test_a_malformed_line_aborts_the_whole_run(txn_cli_broker: BrokerProcess) -> None:
    topic = unique("cli-txn-bad")
    create(txn_cli_broker, topic, 1)
    stdin = b"a\tgood\nb\tgood too\nno separator here\nc\tnever sent\n"
    run = failed(odradek(txn_cli_broker, "produce", topic, "-K", "\\t", "--json",
                         "--transactional-id", unique("cli-tid"), stdin=stdin),
                 "line 3", "no key separator")
    assert run.code == 1
    assert run.json()["transaction"] == "aborted" and run.json()["records"] == 2
    # The two records were written, then aborted: read_uncommitted sees them, and the
    # ABORT marker after them; read_committed nothing.
    assert values(read(txn_cli_broker, topic, "read_uncommitted", 1, expect=2)) == [
        b"good", b"good too"]
    assert consume_all(txn_cli_broker, topic, *COMMITTED) == []
    assert consume_all(txn_cli_broker, topic) == []  # read_committed is the default
    assert read(txn_cli_broker, topic, "read_committed", 1, idle_polls=4) == []


def test_ctrl_c_aborts_the_transaction(txn_cli_broker: BrokerProcess) -> None:
    topic = unique("cli-txn-int")
    create(txn_cli_broker, topic, 1)
    env = dict(os.environ, ODRADEK_BOOTSTRAP=txn_cli_broker.bootstrap)
    process = subprocess.Popen(
        [sys.executable, "-m", "odradek", "produce", topic, "--transactional-id",
         unique("cli-tid")], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert process.stdin is not None
        process.stdin.write(b"one\ntwo\nthree\n")
        process.stdin.flush()
        # Wait until the records are in the log (uncommitted), then interrupt.
        deadline = time.monotonic() + 20
        while len(read(txn_cli_broker, topic, "read_uncommitted", 1, expect=3,
                       idle_polls=2)) < 3:
            assert time.monotonic() < deadline, "the records never reached the broker"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = err.decode()
    assert process.returncode == 130, text
    assert "Traceback" not in text and "transaction aborted" in text, text
    assert consume_all(txn_cli_broker, topic, *COMMITTED) == []


def test_transactional_id_needs_acks_all(txn_cli_broker: BrokerProcess) -> None:
    run = failed(odradek(txn_cli_broker, "produce", "whatever", "--acks", "1",
                         "--transactional-id", "t", stdin=b"x\n"), "--acks all")
    assert run.code == 2
