"""DescribeClientQuotas and AlterClientQuotas handlers (odradek/broker/quota_apis.py) over the
embedded store: authorization as Kafka's (DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster),
and an alteration applied to the broker's quota managers at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.broker.auth_helper import AuthHelper
from odradek.broker.quota_apis import QuotaApis
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_client_quotas_request as alter
from odradek.protocol.messages import describe_client_quotas_request as describe
from odradek.protocol.messages.request_header import RequestHeader
from odradek.server.network import RequestContext
from odradek.server.quota_manager import QuotaManagers


class Deny(AuthHelper):
    def __init__(self) -> None:
        super().__init__(None)
        self.asked: list[Any] = []

    def authorize(self, context: RequestContext, operation: Any, resource_type: Any,
                  name: str = "kafka-cluster", **kwargs: Any) -> bool:
        self.asked.append((operation.name, resource_type.name))
        return False


def call(apis: QuotaApis, key: ApiKey, version: int, body: Message) -> Any:
    body = type(body).decode(body.encode(version), version)
    header = RequestHeader(request_api_key=key, request_api_version=version, client_id="t")
    context = RequestContext(1, "127.0.0.1", 5555, "PLAINTEXT", header)
    response = asyncio.run(apis.handlers()[key](Request(header, API_SPECS[key], body), context))
    return type(response).decode(response.encode(version), version)


def alteration(user: str | None, rate: float) -> alter.AlterClientQuotasRequest:
    return alter.AlterClientQuotasRequest(entries=[alter.EntryData(
        entity=[alter.EntityData(entity_type="user", entity_name=user)],
        ops=[alter.OpData(key="producer_byte_rate", value=rate)])])


def test_alter_applies_to_the_quota_managers_and_persists(tmp_path: Path) -> None:
    managers = QuotaManagers()
    apis = QuotaApis(EmbeddedMetadataStore(tmp_path), managers)
    response = call(apis, ApiKey.ALTER_CLIENT_QUOTAS, 1, alteration(None, 1024))
    assert [e.error_code for e in response.entries] == [0]
    assert managers.produce.quota("anyone", "app") == 1024.0
    reopened = QuotaApis(EmbeddedMetadataStore(tmp_path))
    described = call(reopened, ApiKey.DESCRIBE_CLIENT_QUOTAS, 0,
                     describe.DescribeClientQuotasRequest())
    assert [([(e.entity_type, e.entity_name) for e in entry.entity],
             [(v.key, v.value) for v in entry.values]) for entry in described.entries] == [
        ([("user", None)], [("producer_byte_rate", 1024.0)])]


def test_cluster_authorization_as_kafka(tmp_path: Path) -> None:
    apis = QuotaApis(EmbeddedMetadataStore(tmp_path))
    apis.auth = deny = Deny()
    response = call(apis, ApiKey.ALTER_CLIENT_QUOTAS, 0, alteration("alice", 5))
    assert [(e.error_code, [x.entity_name for x in e.entity]) for e in response.entries] == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ["alice"])]
    described = call(apis, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                     describe.DescribeClientQuotasRequest())
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert deny.asked == [("ALTER_CONFIGS", "CLUSTER"), ("DESCRIBE_CONFIGS", "CLUSTER")]
    assert EmbeddedMetadataStore(tmp_path).quota_configs() == {}


def test_request_and_controller_mutation_quotas_apply_at_once(tmp_path: Path) -> None:
    """request_percentage and controller_mutation_rate are doubles for users and client ids
    (Kafka's DynamicConfig), enforced from the moment they are altered."""
    managers = QuotaManagers()
    apis = QuotaApis(EmbeddedMetadataStore(tmp_path), managers)
    response = call(apis, ApiKey.ALTER_CLIENT_QUOTAS, 1, alter.AlterClientQuotasRequest(
        entries=[alter.EntryData(
            entity=[alter.EntityData(entity_type="user", entity_name="alice"),
                    alter.EntityData(entity_type="client-id", entity_name=None)],
            ops=[alter.OpData(key="controller_mutation_rate", value=2.5),
                 alter.OpData(key="request_percentage", value=0.5)])]))
    assert [e.error_code for e in response.entries] == [0]
    assert managers.controller_mutation.quota("alice", "any") == 2.5
    assert managers.request.quota("alice", "any") == 0.5
    assert managers.controller_mutation.quota("bob", "any") is None
    described = call(apis, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                     describe.DescribeClientQuotasRequest())
    assert [(v.key, v.value) for v in described.entries[0].values] == [
        ("controller_mutation_rate", 2.5), ("request_percentage", 0.5)]
