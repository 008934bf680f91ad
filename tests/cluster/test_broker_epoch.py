"""Broker epochs (KIP-380) on a real 3-broker ZooKeeper cluster: the controller's requests
carry the epoch of the registration they are meant for, brokers' requests to the controller
carry their own, and one without the current epoch (-1, as a forger who does not know it
sends, or an earlier registration's) is refused with STALE_BROKER_EPOCH and changes nothing,
even on the inter-broker listener of a cluster with no authorizer."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient
from support.cluster import WAIT, Cluster, wait_until
from support.replication import agreed_full_isr

from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import controlled_shutdown_request as csr
from odradek.protocol.messages import leader_and_isr_request as lair
from odradek.protocol.messages import stop_replica_request as sr
from odradek.protocol.messages import update_metadata_request as umr

TIMEOUT = 30


def send(port: int, request: Message, version: int) -> Any:
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.settimeout(10)
        s.sendall(encode_request(request, version, 7, "forger"))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        _, response = decode_response(s.recv(size, socket.MSG_WAITALL),
                                      request.API_KEY, version)  # type: ignore[attr-defined]
    return response


def controller_epoch(raw: KazooClient) -> int:
    return int(raw.get("/controller_epoch")[0])


def test_requests_without_the_current_broker_epoch_are_refused(cluster: Cluster,
                                                               raw: KazooClient) -> None:
    topic = "epochs"
    admin = cluster.admin()  # kept: librdkafka cancels the futures of a destroyed client
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(TIMEOUT)
    wait_until(lambda: agreed_full_isr(cluster, topic), WAIT, "a full ISR")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"precious")
    assert producer.flush(TIMEOUT) == 0

    victim = cluster.brokers[2]
    epoch = raw.exists("/brokers/ids/2").czxid
    controller = int(json.loads(raw.get("/controller")[0])["brokerid"])
    cepoch = controller_epoch(raw)
    for broker_epoch in (-1, epoch - 1):
        stop = sr.StopReplicaRequest(
            controller_id=controller, controller_epoch=cepoch, broker_epoch=broker_epoch,
            topic_states=[sr.StopReplicaTopicState(topic_name=topic, partition_states=[
                sr.StopReplicaPartitionState(partition_index=0, leader_epoch=2**30,
                                             delete_partition=True)])])
        assert send(victim.port, stop, 4).error_code == ErrorCode.STALE_BROKER_EPOCH
        metadata = umr.UpdateMetadataRequest(
            controller_id=controller, controller_epoch=cepoch, broker_epoch=broker_epoch,
            live_brokers=[umr.UpdateMetadataBroker(id=2, endpoints=[
                umr.UpdateMetadataEndpoint(port=1, host="127.0.0.1", listener="PLAINTEXT")])])
        assert send(victim.port, metadata, 8).error_code == ErrorCode.STALE_BROKER_EPOCH
        lead = lair.LeaderAndIsrRequest(
            controller_id=controller, controller_epoch=cepoch, broker_epoch=broker_epoch,
            topic_states=[lair.LeaderAndIsrTopicState(topic_name=topic, partition_states=[
                lair.LeaderAndIsrPartitionState(topic_name=topic, partition_index=0,
                                                controller_epoch=cepoch, leader=2,
                                                leader_epoch=2**30, isr=[2], replicas=[2])])])
        assert send(victim.port, lead, 7).error_code == ErrorCode.STALE_BROKER_EPOCH
        # To the controller: a forged controlled shutdown of broker 2.
        shutdown = csr.ControlledShutdownRequest(broker_id=2, broker_epoch=broker_epoch)
        response = send(cluster.brokers[controller].port, shutdown, 3)
        assert response.error_code == ErrorCode.STALE_BROKER_EPOCH

    # Nothing happened: the replica is there, the metadata true, the ISR whole.
    assert (victim.data_dir / f"{topic}-0").is_dir()
    assert agreed_full_isr(cluster, topic)
    assert victim.port in {b.port for b in
                           cluster.admin(2).list_topics(timeout=TIMEOUT).brokers.values()}
    consumer = Consumer({"bootstrap.servers": victim.bootstrap, "group.id": "epochs"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None and \
            message.value() == b"precious"
    finally:
        consumer.close()
    assert "ignoring StopReplica for broker epoch -1" in victim.log_text()
