"""CreateAcls, DescribeAcls and DeleteAcls (v0-v3) as Kafka answers them: every request and
response goes through its encoding in the version under test, over an authorizer and the
embedded store wired as a broker wires them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.acl_apis import AclApis, cluster_authorize
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    create_acls_request,
    delete_acls_request,
    describe_acls_request,
)
from odradek.protocol.messages.request_header import RequestHeader
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclChanges,
    AclDeleteResult,
    AclOperation,
    PatternType,
    ResourceType,
)
from odradek.security.acl_store import EmbeddedAclStore
from odradek.security.authorizer import AclAuthorizer
from odradek.security.principal import KafkaPrincipal
from odradek.server.network import RequestContext

VERSIONS = (0, 1, 2, 3)
TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, ALTER, DESCRIBE, ALL = 3, 4, 7, 8, 2
DENY, ALLOW = 2, 3
Creation = create_acls_request.AclCreation
DeleteFilter = delete_acls_request.DeleteAclsFilter


class Client:
    def __init__(self, apis: AclApis, connection_id: int = 1, host: str = "127.0.0.1") -> None:
        self.apis = apis
        self.connection_id, self.host = connection_id, host

    def call(self, key: ApiKey, version: int, body: Message) -> Any:
        """The handler's answer to `body` as sent and answered in `version`."""
        body = type(body).decode(body.encode(version), version)
        header = RequestHeader(request_api_key=key, request_api_version=version,
                               client_id="tester")
        request = Request(header, API_SPECS[key], body)
        context = RequestContext(self.connection_id, self.host, 5555, "PLAINTEXT", header)
        response = asyncio.run(self.apis.handlers()[key](request, context))
        return type(response).decode(response.encode(version), version)

    def create(self, version: int, *creations: Creation) -> list[tuple[int, str | None]]:
        response = self.call(ApiKey.CREATE_ACLS, version,
                             create_acls_request.CreateAclsRequest(creations=list(creations)))
        return [(r.error_code, r.error_message) for r in response.results]

    def describe(self, version: int, **fields: Any) -> Any:
        fields.setdefault("resource_type_filter", ANY)
        fields.setdefault("resource_name_filter", None)
        fields.setdefault("pattern_type_filter", LITERAL if version == 0 else ANY)
        fields.setdefault("principal_filter", None)
        fields.setdefault("host_filter", None)
        fields.setdefault("operation", 1)
        fields.setdefault("permission_type", 1)
        return self.call(ApiKey.DESCRIBE_ACLS, version,
                         describe_acls_request.DescribeAclsRequest(**fields))

    def delete(self, version: int, *filters: DeleteFilter) -> Any:
        return self.call(ApiKey.DELETE_ACLS, version,
                         delete_acls_request.DeleteAclsRequest(filters=list(filters)))


def creation(resource_type: int = TOPIC, name: str = "orders", pattern: int = LITERAL,
             principal: str = "User:alice", host: str = "*", operation: int = READ,
             permission: int = ALLOW) -> Creation:
    return Creation(resource_type=resource_type, resource_name=name,
                    resource_pattern_type=pattern, principal=principal, host=host,
                    operation=operation, permission_type=permission)


def delete_filter(resource_type: int = ANY, name: str | None = None, pattern: int = ANY,
                  principal: str | None = None, host: str | None = None, operation: int = 1,
                  permission: int = 1) -> DeleteFilter:
    return DeleteFilter(resource_type_filter=resource_type, resource_name_filter=name,
                        pattern_type_filter=pattern, principal_filter=principal,
                        host_filter=host, operation=operation, permission_type=permission)


def described(response: Any) -> list[tuple[int, str, int, list[tuple[str, str, int, int]]]]:
    return [(r.resource_type, r.resource_name, r.pattern_type,
             [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls])
            for r in response.resources]


@pytest.fixture
def wired(tmp_path: Path) -> tuple[Client, AclAuthorizer]:
    authorizer = AclAuthorizer()
    store = EmbeddedAclStore(tmp_path / "acls.json")
    store.start(authorizer.apply)
    return Client(AclApis(authorizer, store)), authorizer


# ---- no authorizer --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_security_disabled_without_an_authorizer(version: int) -> None:
    client = Client(AclApis(None, None))
    assert client.create(version, creation(), creation()) == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
    response = client.describe(version)
    assert (response.error_code, response.error_message, response.resources) == (
        ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
    response = client.delete(version, delete_filter(pattern=LITERAL))
    assert [(r.error_code, r.error_message, r.matching_acls)
            for r in response.filter_results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])]


def test_an_authorizer_needs_its_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        AclApis(AclAuthorizer(), None)
    with pytest.raises(ValueError, match="go together"):
        AclApis(None, EmbeddedAclStore(tmp_path / "acls.json"))


# ---- CreateAcls -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_create_acls(wired: tuple[Client, AclAuthorizer], version: int) -> None:
    client, authorizer = wired
    alice = KafkaPrincipal.user("alice")
    assert not authorizer.authorize(alice, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC,
                                    "orders")
    assert client.create(version, creation(), creation(operation=WRITE, permission=DENY),
                         creation(resource_type=CLUSTER, name="kafka-cluster",
                                  operation=12)) == [(0, None)] * 3
    # in force at once, on the broker that created them
    assert authorizer.authorize(alice, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC,
                                "orders")
    assert not authorizer.authorize(alice, "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC,
                                    "orders")
    assert authorizer.acl_count == 3


@pytest.mark.parametrize("version", VERSIONS)
def test_invalid_creations_fail_alone(wired: tuple[Client, AclAuthorizer], version: int
                                      ) -> None:
    client, authorizer = wired
    results = client.create(
        version,
        creation(resource_type=CLUSTER, name="my-cluster"),
        creation(name=""),
        creation(),
        creation(resource_type=ANY),
        creation(operation=1),
        creation(operation=0),
        creation(permission=1),
        creation(principal="alice"),
        creation(name="a/b"),
        creation(resource_type=99),
    )
    invalid = ErrorCode.INVALID_REQUEST
    assert results == [
        (invalid, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (invalid, "Invalid empty resource name"),
        (0, None),
        (invalid, "Invalid resourceType ANY"),
        (invalid, "Invalid operation ANY"),
        (invalid, "Invalid operation UNKNOWN"),
        (invalid, "Invalid permissionType ANY"),
        (invalid, "Failed to create ACL: expected a string in format "
                  "principalType:principalName but got alice"),
        (invalid, "Failed to create ACL: ACL binding contains invalid resource name: a/b"),
        (invalid, "Invalid resourceType UNKNOWN"),
    ]
    assert authorizer.acl_count == 1


@pytest.mark.parametrize("version", [1, 2, 3])
def test_pattern_types_since_v1(wired: tuple[Client, AclAuthorizer], version: int) -> None:
    client, authorizer = wired
    assert client.create(version, creation(name="orders-", pattern=PREFIXED),
                         creation(pattern=MATCH), creation(pattern=ANY),
                         creation(pattern=0)) == [
        (0, None), (ErrorCode.INVALID_REQUEST, "Invalid patternType MATCH"),
        (ErrorCode.INVALID_REQUEST, "Invalid patternType ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid patternType UNKNOWN")]
    assert authorizer.authorize(KafkaPrincipal.user("alice"), "h", AclOperation.READ,
                                ResourceType.TOPIC, "orders-eu")


def test_v0_cannot_say_prefixed(wired: tuple[Client, AclAuthorizer]) -> None:
    client, _ = wired
    with pytest.raises(Exception, match="resource_pattern_type exists only in versions 1"):
        client.create(0, creation(pattern=PREFIXED))


def test_store_failure_is_an_unknown_server_error(wired: tuple[Client, AclAuthorizer]) -> None:
    client, _ = wired

    class Broken:
        def create_acls(self, bindings: Sequence[AclBinding]) -> list[Any]:
            raise RuntimeError("disk on fire")

        def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
            raise RuntimeError("disk on fire")

    client.apis.store = Broken()  # type: ignore[assignment]
    [(code, message)] = client.create(2, creation())
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR and "disk on fire" in (message or "")
    [result] = client.delete(2, delete_filter()).filter_results
    assert result.error_code == ErrorCode.UNKNOWN_SERVER_ERROR


# ---- DescribeAcls ----------------------------------------------------------------------------


@pytest.fixture
def populated(wired: tuple[Client, AclAuthorizer]) -> Client:
    client, _ = wired
    assert client.create(
        3,
        creation(name="orders", principal="User:bob", operation=WRITE),
        creation(name="orders"),
        creation(name="orders-", pattern=PREFIXED, host="10.0.0.1"),
        creation(name="*"),
        creation(resource_type=GROUP, name="orders", operation=DESCRIBE, permission=DENY),
    ) == [(0, None)] * 5
    return client


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_everything_literal(populated: Client, version: int) -> None:
    response = populated.describe(version, pattern_type_filter=LITERAL)
    assert (response.error_code, response.error_message) == (0, None)
    # grouped by resource, in a stable order
    assert described(response) == [
        (TOPIC, "*", LITERAL, [("User:alice", "*", READ, ALLOW)]),
        (TOPIC, "orders", LITERAL, [("User:alice", "*", READ, ALLOW),
                                    ("User:bob", "*", WRITE, ALLOW)]),
        (GROUP, "orders", LITERAL, [("User:alice", "*", DESCRIBE, DENY)]),
    ]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_describe_filters(populated: Client, version: int) -> None:
    everything = described(populated.describe(version))
    assert len(everything) == 4 and (TOPIC, "orders-", PREFIXED, [
        ("User:alice", "10.0.0.1", READ, ALLOW)]) in everything
    # MATCH: every pattern that applies to the topic orders-eu
    assert [(t, n, p) for t, n, p, _ in described(populated.describe(
        version, resource_type_filter=TOPIC, resource_name_filter="orders-eu",
        pattern_type_filter=MATCH))] == [(TOPIC, "*", LITERAL), (TOPIC, "orders-", PREFIXED)]
    # ANY with a name: that exact name, any pattern type and resource type
    assert [(t, n, p) for t, n, p, _ in described(populated.describe(
        version, resource_name_filter="orders"))] == [(TOPIC, "orders", LITERAL),
                                                      (GROUP, "orders", LITERAL)]
    # by principal, host, operation, permission
    assert described(populated.describe(version, principal_filter="User:bob")) == [
        (TOPIC, "orders", LITERAL, [("User:bob", "*", WRITE, ALLOW)])]
    assert [n for _, n, _, _ in described(populated.describe(
        version, host_filter="10.0.0.1"))] == ["orders-"]
    assert [n for _, n, _, _ in described(populated.describe(
        version, permission_type=DENY))] == ["orders"]
    assert described(populated.describe(version, operation=ALTER)) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_with_unknown_elements(populated: Client, version: int) -> None:
    for fields in ({"resource_type_filter": 0}, {"operation": 0}, {"permission_type": 9}):
        response = populated.describe(version, **fields)
        assert (response.error_code, response.resources) == (ErrorCode.INVALID_REQUEST, [])
        assert response.error_message == "DescribeAclsRequest contains UNKNOWN elements"


# ---- DeleteAcls ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_delete_acls(populated: Client, version: int) -> None:
    response = populated.delete(
        version,
        delete_filter(resource_type=TOPIC, name="orders-eu", pattern=MATCH, operation=READ),
        delete_filter(principal="User:alice"),
        delete_filter(resource_type=0),
        delete_filter(name="nothing"),
    )
    results = response.filter_results
    assert [(r.error_code, r.error_message) for r in results] == [
        (0, None), (0, None), (ErrorCode.INVALID_REQUEST, "Unknown patternFilter."), (0, None)]

    def matched(r: Any) -> list[tuple[int, str | None, int, str, int, str, str, int, int]]:
        return sorted((m.error_code, m.error_message, m.resource_type, m.resource_name,
                       m.pattern_type, m.principal, m.host, m.operation, m.permission_type)
                      for m in r.matching_acls)

    # each deleted ACL reported under the first filter that matched it
    assert matched(results[0]) == [
        (0, None, TOPIC, "*", LITERAL, "User:alice", "*", READ, ALLOW),
        (0, None, TOPIC, "orders-", PREFIXED, "User:alice", "10.0.0.1", READ, ALLOW)]
    assert matched(results[1]) == [
        (0, None, TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
        (0, None, GROUP, "orders", LITERAL, "User:alice", "*", DESCRIBE, DENY)]
    assert matched(results[3]) == []
    assert described(populated.describe(version)) == [
        (TOPIC, "orders", LITERAL, [("User:bob", "*", WRITE, ALLOW)])]


def test_delete_v0_is_literal_only(populated: Client) -> None:
    response = populated.delete(0, delete_filter(resource_type=TOPIC, pattern=LITERAL))
    [result] = response.filter_results
    assert result.error_code == 0
    assert sorted(m.resource_name for m in result.matching_acls) == ["*", "orders", "orders"]
    assert [(t, n, p) for t, n, p, _ in described(populated.describe(3))] == [
        (TOPIC, "orders-", PREFIXED), (GROUP, "orders", LITERAL)]


# ---- the requests' own authorization ------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_refused_requests(tmp_path: Path, version: int) -> None:
    authorizer = AclAuthorizer()
    store = EmbeddedAclStore(tmp_path / "acls.json")
    store.start(authorizer.apply)
    asked: list[AclOperation] = []

    def refuse(request: Request, context: RequestContext, operation: AclOperation) -> bool:
        asked.append(operation)
        return False

    client = Client(AclApis(authorizer, store, authorize=refuse))
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert client.create(version, creation(), creation()) == [
        (denied, "Request CreateAcls is not authorized.")] * 2
    response = client.describe(version)
    assert (response.error_code, response.error_message) == (
        denied, "Request DescribeAcls is not authorized.")
    response = client.delete(version, delete_filter(pattern=LITERAL))
    assert [(r.error_code, r.error_message) for r in response.filter_results] == [
        (denied, "Request DeleteAcls is not authorized.")]
    assert asked == [AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.ALTER]
    assert authorizer.acl_count == 0


def test_cluster_authorize_with_acls(tmp_path: Path) -> None:
    """Kafka's rule: ALTER on the cluster to change ACLs, DESCRIBE (or what implies it) to
    list them; super users may do both."""
    authorizer = AclAuthorizer(super_users=["User:admin"])
    store = EmbeddedAclStore(tmp_path / "acls.json")
    store.start(authorizer.apply)
    principals = {1: KafkaPrincipal.user("admin"), 2: KafkaPrincipal.user("alice")}
    apis = AclApis(authorizer, store, authorize=cluster_authorize(
        authorizer, lambda context: principals[context.connection_id]))
    admin, alice = Client(apis, connection_id=1), Client(apis, connection_id=2)
    assert alice.create(3, creation())[0][0] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert alice.describe(3).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert admin.create(3, creation(resource_type=CLUSTER, name="kafka-cluster",
                                    operation=ALTER)) == [(0, None)]
    assert alice.describe(3).error_code == 0  # ALTER implies DESCRIBE
    assert alice.create(3, creation(name="t")) == [(0, None)]
    assert [n for _, n, _, _ in described(alice.describe(3))] == ["t", "kafka-cluster"]


def test_handlers_cover_the_three_apis() -> None:
    assert set(AclApis(None, None).handlers()) == {
        ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS}


def test_changes_reach_a_second_listener_through_the_store(tmp_path: Path) -> None:
    """What the handlers write goes through the store's listener: another component
    listening (a second cache) hears of it too."""
    authorizer = AclAuthorizer()
    store = EmbeddedAclStore(tmp_path / "acls.json")
    heard: list[AclChanges] = []

    def both(changes: AclChanges) -> None:
        authorizer.apply(changes)
        heard.append(changes)

    store.start(both)
    Client(AclApis(authorizer, store)).create(2, creation(), creation(name="x"))
    assert heard[-1].acls.keys() == {b.pattern for b in authorizer.acls()}
    assert PatternType.LITERAL in {p.pattern_type for p in heard[-1].acls}


def test_cluster_authorize_reads_the_contexts_principal() -> None:
    authorizer = AclAuthorizer(super_users=["User:admin"])
    authorize = cluster_authorize(authorizer)
    header = RequestHeader(request_api_key=ApiKey.CREATE_ACLS, request_api_version=3)
    request = Request(header, API_SPECS[ApiKey.CREATE_ACLS],
                      create_acls_request.CreateAclsRequest())
    context = RequestContext(1, "10.0.0.5", 5555, "PLAINTEXT", header)
    assert not authorize(request, context, AclOperation.ALTER)  # ANONYMOUS
    context.principal = KafkaPrincipal.user("admin")  # type: ignore[misc]
    assert authorize(request, context, AclOperation.ALTER)
