"""ACL stores without ZooKeeper: Kafka's znode formats (paths and bytes, as Kafka 3.9's
ZkData and AclEntry write them) and the embedded single-node store. The ZooKeeper store
itself is tested against a real ZooKeeper in tests/cluster/test_acl_store_zk.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.security import acl_store
from odradek.security.acl import (
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
)
from odradek.security.acl_store import (
    AclStoreError,
    EmbeddedAclStore,
    acl_paths,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    resource_path,
)

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE = AclOperation.READ, AclOperation.WRITE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

alice_read = AccessControlEntry("User:alice", "*", READ, ALLOW)
bob_write = AccessControlEntry("User:bob", "10.0.0.1", WRITE, DENY)
orders = ResourcePattern(TOPIC, "orders", LITERAL)
orders_prefix = ResourcePattern(TOPIC, "orders-", PREFIXED)


# ---- znodes -----------------------------------------------------------------------------------


def test_paths_are_kafkas() -> None:
    assert resource_path(orders) == "/kafka-acl/Topic/orders"
    assert resource_path(orders_prefix) == "/kafka-acl-extended/prefixed/Topic/orders-"
    assert resource_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", LITERAL)) == (
        "/kafka-acl/TransactionalId/tx")
    assert resource_path(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster")) == (
        "/kafka-acl/Cluster/kafka-cluster")
    # KafkaZkClient.createAclPaths
    types = ["Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"]
    assert acl_paths() == [
        "/kafka-acl", *(f"/kafka-acl/{t}" for t in types),
        "/kafka-acl-extended/prefixed", *(f"/kafka-acl-extended/prefixed/{t}" for t in types),
        "/kafka-acl-changes", "/kafka-acl-extended-changes"]


def test_acl_json_is_kafka_39s_bytes() -> None:
    # AclEntry.toJsonCompatibleMap and toMap are java.util.HashMaps in Kafka 3.8+: Jackson
    # writes their keys in the HashMap's bucket order.
    assert encode_acls([alice_read]) == (
        b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",'
        b'"operation":"Read"}],"version":1}')
    assert encode_acls([AccessControlEntry("User:x", "*", AclOperation.IDEMPOTENT_WRITE,
                                           DENY)]) == (
        b'{"acls":[{"principal":"User:x","permissionType":"Deny","host":"*",'
        b'"operation":"IdempotentWrite"}],"version":1}')
    assert encode_acls([]) == b'{"acls":[],"version":1}'


def test_acl_json_hash_map_order_is_javas() -> None:
    """The key order above, derived: Java's String.hashCode spread into 16 buckets."""
    def bucket(key: str) -> int:
        h = 0
        for c in key:
            h = (31 * h + ord(c)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & 15

    entry_keys = ["principal", "permissionType", "operation", "host"]  # insertion order
    assert sorted(entry_keys, key=lambda k: (bucket(k), entry_keys.index(k))) == list(
        json.loads(encode_acls([alice_read]))["acls"][0])
    assert sorted(["version", "acls"], key=bucket) == list(json.loads(encode_acls([])))


def test_acl_json_of_any_kafka_version_decodes() -> None:
    old = (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
           b'"operation":"Read","host":"*"},{"principal":"User:bob","permissionType":"DENY",'
           b'"operation":"WRITE","host":"10.0.0.1"}]}')  # upper case: SecurityUtils reads it
    assert decode_acls(old) == {alice_read, bob_write}
    assert decode_acls(encode_acls([alice_read, bob_write])) == {alice_read, bob_write}
    assert decode_acls(b"") == frozenset() and decode_acls(None) == frozenset()
    with pytest.raises(ValueError, match="version"):
        decode_acls(b'{"version":2,"acls":[]}')


def test_malformed_entries_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    data = (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow",'
            b'"operation":"Read","host":"*"},{"host":"*"},{"principal":"User:alice",'
            b'"permissionType":"Allow","operation":"Read","host":"*"}]}')
    assert decode_acls(data, "/kafka-acl/Topic/t") == {alice_read}
    assert caplog.text.count("ignoring a malformed ACL in /kafka-acl/Topic/t") == 2


def test_change_notifications_are_kafkas() -> None:
    # LiteralAclChangeStore: ResourceType.toString (the enum name), a colon, the name
    assert encode_change(orders) == ("/kafka-acl-changes/acl_changes_", b"TOPIC:orders")
    # ExtendedAclChangeStore: the ExtendedAclChangeEvent's JSON (its constructor's order)
    assert encode_change(orders_prefix) == (
        "/kafka-acl-extended-changes/acl_changes_",
        b'{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}')
    for pattern in (orders, orders_prefix,
                    ResourcePattern(ResourceType.TRANSACTIONAL_ID, "t:x", LITERAL)):
        path, data = encode_change(pattern)
        assert decode_change(path.rsplit("/", 1)[0], data) == pattern


def test_change_notifications_decode_as_kafka_does() -> None:
    literal = "/kafka-acl-changes"
    # LiteralAclStoreTest.shouldDecodeResourceUsingTwoPartLogic
    name = "PREFIXED:this, including the PREFIXED part, is a valid two part group name"
    assert decode_change(literal, f"GROUP:{name}".encode()) == ResourcePattern(GROUP, name)
    assert decode_change(literal, b"Topic:orders") == orders  # older Kafka's spelling
    for bad in (b"orders", b"NOPE:orders"):
        with pytest.raises(ValueError):
            decode_change(literal, bad)
    with pytest.raises(ValueError, match="unsupported version"):
        decode_change("/kafka-acl-extended-changes",
                      b'{"version":2,"resourceType":"TOPIC","name":"o","patternType":"PREFIXED"}')


# ---- the embedded store ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.changes: list[AclChanges] = []

    def __call__(self, changes: AclChanges) -> None:
        self.changes.append(changes)


def test_embedded_store_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    store = EmbeddedAclStore(path)
    heard = Recorder()
    store.start(heard)
    assert heard.changes == [AclChanges({}, full=True)]
    assert not path.exists()  # nothing written until there is something to write
    bindings = [AclBinding(orders, alice_read), AclBinding(orders, bob_write),
                AclBinding(orders_prefix, alice_read), AclBinding(orders, alice_read)]
    assert store.create_acls(bindings) == [None] * 4
    expected = {orders: frozenset({alice_read, bob_write}),
                orders_prefix: frozenset({alice_read})}
    assert store.load_all() == expected
    assert heard.changes[1:] == [AclChanges(expected)]  # one call for the request
    assert not list(tmp_path.glob("*.tmp"))

    reopened = EmbeddedAclStore(path)
    assert reopened.load_all() == expected
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["resources"][0] == {
        "resourceType": "Topic", "patternType": "LITERAL", "name": "orders",
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "host": "*",
                  "operation": "Read"},
                 {"principal": "User:bob", "permissionType": "Deny", "host": "10.0.0.1",
                  "operation": "Write"}]}

    # creating what exists changes nothing and tells nobody
    assert store.create_acls([AclBinding(orders, alice_read)]) == [None]
    assert len(heard.changes) == 2


def test_embedded_store_delete(tmp_path: Path) -> None:
    store = EmbeddedAclStore(tmp_path / "acls.json")
    heard = Recorder()
    store.start(heard)
    store.create_acls([AclBinding(orders, alice_read), AclBinding(orders, bob_write),
                       AclBinding(orders_prefix, alice_read)])
    by_alice = AclBindingFilter(ResourcePatternFilter(),
                                AccessControlEntryFilter(principal="User:alice"))
    literal_only = AclBindingFilter(ResourcePatternFilter(TOPIC, None, LITERAL))
    results = store.delete_acls([by_alice, literal_only])
    assert [r.error for r in results] == [None, None]
    # orders' alice ACL matched both: reported under the first filter only
    assert sorted(results[0].deleted, key=str) == sorted(
        [(AclBinding(orders, alice_read), None), (AclBinding(orders_prefix, alice_read), None)],
        key=str)
    assert list(results[1].deleted) == [(AclBinding(orders, bob_write), None)]
    assert store.load_all() == {}
    assert heard.changes[-1] == AclChanges({orders: frozenset(), orders_prefix: frozenset()})
    assert json.loads((tmp_path / "acls.json").read_text())["resources"] == []


def test_embedded_store_refuses_invalid_bindings(tmp_path: Path) -> None:
    store = EmbeddedAclStore(tmp_path / "acls.json")
    cluster = ResourcePattern(ResourceType.CLUSTER, "nope")
    results = store.create_acls([AclBinding(cluster, alice_read), AclBinding(orders, alice_read),
                                 AclBinding(ResourcePattern(TOPIC, "a/b"), alice_read)])
    assert [r is None for r in results] == [False, True, False]
    assert results[0] is not None and results[0].error_code == ErrorCode.INVALID_REQUEST
    assert store.load_all() == {orders: frozenset({alice_read})}
    [result] = store.delete_acls([AclBindingFilter(
        ResourcePatternFilter(TOPIC, None, LITERAL),
        AccessControlEntryFilter(operation=AclOperation.UNKNOWN))])
    assert result.error is not None and "Unknown entryFilter" in str(result.error)
    assert result.error.error_code == ErrorCode.INVALID_REQUEST


def test_embedded_store_write_failure_changes_nothing(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = EmbeddedAclStore(tmp_path / "acls.json")
    heard = Recorder()
    store.start(heard)

    def broken(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(acl_store, "write_durably", broken)
    [error] = store.create_acls([AclBinding(orders, alice_read)])
    assert isinstance(error, AclStoreError) and "No space left" in str(error)
    assert error.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert store.load_all() == {}
    assert len(heard.changes) == 1  # the initial load only


def test_embedded_store_refuses_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    path.write_text("{not json")
    with pytest.raises(AclStoreError, match="cannot read the ACLs"):
        EmbeddedAclStore(path)
    path.write_text('{"version": 7}')
    with pytest.raises(AclStoreError, match="unknown ACL file format"):
        EmbeddedAclStore(path)


def test_a_failing_listener_does_not_fail_the_write(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = EmbeddedAclStore(tmp_path / "acls.json")
    calls = []

    def listener(changes: AclChanges) -> None:
        calls.append(changes)
        raise RuntimeError("boom")

    store.start(listener)
    assert store.create_acls([AclBinding(orders, alice_read)]) == [None]
    assert len(calls) == 2 and "an ACL change listener failed" in caplog.text
    assert EmbeddedAclStore(tmp_path / "acls.json").load_all() == {
        orders: frozenset({alice_read})}
