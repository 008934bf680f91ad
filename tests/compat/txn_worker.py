"""A consume-transform-produce worker with exactly-once semantics (KIP-98, KIP-447), in a
process of its own so that test_transactions.py can SIGKILL it at any moment.

    python txn_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

It reads INPUT read_committed as a member of GROUP (no auto commit), and for each batch
of records writes one transformed record per input record to OUTPUT ("out:" + value),
with the consumer's positions sent to the transaction (send_offsets_to_transaction), and
commits the transaction: the outputs and the offsets become visible together or not at
all. After each commit it prints "committed N" (the records of that transaction). It
exits 0 once INPUT has been idle for two seconds, counted from when it joined the group,
with everything committed.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5})
    producer.init_transactions(30)  # fences a killed predecessor, aborting its transaction
    assigned: list[float] = []
    consumer.subscribe([source], on_assign=lambda c, ps: assigned.append(time.monotonic()))
    idle_since = None
    while idle_since is None or time.monotonic() - idle_since < 2.0:
        if idle_since is None and assigned:
            idle_since = assigned[0]
        messages = [m for m in consumer.consume(50, 0.3) if m.error() is None]
        if not messages:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in messages:
            producer.produce(sink, key=m.key(), value=b"out:" + m.value(),
                             partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print(f"committed {len(messages)}", flush=True)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
