"""AclApis: CreateAcls, DescribeAcls and DeleteAcls (Kafka's kafka.server.AclApis).

DescribeAcls answers from the authorizer's cache; CreateAcls and DeleteAcls write through
the AclStore (in a worker thread: ZooKeeper and the disk block), whose listener keeps
every broker's authorizer current, this one's before the write returns.

The requests' own authorization is Kafka's: ALTER on the CLUSTER resource for CreateAcls
and DeleteAcls, DESCRIBE on it for DescribeAcls. The `authorize` callable given to AclApis
answers that (see cluster_authorize); refused, every result of the request is
CLUSTER_AUTHORIZATION_FAILED. Without it, the caller has checked before dispatching.

Without an authorizer (authorizer.class.name unset) every answer is SECURITY_DISABLED, as
Kafka's. Where Kafka closes the connection on a creation or filter with an element it
does not know (a code outside its enums, UNKNOWN), we answer INVALID_REQUEST for that
creation or filter (for DescribeAcls, the request).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    create_acls_request,
    create_acls_response,
    delete_acls_request,
    delete_acls_response,
    describe_acls_request,
    describe_acls_response,
)
from odradek.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ClusterAuthorizationError,
    InvalidRequestError,
    PatternType,
    ResourceType,
    SecurityDisabledError,
    new_acl_binding,
    new_acl_binding_filter,
)
from odradek.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.server.network import RequestContext

if TYPE_CHECKING:  # loaded with an authorizer only (the store's kazoo, for a cluster)
    from odradek.security.acl_store import AclStore
    from odradek.security.authorizer import AclAuthorizer

log = logging.getLogger(__name__)

# May this request's principal do `operation` on the CLUSTER resource?
ClusterAuthorize = Callable[[Request, RequestContext, AclOperation], bool]

NO_AUTHORIZER = "No Authorizer is configured."  # CreateAcls, DeleteAcls
NO_AUTHORIZER_ON_BROKER = "No Authorizer is configured on the broker"  # DescribeAcls


def _context_principal(context: RequestContext) -> KafkaPrincipal:
    # The authenticated principal the server puts on the context; ANONYMOUS without one.
    return getattr(context, "principal", None) or ANONYMOUS


def cluster_authorize(authorizer: AclAuthorizer,
                      principal_of: Callable[[RequestContext], KafkaPrincipal] | None = None
                      ) -> ClusterAuthorize:
    """The `authorize` of AclApis over an authorizer (Kafka's
    AuthHelper.authorizeClusterOperation). `principal_of` finds a request's principal:
    by default the context's `principal`."""
    find = principal_of or _context_principal

    def authorize(request: Request, context: RequestContext, operation: AclOperation) -> bool:
        return authorizer.authorize(find(context), context.client_host, operation,
                                    ResourceType.CLUSTER, CLUSTER_NAME,
                                    request=request.header.request_api_key)

    return authorize


class AclApis:
    def __init__(self, authorizer: AclAuthorizer | None, store: AclStore | None, *,
                 authorize: ClusterAuthorize | None = None) -> None:
        if (authorizer is None) != (store is None):
            raise ValueError("an ACL authorizer and its store go together")
        self.authorizer = authorizer
        self.store = store
        self.authorize = authorize

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Awaitable[Message]]]:
        return {
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
        }

    def _refused(self, request: Request, context: RequestContext,
                 operation: AclOperation) -> KafkaError | None:
        """The request's own authorization: an error if refused."""
        if self.authorize is None or self.authorize(request, context, operation):
            return None
        return ClusterAuthorizationError(
            f"Request {API_SPECS[request.header.request_api_key].name} is not authorized.")

    # ---- DescribeAcls ------------------------------------------------------------------------

    async def handle_describe_acls(self, request: Request, context: RequestContext) -> Message:
        body = cast(describe_acls_request.DescribeAclsRequest, request.body)
        response = describe_acls_response.DescribeAclsResponse(error_message=None)
        refused = self._refused(request, context, AclOperation.DESCRIBE)
        if refused is not None:
            response.error_code, response.error_message = int(refused.error_code), str(refused)
            return response
        if self.authorizer is None:
            response.error_code = ErrorCode.SECURITY_DISABLED
            response.error_message = NO_AUTHORIZER_ON_BROKER
            return response
        pattern_type = body.pattern_type_filter
        if request.api_version == 0 and pattern_type == PatternType.ANY:
            pattern_type = PatternType.LITERAL  # v0 knew LITERAL only (DescribeAclsRequest)
        acl_filter = new_acl_binding_filter(
            body.resource_type_filter, body.resource_name_filter, pattern_type,
            body.principal_filter, body.host_filter, body.operation, body.permission_type)
        if acl_filter.is_unknown:
            response.error_code = ErrorCode.INVALID_REQUEST
            response.error_message = "DescribeAclsRequest contains UNKNOWN elements"
            return response
        # In a thread: a broad filter over many ACLs would hold the loop.
        bindings = await asyncio.to_thread(self.authorizer.acls, acl_filter)
        if request.api_version == 0:  # v0 cannot say PREFIXED
            bindings = [b for b in bindings if b.pattern.pattern_type == PatternType.LITERAL]
        response.resources = _describe_resources(bindings)
        return response

    # ---- CreateAcls --------------------------------------------------------------------------

    async def handle_create_acls(self, request: Request, context: RequestContext) -> Message:
        body = cast(create_acls_request.CreateAclsRequest, request.body)
        creations = body.creations
        refused = self._refused(request, context, AclOperation.ALTER)
        if refused is None and self.store is None:
            refused = SecurityDisabledError(NO_AUTHORIZER)
        if refused is not None:
            return create_acls_response.CreateAclsResponse(results=[
                create_acls_response.AclCreationResult(error_code=int(refused.error_code),
                                                       error_message=str(refused))
                for _ in creations])
        store = self.store
        assert store is not None
        errors: list[KafkaError | None] = [None] * len(creations)
        valid: list[tuple[int, AclBinding]] = []
        for i, c in enumerate(creations):
            try:
                binding = new_acl_binding(c.resource_type, c.resource_name,
                                          c.resource_pattern_type, c.principal, c.host,
                                          c.operation, c.permission_type)
            except InvalidRequestError as e:
                log.debug("refusing to create an ACL: %s", e)
                errors[i] = e
                continue
            valid.append((i, binding))
        if valid:
            try:
                results = await asyncio.to_thread(store.create_acls, [b for _, b in valid])
            except Exception as e:  # a store that raises instead of answering per binding
                log.exception("creating ACLs failed")
                results = [_unknown_error(e)] * len(valid)
            for (i, _), result in zip(valid, results, strict=True):
                errors[i] = result
        return create_acls_response.CreateAclsResponse(results=[
            create_acls_response.AclCreationResult(error_code=0, error_message=None)
            if e is None else create_acls_response.AclCreationResult(
                error_code=int(e.error_code), error_message=str(e) or None)
            for e in errors])

    # ---- DeleteAcls --------------------------------------------------------------------------

    async def handle_delete_acls(self, request: Request, context: RequestContext) -> Message:
        body = cast(delete_acls_request.DeleteAclsRequest, request.body)
        refused = self._refused(request, context, AclOperation.ALTER)
        if refused is None and self.store is None:
            refused = SecurityDisabledError(NO_AUTHORIZER)
        if refused is not None:
            return delete_acls_response.DeleteAclsResponse(filter_results=[
                delete_acls_response.DeleteAclsFilterResult(error_code=int(refused.error_code),
                                                            error_message=str(refused))
                for _ in body.filters])
        store = self.store
        assert store is not None
        filters: list[AclBindingFilter] = []
        for f in body.filters:
            pattern_type = f.pattern_type_filter
            if request.api_version == 0 and pattern_type == PatternType.ANY:
                pattern_type = PatternType.LITERAL  # as DeleteAclsRequest normalizes v0
            filters.append(new_acl_binding_filter(
                f.resource_type_filter, f.resource_name_filter, pattern_type,
                f.principal_filter, f.host_filter, f.operation, f.permission_type))
        try:
            results = await asyncio.to_thread(store.delete_acls, filters)
        except Exception as e:
            log.exception("deleting ACLs failed")
            error = _unknown_error(e)
            return delete_acls_response.DeleteAclsResponse(filter_results=[
                delete_acls_response.DeleteAclsFilterResult(
                    error_code=int(error.error_code), error_message=str(error))
                for _ in filters])
        filter_results = []
        for result in results:
            matching = [_matching_acl(binding, error) for binding, error in result.deleted]
            if request.api_version == 0:  # v0 cannot say PREFIXED (none can match there)
                matching = [m for m in matching if m.pattern_type == PatternType.LITERAL]
            error = result.error
            filter_results.append(delete_acls_response.DeleteAclsFilterResult(
                error_code=0 if error is None else int(error.error_code),
                error_message=None if error is None else str(error),
                matching_acls=matching))
        return delete_acls_response.DeleteAclsResponse(filter_results=filter_results)


def _describe_resources(bindings: list[AclBinding]
                        ) -> list[describe_acls_response.DescribeAclsResource]:
    """DescribeAclsResponse.aclsResources: the bindings grouped by resource pattern (in
    a stable order; Kafka's is a HashMap's)."""
    by_pattern: dict[tuple[int, int, str], list[AclBinding]] = {}
    for b in bindings:
        p = b.pattern
        by_pattern.setdefault((p.resource_type, p.pattern_type, p.name), []).append(b)
    resources = []
    for (resource_type, pattern_type, name), group in sorted(by_pattern.items()):
        entries = sorted({b.entry for b in group},
                         key=lambda e: (e.principal, e.host, e.operation, e.permission_type))
        resources.append(describe_acls_response.DescribeAclsResource(
            resource_type=int(resource_type), resource_name=name, pattern_type=int(pattern_type),
            acls=[describe_acls_response.AclDescription(
                principal=e.principal, host=e.host, operation=int(e.operation),
                permission_type=int(e.permission_type)) for e in entries]))
    return resources


def _matching_acl(binding: AclBinding, error: KafkaError | None
                  ) -> delete_acls_response.DeleteAclsMatchingAcl:
    p, e = binding.pattern, binding.entry
    return delete_acls_response.DeleteAclsMatchingAcl(
        error_code=0 if error is None else int(error.error_code),
        error_message=None if error is None else str(error),
        resource_type=int(p.resource_type), resource_name=p.name,
        pattern_type=int(p.pattern_type), principal=e.principal, host=e.host,
        operation=int(e.operation), permission_type=int(e.permission_type))


def _unknown_error(e: Exception) -> KafkaError:
    if isinstance(e, KafkaError):
        return e
    return KafkaError(f"{e!r}")  # UNKNOWN_SERVER_ERROR
