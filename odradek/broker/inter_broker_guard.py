"""The inter-broker APIs (the controller's LeaderAndIsr, UpdateMetadata and StopReplica,
ControlledShutdown, AlterPartition, the transaction coordinator's WriteTxnMarkers) are for
brokers: when the inter-broker listener is another listener than the one a request came
on, it is refused with CLUSTER_AUTHORIZATION_FAILED, with or without an authorizer (Kafka
refuses them only under an authorizer, without ClusterAction). A client that can reach a
client listener can then not delete partitions or redirect other clients."""

from __future__ import annotations

from typing import cast

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import write_txn_markers_response as markers
from odradek.protocol.messages.write_txn_markers_request import WriteTxnMarkersRequest

INTER_BROKER_APIS = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION, ApiKey.WRITE_TXN_MARKERS,
})


def refused(request: Request) -> Message:
    """The request's answer with CLUSTER_AUTHORIZATION_FAILED for all of it."""
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if request.api.api_key == ApiKey.WRITE_TXN_MARKERS:
        body = cast(WriteTxnMarkersRequest, request.body)
        return markers.WriteTxnMarkersResponse(markers=[
            markers.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
                markers.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    markers.WritableTxnMarkerPartitionResult(partition_index=p,
                                                              error_code=code)
                    for p in t.partition_indexes])
                for t in m.topics])
            for m in body.markers])
    response = request.api.response_class()
    response.error_code = code  # type: ignore[attr-defined]
    return response
