"""One consumer group member in a process of its own, for tests/compat/test_groups.py.

    python group_member.py LIBRARY BOOTSTRAP TOPIC GROUP [key=value ...]

LIBRARY is confluent-kafka, kafka-python or aiokafka. Each line on stdout is a JSON event:
{"event": "assigned", "partitions": [...]} with the member's whole assignment after each
change (for cooperative rebalances also "revoked" with what was taken away), then
{"event": "closed"}. A line "close" on stdin closes the consumer cleanly (LeaveGroup); a
test that wants a crash sends SIGKILL instead. Options: session_ms, strategy
(range, roundrobin, cooperative-sticky), instance_id.
"""

from __future__ import annotations

import asyncio
import json
import select
import sys
import threading
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def stdin_says_close(timeout: float) -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and sys.stdin.readline().strip() == "close"


def run_confluent(bootstrap: str, topic: str, group: str, opts: dict[str, str]) -> None:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group,
        "session.timeout.ms": int(opts.get("session_ms", "3000")),
        "heartbeat.interval.ms": 200, "enable.auto.commit": False,
        "partition.assignment.strategy": opts.get("strategy", "range"),
    }
    if "instance_id" in opts:
        config["group.instance.id"] = opts["instance_id"]
    consumer = Consumer(config)
    cooperative = config["partition.assignment.strategy"] == "cooperative-sticky"
    owned: set[int] = set()

    def on_assign(c: Any, partitions: Any) -> None:
        owned.update(p.partition for p in partitions)
        emit("assigned", partitions=sorted(owned))

    def on_revoke(c: Any, partitions: Any) -> None:
        gone = sorted(p.partition for p in partitions)
        owned.difference_update(gone)
        emit("revoked", partitions=gone)
        if not cooperative:  # an eager revocation takes everything
            emit("assigned", partitions=sorted(owned))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stdin_says_close(0):
        consumer.poll(0.1)
    consumer.close()


def run_kafka_python(bootstrap: str, topic: str, group: str, opts: dict[str, str]) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    strategy = {"range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor}[opts.get("strategy", "range")]
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        session_timeout_ms=int(opts.get("session_ms", "3000")), heartbeat_interval_ms=200,
        partition_assignment_strategy=[strategy],
        # Its reconnect backoff grows to 30 s by default: a broker restarting under load
        # would see the member back only after its session ran out.
        reconnect_backoff_max_ms=1000,
        **({"group_instance_id": opts["instance_id"]} if "instance_id" in opts else {}))

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(p.partition for p in assigned))

    consumer.subscribe([topic], listener=Listener())
    while not stdin_says_close(0):
        consumer.poll(timeout_ms=100)
    consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str, opts: dict[str, str]) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    strategy = {"range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor}[opts.get("strategy", "range")]

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(p.partition for p in assigned))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            session_timeout_ms=int(opts.get("session_ms", "3000")), heartbeat_interval_ms=200,
            partition_assignment_strategy=(strategy,))
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        closing = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.readline(), loop.call_soon_threadsafe(
            closing.set)), daemon=True).start()
        while not closing.is_set():
            await consumer.getmany(timeout_ms=100)
        await consumer.stop()

    asyncio.run(main())


RUNNERS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}

if __name__ == "__main__":
    library, bootstrap, topic, group, *rest = sys.argv[1:]
    RUNNERS[library](bootstrap, topic, group, dict(arg.split("=", 1) for arg in rest))
    emit("closed")
