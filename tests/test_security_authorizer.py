"""AclAuthorizer: Kafka's decisions, ported from its AuthorizerTest and BaseAuthorizerTest
(ZooKeeper variant), over the embedded store so that ACLs are added and removed the way a
broker's are; plus the authorized-operations bitfield, the audit log's text and the cache."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest

from odradek.protocol.api_keys import ApiKey
from odradek.security.acl import (
    ACL_OPERATIONS,
    ANY_FILTER,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclChanges,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    supported_operations,
)
from odradek.security.acl_store import EmbeddedAclStore
from odradek.security.authorizer import TRACE, AclAuthorizer, Action, parse_super_users
from odradek.security.principal import KafkaPrincipal

Op, Perm = AclOperation, AclPermissionType
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE, DESCRIBE, ALL = Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL
ALLOW, DENY = Perm.ALLOW, Perm.DENY

WILDCARD_PRINCIPAL = "User:*"
ALICE = KafkaPrincipal.user("alice")
HOST = "192.168.0.1"  # BaseAuthorizerTest's requestContext
SUPER_USERS = "User:superuser1; User:superuser2"

allow_read = AccessControlEntry(WILDCARD_PRINCIPAL, "*", READ, ALLOW)
allow_write = AccessControlEntry(WILDCARD_PRINCIPAL, "*", WRITE, ALLOW)
deny_read = AccessControlEntry(WILDCARD_PRINCIPAL, "*", READ, DENY)
wildcard_resource = ResourcePattern(TOPIC, "*", LITERAL)
prefixed_resource = ResourcePattern(TOPIC, "foo", PREFIXED)
cluster_resource = ResourcePattern(CLUSTER, "kafka-cluster", LITERAL)


class Harness:
    """An authorizer fed by an embedded store, as a single-node broker wires them."""

    def __init__(self, directory: Path, **config: str) -> None:
        self.authorizer = AclAuthorizer.from_configs({"super.users": SUPER_USERS, **config})
        self.store = EmbeddedAclStore(directory / f"acls-{uuid.uuid4().hex}.json")
        self.store.start(self.authorizer.apply)

    def add(self, entries: set[AccessControlEntry], pattern: ResourcePattern) -> None:
        results = self.store.create_acls([AclBinding(pattern, e) for e in entries])
        assert results == [None] * len(entries)

    def remove(self, entries: set[AccessControlEntry], pattern: ResourcePattern) -> bool:
        """BaseAuthorizerTest.removeAcls: all of the pattern's ACLs when `entries` is empty."""
        filters = ([AclBindingFilter(pattern.to_filter(), AccessControlEntryFilter())]
                   if not entries else [AclBinding(pattern, e).to_filter() for e in entries])
        results = self.store.delete_acls(filters)
        assert all(r.error is None and all(err is None for _, err in r.deleted)
                   for r in results)
        return all(r.deleted for r in results)

    def allowed(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                pattern: ResourcePattern) -> bool:
        assert pattern.pattern_type == LITERAL  # Kafka refuses to authorize another pattern
        return self.authorizer.authorize(principal, host, operation, pattern.resource_type,
                                         pattern.name, request=ApiKey.PRODUCE)

    def by_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                resource_type: ResourceType) -> bool:
        return self.authorizer.authorize_by_resource_type(principal, host, operation,
                                                          resource_type)

    def entries(self, pattern: ResourcePattern) -> set[AccessControlEntry]:
        return {b.entry for b in self.authorizer.acls(
            AclBindingFilter(pattern.to_filter(), AccessControlEntryFilter()))}


@pytest.fixture
def az(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


@pytest.fixture
def resource() -> ResourcePattern:
    return ResourcePattern(TOPIC, f"foo-{uuid.uuid4()}", LITERAL)


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal.user(name)


# ---- AuthorizerTest ----------------------------------------------------------------------------


def test_authorize_with_empty_resource_name(az: Harness) -> None:
    group = ResourcePattern(GROUP, "", LITERAL)
    assert not az.allowed(ALICE, HOST, READ, group)
    az.add({allow_read}, ResourcePattern(GROUP, "*", LITERAL))
    assert az.allowed(ALICE, HOST, READ, group)


def test_empty_resource_name_cannot_have_acls(az: Harness) -> None:
    [result] = az.store.create_acls([AclBinding(ResourcePattern(GROUP, "", LITERAL), allow_read)])
    assert result is not None and "empty resource name" in str(result)


def test_topic_acl(az: Harness, resource: ResourcePattern) -> None:
    user1, user2, user3 = user("alice"), user("rob"), user("batman")
    host1, host2 = "192.168.1.1", "192.168.1.2"
    az.add({
        AccessControlEntry(str(user1), host1, READ, ALLOW),
        AccessControlEntry(str(user1), host2, READ, ALLOW),
        AccessControlEntry(str(user1), host1, READ, DENY),
        AccessControlEntry(str(user1), host1, WRITE, ALLOW),
        AccessControlEntry(str(user1), "*", DESCRIBE, ALLOW),
        AccessControlEntry(str(user2), "*", READ, ALLOW),
        AccessControlEntry(str(user3), "*", WRITE, ALLOW),
    }, resource)
    assert az.allowed(user1, host2, READ, resource)
    assert not az.allowed(user1, host1, READ, resource)  # the deny
    assert az.allowed(user1, host1, WRITE, resource)
    assert not az.allowed(user1, host2, WRITE, resource)  # no allow from host2
    assert az.allowed(user1, host1, DESCRIBE, resource)
    assert az.allowed(user1, host2, DESCRIBE, resource)
    assert not az.allowed(user1, host1, Op.ALTER, resource)
    assert not az.allowed(user1, host2, Op.ALTER, resource)
    # READ or WRITE imply DESCRIBE
    assert az.allowed(user2, host1, DESCRIBE, resource)
    assert az.allowed(user3, host1, DESCRIBE, resource)
    assert az.allowed(user2, host1, READ, resource)
    assert az.allowed(user3, host1, WRITE, resource)


def test_principals_compare_by_type_and_name(az: Harness, resource: ResourcePattern) -> None:
    az.add({AccessControlEntry("User:alice", "192.168.1.1", READ, DENY),
            AccessControlEntry("User:alice", "192.168.1.2", READ, ALLOW)}, resource)
    assert az.allowed(KafkaPrincipal("User", "alice"), "192.168.1.2", READ, resource)
    assert not az.allowed(KafkaPrincipal("User", "alice"), "192.168.1.1", READ, resource)
    assert not az.allowed(KafkaPrincipal("Group", "alice"), "192.168.1.2", READ, resource)


def test_deny_takes_precedence(az: Harness, resource: ResourcePattern) -> None:
    host = "192.168.2.1"
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, "*", ALL, ALLOW),
            AccessControlEntry(str(ALICE), host, ALL, DENY)}, resource)
    assert not az.allowed(ALICE, host, READ, resource)


def test_allow_all_access(az: Harness, resource: ResourcePattern) -> None:
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, "*", ALL, ALLOW)}, resource)
    assert az.allowed(user("random"), "192.0.4.4", READ, resource)


def test_super_users_have_access(az: Harness, resource: ResourcePattern) -> None:
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, "*", ALL, DENY)}, resource)
    assert az.allowed(user("superuser1"), "192.0.4.4", READ, resource)
    assert az.allowed(user("superuser2"), "192.0.4.4", READ, resource)
    assert not az.allowed(user("superuser3"), "192.0.4.4", READ, resource)


def test_wildcard_acls(az: Harness, resource: ResourcePattern) -> None:
    assert not az.allowed(ALICE, HOST, READ, resource)  # fails closed
    host1 = "192.168.3.1"
    az.add({AccessControlEntry(str(ALICE), host1, READ, ALLOW)}, wildcard_resource)
    assert az.allowed(ALICE, host1, READ, resource)
    az.add({AccessControlEntry(str(ALICE), host1, WRITE, ALLOW)}, resource)
    az.add({AccessControlEntry(str(ALICE), host1, WRITE, DENY)}, wildcard_resource)
    assert not az.allowed(ALICE, host1, WRITE, resource)


def test_no_acl_found(az: Harness, resource: ResourcePattern) -> None:
    assert not az.allowed(ALICE, HOST, READ, resource)


@pytest.mark.parametrize("value", ["true", " true ", "TRUE"])
def test_no_acl_found_override(tmp_path: Path, resource: ResourcePattern, value: str) -> None:
    h = Harness(tmp_path, **{"allow.everyone.if.no.acl.found": value})
    assert h.allowed(ALICE, HOST, READ, resource)
    # only when no ACL at all is on the resource: one for somebody else decides
    h.add({AccessControlEntry("User:bob", "*", READ, ALLOW)}, resource)
    assert not h.allowed(ALICE, HOST, READ, resource)
    assert h.allowed(user("bob"), HOST, READ, resource)


def test_acl_management(az: Harness, resource: ResourcePattern) -> None:
    """AuthorizerTest.testAclManagementAPIs, without ZooKeeper."""
    user1, user2 = "User:alice", "User:bob"
    acl1 = AccessControlEntry(user1, "host1", READ, ALLOW)
    acl2 = AccessControlEntry(user1, "host1", WRITE, ALLOW)
    acl3 = AccessControlEntry(user2, "host2", READ, ALLOW)
    acl4 = AccessControlEntry(user2, "host2", WRITE, ALLOW)
    acl5 = AccessControlEntry(user2, "*", READ, ALLOW)
    az.add({acl1, acl2, acl3, acl4}, resource)
    az.add({acl5}, resource)  # additive
    assert az.entries(resource) == {acl1, acl2, acl3, acl4, acl5}

    def by_principal(principal: str) -> set[AclBinding]:
        return set(az.authorizer.acls(AclBindingFilter(ResourcePatternFilter(),
                                                       AccessControlEntryFilter(principal))))

    assert by_principal(user1) == {AclBinding(resource, a) for a in (acl1, acl2)}
    assert by_principal(user2) == {AclBinding(resource, a) for a in (acl3, acl4, acl5)}
    others = {
        ResourcePattern(TOPIC, "*", LITERAL): {AccessControlEntry(user2, "*", READ, ALLOW)},
        ResourcePattern(CLUSTER, "kafka-cluster", LITERAL): {
            AccessControlEntry(user2, "host1", READ, ALLOW)},
        ResourcePattern(GROUP, "*", LITERAL): {acl1, acl2},
        ResourcePattern(GROUP, "test-ConsumerGroup", LITERAL): {acl3},
    }
    for pattern, entries in others.items():
        az.add(entries, pattern)
    expected = {AclBinding(p, e) for p, es in others.items() for e in es}
    expected |= {AclBinding(resource, a) for a in (acl1, acl2, acl3, acl4, acl5)}
    assert set(az.authorizer.acls(ANY_FILTER)) == expected
    assert az.authorizer.acl_count == len(expected)

    assert az.remove({acl1, acl5}, resource)
    assert az.entries(resource) == {acl2, acl3, acl4}
    assert az.remove(set(), resource)
    assert az.entries(resource) == set()
    assert resource not in az.store.load_all()
    assert not az.remove({acl1}, resource)  # nothing left to delete


def test_acl_inheritance(az: Harness) -> None:
    """AuthorizerTest.testAclInheritance: which ALLOWs imply what, and that DENYs imply
    nothing but themselves (ALL aside)."""
    host = "192.168.3.1"
    valid_ops = [op for op in AclOperation if op not in (Op.ANY, Op.UNKNOWN)]

    def implications_of_allow(parent: AclOperation, allowed: set[AclOperation]) -> None:
        acl = AccessControlEntry(str(ALICE), "*", parent, ALLOW)
        az.add({acl}, cluster_resource)
        for op in valid_ops:
            expected = op in allowed or op == parent
            assert az.allowed(ALICE, host, op, cluster_resource) is expected, (parent, op)
        az.remove({acl}, cluster_resource)

    def implications_of_deny(parent: AclOperation, denied: set[AclOperation]) -> None:
        acls = {AccessControlEntry(str(ALICE), "*", parent, DENY),
                AccessControlEntry(str(ALICE), "*", ALL, ALLOW)}
        az.add(acls, cluster_resource)
        for op in valid_ops:
            expected = not (op in denied or op == parent)
            assert az.allowed(ALICE, host, op, cluster_resource) is expected, (parent, op)
        az.remove(acls, cluster_resource)

    everything = set(valid_ops) - {ALL}
    implications_of_allow(ALL, everything)
    implications_of_deny(ALL, everything)
    implications_of_allow(READ, {DESCRIBE})
    implications_of_allow(WRITE, {DESCRIBE})
    implications_of_allow(Op.DELETE, {DESCRIBE})
    implications_of_allow(Op.ALTER, {DESCRIBE})
    implications_of_deny(DESCRIBE, set())
    implications_of_allow(Op.ALTER_CONFIGS, {Op.DESCRIBE_CONFIGS})
    implications_of_deny(Op.DESCRIBE_CONFIGS, set())
    # and a DENY of READ does not deny DESCRIBE
    implications_of_deny(READ, set())


def test_wildcard_and_prefixed_resources(az: Harness, resource: ResourcePattern) -> None:
    az.add({allow_read}, wildcard_resource)
    assert az.allowed(ALICE, HOST, READ, resource)
    h2 = ResourcePattern(TOPIC, "foo-bar", LITERAL)
    assert az.allowed(ALICE, HOST, READ, h2)
    az.remove(set(), wildcard_resource)
    az.add({allow_read}, prefixed_resource)
    assert az.allowed(ALICE, HOST, READ, resource)  # foo-... starts with foo
    assert not az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "fo", LITERAL))
    assert not az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "bar-foo", LITERAL))


@pytest.mark.parametrize("pattern", [wildcard_resource, prefixed_resource])
def test_delete_acl_on_pattern(az: Harness, pattern: ResourcePattern) -> None:
    az.add({allow_read, allow_write}, pattern)
    az.remove({allow_read}, pattern)
    assert az.entries(pattern) == {allow_write}
    az.remove(set(), pattern)
    assert az.authorizer.acls(ANY_FILTER) == []


@pytest.mark.parametrize("which", ["literal", "wildcard", "prefixed"])
def test_add_acls_on_patterns(az: Harness, resource: ResourcePattern, which: str) -> None:
    patterns = {"literal": resource, "wildcard": wildcard_resource,
                "prefixed": prefixed_resource}
    target = patterns[which]
    az.add({allow_read, allow_write}, target)
    az.add({allow_write, deny_read}, target)
    for name, pattern in patterns.items():
        expected = {allow_read, allow_write, deny_read} if name == which else set()
        assert az.entries(pattern) == expected


def test_authorize_with_prefixed_resource(az: Harness, resource: ResourcePattern) -> None:
    for name, pattern_type in [
            ("a_other", LITERAL), ("a_other", PREFIXED), (f"foo-{uuid.uuid4()}", PREFIXED),
            (f"foo-{uuid.uuid4()}", PREFIXED), (f"foo-{uuid.uuid4()}-zzz", PREFIXED),
            (f"fooo-{uuid.uuid4()}", PREFIXED), (f"fo-{uuid.uuid4()}", PREFIXED),
            (f"fop-{uuid.uuid4()}", PREFIXED), (f"fon-{uuid.uuid4()}", PREFIXED),
            ("fon-", PREFIXED), ("z_other", PREFIXED), ("z_other", LITERAL)]:
        az.add({deny_read}, ResourcePattern(TOPIC, name, pattern_type))
    az.add({allow_read}, prefixed_resource)
    assert az.allowed(ALICE, HOST, READ, resource)


def test_single_character_resource_acls(az: Harness) -> None:
    az.add({allow_read}, ResourcePattern(TOPIC, "f", LITERAL))
    assert az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "f", LITERAL))
    assert not az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "foo", LITERAL))
    az.add({allow_read}, ResourcePattern(TOPIC, "_", PREFIXED))
    assert az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "_foo", LITERAL))
    assert az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "_", LITERAL))
    assert not az.allowed(ALICE, HOST, READ, ResourcePattern(TOPIC, "foo_", LITERAL))


def test_get_acls_principal(az: Harness, resource: ResourcePattern) -> None:
    def count(principal: str) -> int:
        return len(az.authorizer.acls(AclBindingFilter(ResourcePatternFilter(),
                                                       AccessControlEntryFilter(principal))))

    az.add({AccessControlEntry(str(ALICE), "*", WRITE, ALLOW)}, resource)
    assert count(WILDCARD_PRINCIPAL) == 0  # a specific ACL is not the wildcard's
    assert count(str(ALICE)) == 1
    az.remove(set(), resource)
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, "*", WRITE, ALLOW)}, resource)
    assert count(WILDCARD_PRINCIPAL) == 1
    assert count(str(ALICE)) == 0


def test_acls_filter_and_delete_attribution(az: Harness) -> None:
    """AuthorizerTest.testAclsFilter: describe filters, and deletions reported under the
    first filter that matches (the ZooKeeper authorizer's way)."""
    resource1 = ResourcePattern(TOPIC, f"foo-{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"bar-{uuid.uuid4()}", LITERAL)
    prefixed = ResourcePattern(TOPIC, "bar-", PREFIXED)
    acl1 = AclBinding(resource1, AccessControlEntry(str(ALICE), "*", READ, ALLOW))
    acl2 = AclBinding(resource1, AccessControlEntry(str(ALICE), "192.168.0.1", WRITE, ALLOW))
    acl3 = AclBinding(resource2, AccessControlEntry(str(ALICE), "*", DESCRIBE, ALLOW))
    acl4 = AclBinding(prefixed, AccessControlEntry(WILDCARD_PRINCIPAL, "*", READ, ALLOW))
    assert az.store.create_acls([acl1, acl2, acl3, acl4]) == [None] * 4

    acls = az.authorizer.acls
    assert set(acls(ANY_FILTER)) == {acl1, acl2, acl3, acl4}
    assert set(acls(AclBindingFilter(resource1.to_filter()))) == {acl1, acl2}
    assert set(acls(AclBindingFilter(prefixed.to_filter()))) == {acl4}
    matching = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, resource2.name,
                                                      PatternType.MATCH))
    assert set(acls(matching)) == {acl3, acl4}
    specific_match = AclBindingFilter(ResourcePatternFilter(TOPIC, resource2.name,
                                                            PatternType.MATCH))
    assert set(acls(specific_match)) == {acl3, acl4}  # from the index

    results = az.store.delete_acls([
        matching, acl1.to_filter(), AclBindingFilter(resource2.to_filter()),
        AclBindingFilter(ResourcePatternFilter(TOPIC, "baz", PatternType.ANY))])
    assert all(r.error is None for r in results)
    assert [{b for b, e in r.deleted if e is None} for r in results] == [
        {acl3, acl4}, {acl1}, set(), set()]
    assert set(acls(ANY_FILTER)) == {acl2}


def test_filters_with_unknown_elements_match_nothing(az: Harness, resource: ResourcePattern
                                                     ) -> None:
    az.add({allow_read}, resource)
    unknown = AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN, None,
                                                     PatternType.ANY))
    assert az.authorizer.acls(unknown) == []
    [result] = az.store.delete_acls([unknown])
    assert result.error is not None and "Unknown patternFilter" in str(result.error)
    assert az.entries(resource) == {allow_read}


# ---- authorizeByResourceType (BaseAuthorizerTest) ---------------------------------------------


def test_by_resource_type_multiple_add_and_remove(az: Harness) -> None:
    user1, host1 = user("user1"), "192.168.1.1"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    deny = AccessControlEntry(str(user1), host1, READ, DENY)
    allow = AccessControlEntry(str(user1), host1, READ, ALLOW)
    for _ in range(3):
        assert not az.by_type(user1, host1, READ, TOPIC)
        az.add({allow}, resource1)
        assert az.by_type(user1, host1, READ, TOPIC)
        for _ in range(3):
            az.add({deny}, resource1)
            assert not az.by_type(user1, host1, READ, TOPIC)
            az.remove({deny}, resource1)
            az.add({allow}, resource1)
            assert az.by_type(user1, host1, READ, TOPIC)
        az.remove({allow}, resource1)
        assert not az.by_type(user1, host1, READ, TOPIC)


def test_by_resource_type_unrelated_deny_wont_dominate_allow(az: Harness) -> None:
    user1, user2 = "User:user1", "User:user2"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    resource3 = ResourcePattern(GROUP, "s", PREFIXED)
    az.add({AccessControlEntry(user1, host1, READ, DENY),
            AccessControlEntry(user2, host1, READ, DENY),
            AccessControlEntry(user1, host2, WRITE, DENY),
            AccessControlEntry(user2, host2, READ, DENY),
            AccessControlEntry(user1, host2, READ, ALLOW)}, resource1)
    az.add({AccessControlEntry(user1, host2, READ, DENY)}, resource2)
    az.add({AccessControlEntry(user1, host2, READ, DENY)}, resource3)
    u1 = user("user1")
    assert not az.by_type(u1, host1, READ, TOPIC)
    assert not az.by_type(u1, host1, READ, GROUP)
    assert not az.by_type(u1, host1, READ, TXN)
    assert not az.by_type(u1, host1, READ, CLUSTER)
    assert az.by_type(u1, host2, READ, TOPIC)


def test_by_resource_type_deny_takes_precedence(az: Harness) -> None:
    u1, host1 = user("user1"), "192.168.1.1"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    az.add({AccessControlEntry(str(u1), host1, WRITE, ALLOW)}, resource1)
    assert az.by_type(u1, host1, WRITE, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, WRITE, DENY)}, resource1)
    assert not az.by_type(u1, host1, WRITE, TOPIC)


def test_by_resource_type_prefixed_deny_dominates(az: Harness) -> None:
    u1, host1 = user("user1"), "192.168.1.1"
    allow = AccessControlEntry(str(u1), host1, READ, ALLOW)
    deny = AccessControlEntry(str(u1), host1, READ, DENY)

    def group(name: str) -> ResourcePattern:
        return ResourcePattern(GROUP, name, PREFIXED)

    az.add({allow}, group("abcde"))
    assert az.by_type(u1, host1, READ, GROUP)
    az.add({deny}, group("abcd"))
    assert not az.by_type(u1, host1, READ, GROUP)
    az.add({allow}, group("abc"))
    assert az.by_type(u1, host1, READ, GROUP)
    az.add({deny}, group("a"))
    assert not az.by_type(u1, host1, READ, GROUP)
    az.add({allow}, group("ab"))
    assert not az.by_type(u1, host1, READ, GROUP)


def test_by_resource_type_wildcard_deny_dominates(az: Harness) -> None:
    u1, host1 = user("user1"), "192.168.1.1"
    allow = AccessControlEntry(str(u1), host1, WRITE, ALLOW)
    deny = AccessControlEntry(str(u1), host1, WRITE, DENY)
    az.add({allow}, ResourcePattern(GROUP, "hello", PREFIXED))
    assert az.by_type(u1, host1, WRITE, GROUP)
    az.add({deny}, ResourcePattern(GROUP, "*", LITERAL))
    assert not az.by_type(u1, host1, WRITE, GROUP)
    az.add({allow}, ResourcePattern(GROUP, "*", LITERAL))
    assert not az.by_type(u1, host1, WRITE, GROUP)
    az.add({allow}, ResourcePattern(GROUP, "aloha", LITERAL))
    assert not az.by_type(u1, host1, WRITE, GROUP)


def test_by_resource_type_with_all_operation(az: Harness) -> None:
    u1, host1 = user("user1"), "192.168.1.1"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    assert not az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, WRITE, DENY),
            AccessControlEntry(str(u1), host1, ALL, ALLOW)}, resource1)
    assert az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, ALL, DENY)}, resource1)
    assert not az.by_type(u1, host1, READ, TOPIC)


def test_by_resource_type_with_all_hosts(az: Harness) -> None:
    u1, host1, host2 = user("user1"), "192.168.1.1", "192.168.1.2"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    assert not az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, READ, ALLOW)}, resource1)
    assert az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), "*", READ, DENY)}, resource1)
    assert not az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, READ, DENY)}, resource2)
    assert not az.by_type(u1, host1, READ, TOPIC)
    assert not az.by_type(u1, host2, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), "*", READ, ALLOW)}, resource2)
    assert az.by_type(u1, host2, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), "*", READ, DENY)}, resource2)
    assert not az.by_type(u1, host2, READ, TOPIC)


def test_by_resource_type_with_all_principals(az: Harness) -> None:
    u1, u2, host1 = user("user1"), user("user2"), "192.168.1.1"
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    assert not az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, READ, ALLOW)}, resource1)
    assert az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, host1, READ, DENY)}, resource1)
    assert not az.by_type(u1, host1, READ, TOPIC)
    az.add({AccessControlEntry(str(u1), host1, READ, DENY)}, resource2)
    assert not az.by_type(u1, host1, READ, TOPIC)
    assert not az.by_type(u2, host1, READ, TOPIC)
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, host1, READ, ALLOW)}, resource2)
    assert az.by_type(u2, host1, READ, TOPIC)
    az.add({AccessControlEntry(WILDCARD_PRINCIPAL, host1, READ, DENY)}, resource2)
    assert not az.by_type(u2, host1, READ, TOPIC)


def test_by_resource_type_super_user(az: Harness) -> None:
    deny_all = AccessControlEntry(WILDCARD_PRINCIPAL, "*", ALL, DENY)
    for t in (TOPIC, CLUSTER, GROUP, TXN):
        az.add({deny_all}, ResourcePattern(t, "*" if t != CLUSTER else "kafka-cluster"))
    for t in (TOPIC, CLUSTER, GROUP, TXN):
        assert az.by_type(user("superuser1"), "192.0.4.4", READ, t)
        assert not az.by_type(ALICE, "192.0.4.4", READ, t)


def test_by_resource_type_no_acl_found_override(tmp_path: Path) -> None:
    h = Harness(tmp_path, **{"allow.everyone.if.no.acl.found": "true"})
    assert h.by_type(ALICE, HOST, READ, TOPIC)
    assert h.by_type(ALICE, HOST, WRITE, TOPIC)
    # but a wildcard DENY still wins
    h.add({AccessControlEntry(str(ALICE), "*", WRITE, DENY)}, wildcard_resource)
    assert not h.by_type(ALICE, HOST, WRITE, TOPIC)


def test_by_resource_type_implies_nothing_and_refuses_filters(az: Harness) -> None:
    az.add({AccessControlEntry(str(ALICE), "*", WRITE, ALLOW)}, ResourcePattern(TOPIC, "t"))
    assert az.by_type(ALICE, HOST, WRITE, TOPIC)  # InitProducerId's "WRITE on any topic"
    assert not az.by_type(ALICE, HOST, DESCRIBE, TOPIC)  # no implied operations here
    for op, rt in ((READ, ResourceType.ANY), (READ, ResourceType.UNKNOWN),
                   (Op.ANY, TOPIC), (Op.UNKNOWN, TOPIC)):
        with pytest.raises(ValueError):
            az.by_type(ALICE, HOST, op, rt)


# ---- batches, bitfields, hosts ------------------------------------------------------------------


def test_authorize_actions_and_filter_authorized(az: Harness) -> None:
    az.add({AccessControlEntry(str(ALICE), "*", READ, ALLOW)},
           ResourcePattern(TOPIC, "a-", PREFIXED))
    authorizer = az.authorizer
    assert authorizer.authorize_actions(ALICE, HOST, [
        Action(READ, TOPIC, "a-1"), Action(READ, TOPIC, "b-1"), Action(DESCRIBE, TOPIC, "a-2"),
        Action(WRITE, TOPIC, "a-1")]) == [True, False, True, False]
    assert authorizer.filter_authorized(ALICE, HOST, READ, TOPIC,
                                        ["a-1", "b", "a-1", "a-2"]) == {"a-1", "a-2"}


def test_authorized_operations_bitfield(az: Harness, resource: ResourcePattern) -> None:
    authorizer = az.authorizer
    assert authorizer.authorized_operations(ALICE, HOST, TOPIC, resource.name) == 0
    az.add({AccessControlEntry(str(ALICE), "*", READ, ALLOW),
            AccessControlEntry(str(ALICE), "*", Op.ALTER_CONFIGS, ALLOW)}, resource)
    bits = authorizer.authorized_operations(ALICE, HOST, TOPIC, resource.name)
    assert bits == (1 << READ) | (1 << DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (
        1 << Op.DESCRIBE_CONFIGS)
    # ALL: every supported operation, never the ALL bit itself
    az.add({AccessControlEntry(str(ALICE), "*", ALL, ALLOW)}, cluster_resource)
    assert authorizer.authorized_operations(ALICE, HOST, CLUSTER, "kafka-cluster") == sum(
        1 << op for op in supported_operations(CLUSTER))
    assert authorizer.authorized_operations(user("superuser1"), HOST, GROUP, "g") == sum(
        1 << op for op in supported_operations(GROUP))


def test_ipv6_hosts_match_in_either_form(az: Harness, resource: ResourcePattern) -> None:
    az.add({AccessControlEntry(str(ALICE), "0:0:0:0:0:0:0:1", READ, ALLOW),  # Kafka's form
            AccessControlEntry(str(ALICE), "fe80::1", WRITE, ALLOW),  # another form
            AccessControlEntry(str(ALICE), "10.0.0.7", DESCRIBE, DENY)}, resource)
    assert az.allowed(ALICE, "::1", READ, resource)
    assert az.allowed(ALICE, "fe80::1", WRITE, resource)
    assert not az.allowed(ALICE, "fe80::2", WRITE, resource)
    az.add({AccessControlEntry(str(ALICE), "*", ALL, ALLOW)}, resource)
    assert not az.allowed(ALICE, "::ffff:10.0.0.7", DESCRIBE, resource)  # IPv4-mapped


def test_super_users_config() -> None:
    assert parse_super_users("User:a; User:b;") == {user("a"), user("b")}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError, match=r"super\.users"):
        parse_super_users("User:a;;User:b")
    with pytest.raises(ValueError, match=r"super\.users"):
        parse_super_users("alice")
    with pytest.raises(ValueError, match="true or false"):
        AclAuthorizer.from_configs({"allow.everyone.if.no.acl.found": "yes"})
    az = AclAuthorizer.from_configs({"super.users": "User:CN=admin,O=x"})
    assert az.authorize(KafkaPrincipal("User", "CN=admin,O=x"), HOST, READ, TOPIC, "t")


# ---- the audit log -------------------------------------------------------------------------------


def test_decisions_are_logged_in_kafkas_words(az: Harness, caplog: pytest.LogCaptureFixture
                                              ) -> None:
    orders = ResourcePattern(TOPIC, "orders", LITERAL)
    az.add({AccessControlEntry(str(ALICE), "*", READ, DENY),
            AccessControlEntry(str(ALICE), "*", WRITE, ALLOW)}, orders)
    caplog.set_level(TRACE, logger="kafka.authorizer.logger")
    authorizer = az.authorizer
    authorizer.authorize(ALICE, "127.0.0.1", READ, TOPIC, "orders", request=ApiKey.FETCH)
    authorizer.authorize(ALICE, "127.0.0.1", WRITE, TOPIC, "orders", request=ApiKey.PRODUCE,
                         ref_count=3)
    authorizer.authorize(ALICE, "127.0.0.1", READ, TOPIC, "other", request="Metadata",
                         log_if_denied=False)
    authorizer.authorize(user("superuser1"), "127.0.0.1", Op.DELETE, TOPIC, "orders",
                         request=ApiKey.DELETE_TOPICS, log_if_allowed=False)
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records
               if r.name == "kafka.authorizer.logger"]
    assert records == [
        ("kafka.authorizer.logger", logging.INFO,
         "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource "
         "= Topic:LITERAL:orders for request = Fetch with resourceRefCount = 1 based on rule "
         "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, "
         "patternType=LITERAL, principal=User:alice, host=*, operation=READ, "
         "permissionType=DENY))"),
        ("kafka.authorizer.logger", logging.DEBUG,
         "Principal = User:alice is Allowed operation = WRITE from host = 127.0.0.1 on "
         "resource = Topic:LITERAL:orders for request = Produce with resourceRefCount = 3 "
         "based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, "
         "patternType=LITERAL, principal=User:alice, host=*, operation=WRITE, "
         "permissionType=ALLOW))"),
        ("kafka.authorizer.logger", TRACE,
         "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource "
         "= Topic:LITERAL:other for request = Metadata with resourceRefCount = 1 based on "
         "rule DefaultDeny"),
        ("kafka.authorizer.logger", TRACE,
         "Principal = User:superuser1 is Allowed operation = DELETE from host = 127.0.0.1 on "
         "resource = Topic:LITERAL:orders for request = DeleteTopics with resourceRefCount = "
         "1 based on rule SuperUser"),
    ]


def test_nothing_is_formatted_when_not_logged(az: Harness, caplog: pytest.LogCaptureFixture
                                              ) -> None:
    caplog.set_level(logging.WARNING, logger="kafka.authorizer.logger")
    assert not az.authorizer.authorize(ALICE, HOST, READ, TOPIC, "t")
    assert not [r for r in caplog.records if r.name == "kafka.authorizer.logger"]


# ---- the cache ---------------------------------------------------------------------------------


def test_lookups_touch_only_the_patterns_that_apply() -> None:
    """authorize() costs dict lookups: the literal name, the wildcard, and one per prefix
    length in use, whatever the number of ACLs."""
    authorizer = AclAuthorizer()
    ace = AccessControlEntry(str(ALICE), "*", READ, ALLOW)
    acls = {ResourcePattern(TOPIC, f"t-{i}", LITERAL): frozenset({ace}) for i in range(2000)}
    acls |= {ResourcePattern(TOPIC, f"p-{i}-", PREFIXED): frozenset({ace}) for i in range(2000)}
    acls[ResourcePattern(TOPIC, "orders-eu-west", PREFIXED)] = frozenset({ace})
    acls[ResourcePattern(GROUP, "o", PREFIXED)] = frozenset({ace})
    authorizer.apply(AclChanges(acls, full=True))
    cache = authorizer._cache
    # p-0- .. p-1999- and orders-eu-west: five lengths, so at most five prefix lookups
    assert cache.prefix_lengths[TOPIC] == (4, 5, 6, 7, 14)
    found = authorizer._matching(cache, TOPIC, "orders-eu-west.1")
    assert [a.pattern for a in found] == [ResourcePattern(TOPIC, "orders-eu-west", PREFIXED)]
    assert authorizer.authorize(ALICE, HOST, READ, TOPIC, "p-17-x")
    assert not authorizer.authorize(ALICE, HOST, READ, TOPIC, "p-17")
    assert authorizer.authorize(ALICE, HOST, READ, TOPIC, "t-17")
    assert not authorizer.authorize(ALICE, HOST, READ, TOPIC, "t-17-x")
    # removing the only pattern of a length drops the length
    authorizer.apply(AclChanges({ResourcePattern(TOPIC, "orders-eu-west", PREFIXED): frozenset()}))
    assert cache.prefix_lengths[TOPIC] == (4, 5, 6, 7)
    assert not authorizer.authorize(ALICE, HOST, READ, TOPIC, "orders-eu-west.1")


def test_incremental_changes_keep_every_index_right() -> None:
    authorizer = AclAuthorizer()
    pattern = ResourcePattern(TOPIC, "pre", PREFIXED)
    allow = AccessControlEntry(str(ALICE), "*", WRITE, ALLOW)
    authorizer.apply(AclChanges({pattern: frozenset({allow})}))
    assert authorizer.authorize(ALICE, HOST, WRITE, TOPIC, "prefix")
    assert authorizer.authorize_by_resource_type(ALICE, HOST, WRITE, TOPIC)
    authorizer.apply(AclChanges({pattern: frozenset()}))
    assert not authorizer.authorize(ALICE, HOST, WRITE, TOPIC, "prefix")
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, WRITE, TOPIC)
    assert authorizer._cache.prefix_lengths[TOPIC] == ()
    assert authorizer._cache.names == {} and authorizer.acl_count == 0
    # a full load replaces everything
    authorizer.apply(AclChanges({pattern: frozenset({allow})}))
    authorizer.apply(AclChanges({ResourcePattern(GROUP, "g"): frozenset({allow})}, full=True))
    assert authorizer.acls(ANY_FILTER) == [AclBinding(ResourcePattern(GROUP, "g"), allow)]


def test_changes_from_another_thread_while_authorizing() -> None:
    """apply() is called on the store's threads while the loop authorizes."""
    authorizer = AclAuthorizer()
    allow = AccessControlEntry(str(ALICE), "*", READ, ALLOW)
    patterns = [ResourcePattern(TOPIC, f"t{i}", PREFIXED) for i in range(50)]
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for round_ in range(200):
                for p in patterns:
                    authorizer.apply(AclChanges({p: frozenset({allow}) if round_ % 2 else
                                                 frozenset()}))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        authorizer.authorize(ALICE, HOST, READ, TOPIC, "t17-x")
        authorizer.authorize_by_resource_type(ALICE, HOST, READ, TOPIC)
        authorizer.acls(ANY_FILTER)
    thread.join(timeout=30)
    assert not errors
    assert authorizer.authorize(ALICE, HOST, READ, TOPIC, "t17-x")  # round 199 added them
    assert len(authorizer.acls(ANY_FILTER)) == 50


def test_every_operation_is_decidable(az: Harness, resource: ResourcePattern) -> None:
    az.add({AccessControlEntry(str(ALICE), "*", ALL, ALLOW)}, resource)
    for op in ACL_OPERATIONS:
        assert az.allowed(ALICE, HOST, op, resource)
