"""The ACL model: Kafka's enums (codes and names), patterns, entries, filters (ported from
Kafka's ResourcePatternFilterTest and AclBindingTest) and what a CreateAcls may create."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    ANY_FILTER,
    RESOURCE_TYPES,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidRequestError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    new_acl_binding,
    new_acl_binding_filter,
    parse_principal,
    supported_operations,
    validate_acl_binding,
)
from odradek.security.principal import KafkaPrincipal

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
MATCH, ANY = PatternType.MATCH, PatternType.ANY
READ, WRITE = AclOperation.READ, AclOperation.WRITE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


# ---- enums ------------------------------------------------------------------------------------


def test_wire_codes_are_kafkas() -> None:
    assert {t.name: t.value for t in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
        "DELEGATION_TOKEN": 6, "USER": 7}
    assert {t.name: t.value for t in PatternType} == {
        "UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
    assert {o.name: o.value for o in AclOperation} == {
        "UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6,
        "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14}
    assert {p.name: p.value for p in AclPermissionType} == {
        "UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


def test_unknown_codes_decode_as_unknown() -> None:
    assert ResourceType.from_code(99) is ResourceType.UNKNOWN
    assert PatternType.from_code(-1) is PatternType.UNKNOWN
    assert AclOperation.from_code(15) is AclOperation.UNKNOWN
    assert AclPermissionType.from_code(4) is AclPermissionType.UNKNOWN
    assert ResourceType.from_code(5) is ResourceType.TRANSACTIONAL_ID


def test_security_names_are_pascal_case_as_security_utils() -> None:
    assert [t.security_name for t in RESOURCE_TYPES] == [
        "Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"]
    assert AclOperation.IDEMPOTENT_WRITE.security_name == "IdempotentWrite"
    assert AclOperation.DESCRIBE_CONFIGS.security_name == "DescribeConfigs"
    assert AclPermissionType.ALLOW.security_name == "Allow"
    # SecurityUtils accepts the Pascal name or it upper-cased, not the enum name with "_"
    assert ResourceType.from_security_name("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.from_security_name("TRANSACTIONALID") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.from_security_name("TRANSACTIONAL_ID") is ResourceType.UNKNOWN
    assert AclOperation.from_security_name("Read") is READ
    assert AclOperation.from_security_name("READ") is READ
    assert AclOperation.from_security_name("Reed") is AclOperation.UNKNOWN


def test_from_string_as_kafkas_enums() -> None:
    assert ResourceType.from_string("topic") is TOPIC  # valueOf(upper case)
    assert AclOperation.from_string("alter_configs") is AclOperation.ALTER_CONFIGS
    assert AclPermissionType.from_string("nope") is AclPermissionType.UNKNOWN
    assert PatternType.from_string("PREFIXED") is PREFIXED
    assert PatternType.from_string("prefixed") is PatternType.UNKNOWN  # case-sensitive


def test_supported_operations_as_acl_entry() -> None:
    assert set(supported_operations(GROUP)) == {READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    assert set(supported_operations(ResourceType.TRANSACTIONAL_ID)) == {
        AclOperation.DESCRIBE, WRITE}
    assert AclOperation.IDEMPOTENT_WRITE in supported_operations(CLUSTER)
    with pytest.raises(ValueError, match="not a concrete"):
        supported_operations(ResourceType.ANY)


# ---- patterns and entries ----------------------------------------------------------------------


def test_patterns_refuse_filter_values() -> None:
    with pytest.raises(ValueError, match="ANY"):
        ResourcePattern(ResourceType.ANY, "x", LITERAL)
    for pattern_type in (MATCH, ANY):
        with pytest.raises(ValueError, match=pattern_type.name):
            ResourcePattern(TOPIC, "x", pattern_type)
    with pytest.raises(ValueError):
        AccessControlEntry("User:a", "*", AclOperation.ANY, ALLOW)
    with pytest.raises(ValueError):
        AccessControlEntry("User:a", "*", READ, AclPermissionType.ANY)
    # UNKNOWN is representable (an ACL a newer Kafka wrote), and says so
    assert ResourcePattern(ResourceType.UNKNOWN, "x", LITERAL).is_unknown
    assert AclBinding(ResourcePattern(TOPIC, "x"),
                      AccessControlEntry("User:a", "*", AclOperation.UNKNOWN, ALLOW)).is_unknown


def test_pattern_str_as_kafkas_logs() -> None:
    assert str(ResourcePattern(TOPIC, "orders", LITERAL)) == "Topic:LITERAL:orders"
    assert str(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-", PREFIXED)) == (
        "TransactionalId:PREFIXED:tx-")


def test_parse_principal_as_security_utils() -> None:
    assert parse_principal("User:alice") == KafkaPrincipal("User", "alice")
    assert parse_principal("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")  # first colon
    assert parse_principal(":x") == KafkaPrincipal("", "x")  # Kafka accepts it too
    for bad in ("", "alice"):
        with pytest.raises(ValueError, match="principalType:principalName"):
            parse_principal(bad)


# ---- filters (Kafka's ResourcePatternFilterTest) ---------------------------------------------


@pytest.mark.parametrize(("pattern_filter", "pattern", "matches"), [
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(GROUP, "Name", LITERAL),
     False),
    (ResourcePatternFilter(TOPIC, "Different", PREFIXED),
     ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "NAME", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL),
     False),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "Name", PREFIXED),
     False),
    (ResourcePatternFilter(ResourceType.ANY, "Name", PREFIXED),
     ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED),
     True),
    (ResourcePatternFilter(TOPIC, None, ANY), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, MATCH), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL),
     True),
    (ResourcePatternFilter(TOPIC, "Name", ANY), ResourcePattern(TOPIC, "Name", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", MATCH), ResourcePattern(TOPIC, "Name", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name-something", MATCH),
     ResourcePattern(TOPIC, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Name", ANY), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Name", MATCH), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED),
     True),
    (ResourcePatternFilter(TOPIC, "Name", PREFIXED),
     ResourcePattern(TOPIC, "Name-something", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", PREFIXED),
     ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", ANY),
     ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", MATCH),
     ResourcePattern(TOPIC, "Name", PREFIXED), True),
])
def test_resource_pattern_filter_matches_as_kafkas(pattern_filter: ResourcePatternFilter,
                                                   pattern: ResourcePattern,
                                                   matches: bool) -> None:
    assert pattern_filter.matches(pattern) is matches


def test_unknown_and_indefinite_filters() -> None:
    assert ResourcePatternFilter(ResourceType.UNKNOWN, None, LITERAL).is_unknown
    assert ResourcePatternFilter(GROUP, None, PatternType.UNKNOWN).is_unknown
    assert ResourcePatternFilter(TOPIC, "a", LITERAL).matches_at_most_one()
    assert ResourcePatternFilter(TOPIC, "a", MATCH).find_indefinite_field() == (
        "Resource pattern type is MATCH.")
    assert ResourcePatternFilter(TOPIC, None, LITERAL).find_indefinite_field() == (
        "Resource name is NULL.")
    assert not ANY_FILTER.matches_at_most_one()
    binding = AclBinding(ResourcePattern(TOPIC, "a"),
                         AccessControlEntry("User:a", "*", READ, ALLOW))
    assert binding.to_filter().matches_at_most_one()
    assert binding.to_filter().matches(binding)
    assert AclBindingFilter(ResourcePatternFilter(TOPIC, "a", LITERAL),
                            AccessControlEntryFilter("User:a", None)).find_indefinite_field() == (
        "Host is NULL")


def test_entry_filter_matches_exactly() -> None:
    entry = AccessControlEntry("User:alice", "10.0.0.1", READ, DENY)
    assert AccessControlEntryFilter().matches(entry)
    assert AccessControlEntryFilter("User:alice", "10.0.0.1", READ, DENY).matches(entry)
    assert not AccessControlEntryFilter("User:*").matches(entry)  # not a wildcard here
    assert not AccessControlEntryFilter(host="*").matches(entry)
    assert not AccessControlEntryFilter(operation=WRITE).matches(entry)
    assert not AccessControlEntryFilter(permission_type=ALLOW).matches(entry)
    assert AccessControlEntryFilter("User:*").matches(
        AccessControlEntry("User:*", "*", READ, ALLOW))


def test_filter_from_wire_codes() -> None:
    f = new_acl_binding_filter(2, None, 4, None, "h", 3, 3)
    assert f == AclBindingFilter(ResourcePatternFilter(TOPIC, None, PREFIXED),
                                 AccessControlEntryFilter(None, "h", READ, ALLOW))
    assert new_acl_binding_filter(99, "x", 3, None, None, 1, 1).is_unknown
    assert new_acl_binding_filter(1, "x", 3, None, None, 0, 1).is_unknown


# ---- what CreateAcls may create ---------------------------------------------------------------


def binding(resource_type: int = 2, name: str = "orders", pattern_type: int = 3,
            principal: str = "User:alice", host: str = "*", operation: int = 3,
            permission: int = 3) -> AclBinding:
    return new_acl_binding(resource_type, name, pattern_type, principal, host, operation,
                           permission)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"resource_type": 0}, "Invalid resourceType UNKNOWN"),
    ({"resource_type": 1}, "Invalid resourceType ANY"),
    ({"resource_type": 42}, "Invalid resourceType UNKNOWN"),
    ({"pattern_type": 1}, "Invalid patternType ANY"),
    ({"pattern_type": 2}, "Invalid patternType MATCH"),
    ({"pattern_type": 0}, "Invalid patternType UNKNOWN"),
    ({"operation": 1}, "Invalid operation ANY"),
    ({"operation": 0}, "Invalid operation UNKNOWN"),
    ({"permission": 1}, "Invalid permissionType ANY"),
    ({"permission": 7}, "Invalid permissionType UNKNOWN"),
    ({"resource_type": 4, "name": "my-cluster"},
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    ({"name": ""}, "Invalid empty resource name"),
    ({"name": "a/b"}, "ACL binding contains invalid resource name: a/b"),
    ({"principal": "alice"}, "format principalType:principalName but got alice"),
    ({"principal": ""}, "format principalType:principalName"),
])
def test_invalid_creations(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message) as e:
        binding(**kwargs)  # type: ignore[arg-type]
    assert e.value.error_code == ErrorCode.INVALID_REQUEST


def test_valid_creations() -> None:
    assert binding() == AclBinding(ResourcePattern(TOPIC, "orders", LITERAL),
                                   AccessControlEntry("User:alice", "*", READ, ALLOW))
    cluster = binding(resource_type=4, name="kafka-cluster", operation=12, permission=2)
    assert cluster.entry.operation is AclOperation.IDEMPOTENT_WRITE
    assert binding(name="*").pattern.name == "*"
    assert binding(pattern_type=4, name="ord").pattern.pattern_type is PREFIXED
    validate_acl_binding(cluster)
    # a binding built in code goes through the same rules
    with pytest.raises(InvalidRequestError, match="CLUSTER"):
        validate_acl_binding(AclBinding(ResourcePattern(CLUSTER, "other"),
                                        AccessControlEntry("User:a", "*", READ, ALLOW)))
    with pytest.raises(InvalidRequestError, match="UNKNOWN"):
        validate_acl_binding(AclBinding(
            ResourcePattern(TOPIC, "t"),
            AccessControlEntry("User:a", "*", AclOperation.UNKNOWN, ALLOW)))
