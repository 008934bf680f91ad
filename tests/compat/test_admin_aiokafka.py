"""The admin round trip through aiokafka's AIOKafkaAdminClient: create, describe, alter
(configs and partitions), delete records, delete. The same operations through
confluent-kafka and kafka-python are in test_admin.py."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition
from support.broker import BrokerProcess


def test_aiokafka_admin_round_trip(broker: BrokerProcess) -> None:
    asyncio.run(_round_trip(broker.bootstrap))


async def _round_trip(bootstrap: str) -> None:
    topic = "aiokafka-admin"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "60000"})])
        assert topic in await admin.list_topics()
        [described] = await admin.describe_topics([topic])
        assert described["error_code"] == 0 and len(described["partitions"]) == 2

        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        [response] = await admin.describe_configs([resource])
        configs = {c[0]: c[1] for c in response.resources[0][4]}
        assert configs["retention.ms"] == "60000"
        assert configs["cleanup.policy"] == "delete"

        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"retention.ms": "120000"})])
        [response] = await admin.describe_configs([resource])
        assert {c[0]: c[1] for c in response.resources[0][4]}["retention.ms"] == "120000"

        await admin.create_partitions({topic: NewPartitions(total_count=3)})
        [described] = await admin.describe_topics([topic])
        assert len(described["partitions"]) == 3

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
        finally:
            await producer.stop()
        low = await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(4)})
        assert low[TopicPartition(topic, 0)] == 4  # the new log start offset (low watermark)

        await admin.delete_topics([topic])
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()
