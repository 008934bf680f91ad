"""DescribeClientQuotas and AlterClientQuotas (KIP-546): client quotas kept in the metadata
store in Kafka's format (/config/users/<user>[/clients/<id>], /config/clients/<id> on
ZooKeeper), so `kafka-configs.sh --entity-type users/clients` and AdminClients manage them.
The answers and their errors are Kafka's (ZkAdminManager.describeClientQuotas and
alterClientQuotas); a change applies to this broker's quota managers at once, and to the
other brokers' through ZooKeeper's change notifications."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from odradek.broker.auth_helper import ALLOW_ALL, AclOperation, AuthHelper
from odradek.cluster.metadata import MetadataStore, QuotaEntity
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_client_quotas_response as alter_response
from odradek.protocol.messages import describe_client_quotas_response as describe_response
from odradek.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest
from odradek.protocol.messages.describe_client_quotas_request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from odradek.server.network import RequestContext
from odradek.server.quota_manager import CLIENT_ID, USER, QuotaManagers

log = logging.getLogger(__name__)

IP = "ip"
# Kafka's DynamicConfig.User/Client quota keys and their types.
_LONG_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate"})
_DOUBLE_KEYS = frozenset({"request_percentage", "controller_mutation_rate"})
CLIENT_QUOTA_KEYS = _LONG_KEYS | _DOUBLE_KEYS
# DescribeClientQuotas' match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(message: str) -> QuotaError:
    return QuotaError(ErrorCode.INVALID_REQUEST, message)


class QuotaApis:
    def __init__(self, store: MetadataStore, quotas: QuotaManagers | None = None) -> None:
        self.store = store
        self.quotas = quotas
        self.auth: AuthHelper = ALLOW_ALL  # DESCRIBE_CONFIGS, ALTER_CONFIGS on the cluster

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter,
        }

    async def handle_describe(self, request: Request, context: RequestContext) -> Message:
        body = cast(DescribeClientQuotasRequest, request.body)
        if not self.auth.authorize_cluster(context, AclOperation.DESCRIBE_CONFIGS):
            return describe_response.DescribeClientQuotasResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.", entries=None)
        try:
            components = _filter_components(body.components)
        except QuotaError as e:
            return describe_response.DescribeClientQuotasResponse(
                error_code=e.code, error_message=str(e), entries=None)
        if IP in components:  # Kafka's IP quotas (connection_creation_rate): none here
            return describe_response.DescribeClientQuotasResponse(entries=[])
        stored = await asyncio.to_thread(self.store.quota_configs)
        entries = []
        for entity, configs in sorted(stored.items(), key=lambda e: str(e[0])):
            names = dict(entity)
            values = {k: v for k, v in configs.items() if k in CLIENT_QUOTA_KEYS}
            if not values or not all(
                    _matches(components.get(kind), kind in names, names.get(kind),
                             body.strict) for kind in (USER, CLIENT_ID)):
                continue
            try:
                parsed = {k: float(v) for k, v in values.items()}
            except ValueError:
                continue
            entries.append(describe_response.EntryData(
                entity=[describe_response.EntityData(entity_type=kind, entity_name=name)
                        for kind, name in entity],
                values=[describe_response.ValueData(key=k, value=v)
                        for k, v in sorted(parsed.items())]))
        return describe_response.DescribeClientQuotasResponse(entries=entries)

    async def handle_alter(self, request: Request, context: RequestContext) -> Message:
        body = cast(AlterClientQuotasRequest, request.body)
        if not self.auth.authorize_cluster(context, AclOperation.ALTER_CONFIGS):
            return alter_response.AlterClientQuotasResponse(entries=[
                alter_response.EntryData(
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message="Cluster authorization failed.",
                    entity=_echo(e.entity)) for e in body.entries])
        results: list[tuple[int, str | None]] = []
        changes: dict[QuotaEntity, dict[str, str | None]] = {}
        for entry in body.entries:
            try:
                entity = _entity(entry.entity)
                updates: dict[str, str | None] = {}
                for op in entry.ops:
                    updates[op.key] = None if op.remove else _value(op.key, op.value)
            except QuotaError as e:
                log.info("AlterClientQuotas: %s", e)
                results.append((e.code, str(e)))
                continue
            results.append((ErrorCode.NONE, None))
            if not body.validate_only:
                changes.setdefault(entity, {}).update(updates)
        if changes:
            try:
                await asyncio.to_thread(self.store.alter_quota_configs, changes)
            except Exception as e:
                log.exception("storing client quotas failed")
                results = [(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store them: {e}")
                           if code == ErrorCode.NONE else (code, message)
                           for code, message in results]
            else:
                await self.reload(changes)
        return alter_response.AlterClientQuotasResponse(entries=[
            alter_response.EntryData(error_code=code, error_message=message,
                                     entity=_echo(entry.entity))
            for entry, (code, message) in zip(body.entries, results, strict=True)])

    async def reload(self, entities: Any = None) -> None:
        """Applies the stored quotas to this broker's quota managers (all of them: a change
        of one entity changes whose rates count where)."""
        if self.quotas is None:
            return
        stored = await asyncio.to_thread(self.store.quota_configs)
        self.quotas.load(stored)


def _echo(entity: list[Any]) -> list[alter_response.EntityData]:
    return [alter_response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entity]


def _filter_components(components: list[ComponentData]) -> dict[str, ComponentData]:
    found: dict[str, ComponentData] = {}
    for component in components:
        kind = component.entity_type
        if kind == "":
            raise _invalid("Unexpected empty filter component entity type")
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"Custom entity type '{kind}' not supported")
        if kind in found:
            raise _invalid("Duplicate user filter component entity type" if kind == USER
                           else "Duplicate client filter component entity type"
                           if kind == CLIENT_ID else "Duplicate ip filter component entity type")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise _invalid(f"Unexpected match type: {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise _invalid("Exact match requires a name")
        found[kind] = component
    if IP in found and (USER in found or CLIENT_ID in found):
        raise _invalid("Invalid entity filter component combination, IP filter component "
                       "should not be used with user or clientId filter component.")
    return found


def _matches(component: ComponentData | None, present: bool, name: str | None,
             strict: bool) -> bool:
    if component is None:
        return not present or not strict
    if component.match_type == MATCH_EXACT:
        return present and name == component.match
    if component.match_type == MATCH_DEFAULT:
        return present and name is None
    return present  # any name, <default> too


def _entity(data: list[Any]) -> QuotaEntity:
    """Kafka's parseAndSanitizeQuotaEntity, with the combinations it accepts."""
    if not data:
        raise _invalid("Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for e in data:
        if e.entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {e.entity_type}")
        if e.entity_name is not None and not e.entity_name:
            raise _invalid(f"Empty {e.entity_type} not supported")
        names[e.entity_type] = e.entity_name
    if IP in names:
        if len(names) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be used "
                           "with user/client ID entity.")
        raise _invalid("IP quotas (connection_creation_rate) are not supported by Odradek")
    return tuple((kind, names[kind]) for kind in (USER, CLIENT_ID) if kind in names)


def _value(key: str, value: float) -> str:
    if key not in CLIENT_QUOTA_KEYS:
        raise _invalid(f"Invalid configuration key {key}")
    if value != value or value < 0:  # NaN or negative
        raise _invalid(f"Configuration {key} must be a non-negative value")
    if key in _LONG_KEYS:
        if value == float("inf"):  # Kafka: (value + epsilon).toLong is Long.MaxValue
            raise _invalid(f"Configuration {key} must be a Long value")
        epsilon = 1e-6
        as_long = int(value + epsilon)
        if abs(as_long - value) > epsilon:
            raise _invalid(f"Configuration {key} must be a Long value")
        return str(as_long)
    if value == float("inf"):
        return "Infinity"  # Java's Double.toString, which Kafka's znodes hold
    return repr(float(value))
