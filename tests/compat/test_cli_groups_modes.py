"""`odradek consume --group` (several topics, --regex) and the reset-offsets modes and
delete-offsets of `odradek groups`, as real processes against one real broker process:
the offsets a command commits or deletes are checked through `groups describe`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from test_cli import create, failed, odradek, ok

A, B = "modes-a", "modes-b"  # 2 partitions of 5 records; 1 partition of 3 records
OLD = 7_200_000  # the first 3 records of each partition of A are two hours old


@pytest.fixture(scope="module")
def modes_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-modes"),
                            {"group.initial.rebalance.delay.ms": "0",
                             "auto.create.topics.enable": "false"}).start()
    create(process, A, 2)
    create(process, B, 1)
    for name in ("rx-one", "rx-two", "not-rx-one"):
        create(process, name, 1)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": process.bootstrap})
    for p in range(2):
        for i in range(5):
            producer.produce(A, value=f"a{p}-{i}".encode(), partition=p,
                             timestamp=now - OLD if i < 3 else now)
    for i in range(3):
        producer.produce(B, value=f"b-{i}".encode(), partition=0)
    for name in ("rx-one", "rx-two", "not-rx-one"):
        producer.produce(name, value=name.encode())
    assert producer.flush(30) == 0
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def commit(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                    asynchronous=False)
    consumer.close()


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    document: dict[str, Any] = ok(odradek(broker, "groups", "describe", group,
                                          "--json")).json()
    return {(r["topic"], r["partition"]): r["committed_offset"]
            for r in document["partitions"] if r["committed_offset"] is not None}


def reset(broker: BrokerProcess, group: str, *args: str) -> dict[tuple[str, int], int]:
    """The plan of a reset-offsets run (--json): partition -> new offset."""
    plan = ok(odradek(broker, "groups", "reset-offsets", group, *args, "--json")).json()
    assert plan["executed"] == ("--execute" in args)
    return {(p["topic"], p["partition"]): p["new_offset"] for p in plan["partitions"]}


# ---- consume --group ---------------------------------------------------------------------

def test_consume_two_topics_as_a_group_member(modes_broker: BrokerProcess) -> None:
    run = ok(odradek(modes_broker, "consume", A, B, "--group", "two-topics",
                     "--from-beginning", "--until-end", "--json", "--timeout", "20s"))
    records = run.json_lines()
    assert sorted(r["value"] for r in records) == sorted(
        [f"a{p}-{i}" for p in range(2) for i in range(5)] + [f"b-{i}" for i in range(3)])
    assert "consumed 13 records" in run.err
    assert committed(modes_broker, "two-topics") == {(A, 0): 5, (A, 1): 5, (B, 0): 3}


def test_group_commits_only_what_it_printed_and_resumes_there(
        modes_broker: BrokerProcess) -> None:
    first = ok(odradek(modes_broker, "consume", A, B, "--group", "resume", "--from-beginning",
                       "-n", "4", "--timeout", "20s"))
    assert len(first.out.splitlines()) == 4
    assert sum(committed(modes_broker, "resume").values()) == 4
    # --from-beginning counts only where the group has no committed offset, as Kafka's.
    rest = ok(odradek(modes_broker, "consume", A, B, "--group", "resume", "--from-beginning",
                      "-e", "--timeout", "20s"))
    assert len(rest.out.splitlines()) == 9
    assert set(first.out.splitlines()).isdisjoint(rest.out.splitlines())
    assert committed(modes_broker, "resume") == {(A, 0): 5, (A, 1): 5, (B, 0): 3}


def test_consume_a_regex_subscription(modes_broker: BrokerProcess) -> None:
    run = ok(odradek(modes_broker, "consume", "--group", "by-pattern", "--regex", "rx-.*",
                     "--from-beginning", "-e", "--format", "{topic}", "--timeout", "20s"))
    # The pattern matches whole names: not-rx-one is left out.
    assert sorted(run.out.split()) == ["rx-one", "rx-two"]
    assert committed(modes_broker, "by-pattern") == {("rx-one", 0): 1, ("rx-two", 0): 1}


def test_consume_group_usage_errors(modes_broker: BrokerProcess) -> None:
    assert failed(odradek(modes_broker, "consume", A, B), "--group").code == 2
    assert failed(odradek(modes_broker, "consume", "--regex", "rx-.*"), "--group").code == 2
    assert failed(odradek(modes_broker, "consume", A, "--group", "g", "--offset", "1",
                          "--partition", "0"), "--offset does not go with --group").code == 2
    failed(odradek(modes_broker, "consume", "modes-nosuch", "--group", "g", "--timeout", "10s"),
           "modes-nosuch", "UNKNOWN_TOPIC_OR_PART")


def test_ctrl_c_commits_what_was_printed(modes_broker: BrokerProcess) -> None:
    env = dict(os.environ, ODRADEK_BOOTSTRAP=modes_broker.bootstrap)
    process = subprocess.Popen(
        [sys.executable, "-m", "odradek", "consume", B, "--group", "interrupted",
         "--from-beginning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert process.stdout is not None
        assert [process.stdout.readline() for _ in range(3)] == [b"b-0\n", b"b-1\n", b"b-2\n"]
        process.send_signal(signal.SIGINT)  # waiting for more
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130 and b"consumed 3 records" in err, err
    assert b"Traceback" not in err
    assert committed(modes_broker, "interrupted") == {(B, 0): 3}


# ---- reset-offsets -----------------------------------------------------------------------

def test_all_topics_to_earliest(modes_broker: BrokerProcess) -> None:
    commit(modes_broker, "everything", {(A, 0): 4, (A, 1): 4, (B, 0): 1})
    planned = reset(modes_broker, "everything", "--all-topics", "--to-earliest")
    assert planned == {(A, 0): 0, (A, 1): 0, (B, 0): 0}
    assert committed(modes_broker, "everything") == {(A, 0): 4, (A, 1): 4, (B, 0): 1}
    reset(modes_broker, "everything", "--all-topics", "--to-earliest", "--execute")
    assert committed(modes_broker, "everything") == planned
    # Only what the group has offsets for: the rx topics are not touched.
    assert all(t in (A, B) for t, _ in planned)


def test_to_current(modes_broker: BrokerProcess) -> None:
    commit(modes_broker, "current", {(A, 0): 2})
    planned = reset(modes_broker, "current", "--topic", A, "--to-current")
    assert planned == {(A, 0): 2, (A, 1): 5}  # no committed offset: the log end
    assert committed(modes_broker, "current") == {(A, 0): 2}
    reset(modes_broker, "current", "--topic", A, "--to-current", "--execute")
    assert committed(modes_broker, "current") == {(A, 0): 2, (A, 1): 5}


def test_by_duration(modes_broker: BrokerProcess) -> None:
    commit(modes_broker, "recent", {(A, 0): 5, (A, 1): 5})
    # An hour back: past the two-hour-old records, at the first recent one.
    assert reset(modes_broker, "recent", "--topic", A, "--by-duration", "PT1H") == {
        (A, 0): 3, (A, 1): 3}
    assert committed(modes_broker, "recent") == {(A, 0): 5, (A, 1): 5}
    reset(modes_broker, "recent", "--topic", f"{A}:1", "--by-duration", "P1DT0.5S",
          "--execute")  # a day back: every record
    assert committed(modes_broker, "recent") == {(A, 0): 5, (A, 1): 0}
    bad = odradek(modes_broker, "groups", "reset-offsets", "recent", "--topic", A,
                  "--by-duration", "1h")
    assert bad.code == 2 and "ISO 8601 duration" in bad.err, bad


def test_export_then_from_file(modes_broker: BrokerProcess, tmp_path: Path) -> None:
    commit(modes_broker, "planned", {(A, 0): 4, (A, 1): 3, (B, 0): 2})
    export = ok(odradek(modes_broker, "groups", "reset-offsets", "planned", "--all-topics",
                        "--shift-by", "-1", "--export"))
    assert export.out.splitlines() == [f"{A},0,3", f"{A},1,2", f"{B},0,1"]
    assert committed(modes_broker, "planned") == {(A, 0): 4, (A, 1): 3, (B, 0): 2}
    plan = tmp_path / "plan.csv"
    plan.write_text(export.out)
    dry = reset(modes_broker, "planned", "--from-file", str(plan))
    assert dry == {(A, 0): 3, (A, 1): 2, (B, 0): 1}
    assert committed(modes_broker, "planned") == {(A, 0): 4, (A, 1): 3, (B, 0): 2}
    ok(odradek(modes_broker, "groups", "reset-offsets", "planned", "--from-file", str(plan),
               "--execute"))
    assert committed(modes_broker, "planned") == dry
    # Kafka's form for several groups; out-of-range offsets are kept within the log.
    multi = tmp_path / "groups.csv"
    multi.write_text(f"other,{A},0,1\nplanned,{A},0,99\nplanned,{B},0,-5\n")
    assert reset(modes_broker, "planned", "--from-file", str(multi), "--execute") == {
        (A, 0): 5, (B, 0): 0}
    assert committed(modes_broker, "planned") == {(A, 0): 5, (A, 1): 2, (B, 0): 0}


def test_reset_usage_errors(modes_broker: BrokerProcess, tmp_path: Path) -> None:
    assert failed(odradek(modes_broker, "groups", "reset-offsets", "g", "--to-earliest"),
                  "--all-topics").code == 2
    garbage = tmp_path / "garbage.csv"
    garbage.write_text(f"{A},0,3\n{A},zero,3\n")
    assert failed(odradek(modes_broker, "groups", "reset-offsets", "g", "--from-file",
                          str(garbage)), "garbage.csv:2").code == 2
    assert failed(odradek(modes_broker, "groups", "reset-offsets", "g", "--from-file",
                          str(garbage), "--topic", A), "--from-file").code == 2
    assert failed(odradek(modes_broker, "groups", "reset-offsets", "g", "--all-topics",
                          "--to-latest", "--export", "--json"), "--export").code == 2
    nowhere = tmp_path / "nowhere.csv"
    nowhere.write_text(f"{A},7,3\n")
    failed(odradek(modes_broker, "groups", "reset-offsets", "g", "--from-file", str(nowhere)),
           "has no partition 7")


# ---- delete-offsets ----------------------------------------------------------------------

def test_delete_offsets_refused_while_subscribed(modes_broker: BrokerProcess) -> None:
    group = "deleting"
    member = Consumer({"bootstrap.servers": modes_broker.bootstrap, "group.id": group,
                       "enable.auto.commit": False})
    try:
        member.subscribe([B])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        assert member.assignment()
        member.commit(offsets=[TopicPartition(B, 0, 2), TopicPartition(A, 0, 1),
                               TopicPartition(A, 1, 1)], asynchronous=False)
        run = failed(odradek(modes_broker, "groups", "delete-offsets", group, "--topic", B,
                             "--topic", A, "--json"), "GROUP_SUBSCRIBED_TO_TOPIC")
        assert run.code == 1
        statuses = {(p["topic"], p["partition"]): p["deleted"] for p in run.json()["partitions"]}
        assert statuses == {(A, 0): True, (A, 1): True, (B, 0): False}
        assert committed(modes_broker, group) == {(B, 0): 2}
    finally:
        member.close()  # leaves the group: it is Empty now
    table = ok(odradek(modes_broker, "groups", "delete-offsets", group, "--topic", f"{B}:0"))
    assert table.out.split()[:3] == ["TOPIC", "PARTITION", "STATUS"]
    assert [B, "0", "Successful"] in [line.split() for line in table.out.splitlines()]
    # Its last offset gone, the empty group is gone too, as in Kafka.
    failed(odradek(modes_broker, "groups", "describe", group), "does not exist")


def test_delete_offsets_of_an_unknown_group(modes_broker: BrokerProcess) -> None:
    run = failed(odradek(modes_broker, "groups", "delete-offsets", "modes-nosuch-group",
                         "--topic", A), "GROUP_ID_NOT_FOUND")
    assert run.code == 1
