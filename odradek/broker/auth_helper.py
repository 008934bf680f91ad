"""AuthHelper: the request handlers' questions to the authorizer (Kafka's AuthHelper).

Every handler asks through this, with the request's context (its principal and the
client's address): may it do this operation on that resource? Without an authorizer
(authorizer.class.name unset) everything is allowed, as in Kafka, and the authorized
operations of KIP-430 are all of a resource type's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType, supported_operations
from odradek.server.network import RequestContext

if TYPE_CHECKING:
    from odradek.security.authorizer import AclAuthorizer  # loaded with an authorizer only

__all__ = ["CLUSTER_NAME", "AclOperation", "AuthHelper", "ResourceType"]


class AuthHelper:
    def __init__(self, authorizer: AclAuthorizer | None = None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str = CLUSTER_NAME, *,
                  ref_count: int = 1, log_if_allowed: bool = True,
                  log_if_denied: bool = True) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(
            context.principal, context.client_host, operation, resource_type, name,
            request=context.header.request_api_key, ref_count=ref_count,
            log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)

    def authorize_cluster(self, context: RequestContext, operation: AclOperation) -> bool:
        return self.authorize(context, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def filter_authorized(self, context: RequestContext, operation: AclOperation,
                          resource_type: ResourceType, names: Iterable[str], *,
                          log_if_allowed: bool = True, log_if_denied: bool = True
                          ) -> set[str]:
        """The names among `names` the operation is allowed on (each decided once)."""
        if self.authorizer is None:
            return set(names)
        return self.authorizer.filter_authorized(
            context.principal, context.client_host, operation, resource_type, names,
            request=context.header.request_api_key, log_if_allowed=log_if_allowed,
            log_if_denied=log_if_denied)

    def authorized_operations(self, context: RequestContext, resource_type: ResourceType,
                              name: str) -> int:
        """KIP-430's bitfield of the operations allowed on the resource."""
        if self.authorizer is None:
            return sum(1 << op for op in supported_operations(resource_type))
        return self.authorizer.authorized_operations(
            context.principal, context.client_host, resource_type, name,
            request=context.header.request_api_key)

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """KIP-679: may the principal do `operation` on at least one resource of the type."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(
            context.principal, context.client_host, operation, resource_type,
            request=context.header.request_api_key)


ALLOW_ALL = AuthHelper()  # no authorizer: the handlers' default until the broker sets one
