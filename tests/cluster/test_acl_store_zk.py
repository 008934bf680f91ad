"""ZkAclStore against a real ZooKeeper: Kafka's znodes byte for byte, two brokers (two
sessions) following each other's changes through the notifications, conditional updates
under contention, reading what a Kafka broker wrote, and the notifications' purge."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from support.wait import wait_until
from zk_helpers import WAIT

from odradek.broker.acl_apis import AclApis
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import create_acls_request, describe_acls_request
from odradek.protocol.messages.request_header import RequestHeader
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
from odradek.security.acl_store import AclStoreError, ZkAclStore, encode_acls
from odradek.security.authorizer import AclAuthorizer
from odradek.security.principal import KafkaPrincipal
from odradek.server.network import RequestContext

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE = AclOperation.READ, AclOperation.WRITE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = KafkaPrincipal.user("alice")

alice_read = AccessControlEntry("User:alice", "*", READ, ALLOW)
bob_write = AccessControlEntry("User:bob", "10.0.0.1", WRITE, DENY)
orders = ResourcePattern(TOPIC, "orders", LITERAL)
orders_prefix = ResourcePattern(TOPIC, "orders-", PREFIXED)

Clients = Callable[[], KazooClient]


@pytest.fixture
def new_client(raw: KazooClient, connect: str) -> Iterator[Clients]:
    """Kazoo clients in the test's chroot (which `raw` made), one session each."""
    clients: list[KazooClient] = []

    def make() -> KazooClient:
        client = KazooClient(hosts=connect, timeout=6.0)
        client.start(timeout=WAIT)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


class Broker:
    """One broker's ACL side: its own ZooKeeper session, store and authorizer."""

    def __init__(self, client: KazooClient, **options: Any) -> None:
        self.authorizer = AclAuthorizer()
        options.setdefault("request_timeout_ms", int(WAIT * 1000))
        self.store = ZkAclStore(client, **options)
        self.store.start(self.authorizer.apply)

    def can(self, operation: AclOperation, topic: str, principal: KafkaPrincipal = ALICE,
            host: str = "10.0.0.9") -> bool:
        return self.authorizer.authorize(principal, host, operation, TOPIC, topic)


@pytest.fixture
def brokers(new_client: Clients) -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(**options: Any) -> Broker:
        broker = Broker(new_client(), **options)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.store.close()


def children(raw: KazooClient, path: str) -> list[str]:
    return sorted(raw.get_children(path))


# ---- the znodes ---------------------------------------------------------------------------------


def test_znodes_are_kafkas(brokers: Callable[..., Broker], raw: KazooClient) -> None:
    broker = brokers()
    for path in ("/kafka-acl/Topic", "/kafka-acl/TransactionalId", "/kafka-acl/User",
                 "/kafka-acl-extended/prefixed/DelegationToken", "/kafka-acl-changes",
                 "/kafka-acl-extended-changes"):
        assert raw.exists(path), path
    assert broker.store.create_acls([AclBinding(orders, alice_read),
                                     AclBinding(orders_prefix, bob_write)]) == [None, None]

    assert raw.get("/kafka-acl/Topic/orders")[0] == (
        b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",'
        b'"operation":"Read"}],"version":1}')
    assert raw.get("/kafka-acl-extended/prefixed/Topic/orders-")[0] == (
        b'{"acls":[{"principal":"User:bob","permissionType":"Deny","host":"10.0.0.1",'
        b'"operation":"Write"}],"version":1}')
    assert children(raw, "/kafka-acl-changes") == ["acl_changes_0000000000"]
    assert raw.get("/kafka-acl-changes/acl_changes_0000000000")[0] == b"TOPIC:orders"
    assert children(raw, "/kafka-acl-extended-changes") == ["acl_changes_0000000000"]
    assert raw.get("/kafka-acl-extended-changes/acl_changes_0000000000")[0] == (
        b'{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}')

    # the last ACL gone, the resource's znode goes too (and one more notification)
    [result] = broker.store.delete_acls([AclBinding(orders, alice_read).to_filter()])
    assert list(result.deleted) == [(AclBinding(orders, alice_read), None)]
    assert not raw.exists("/kafka-acl/Topic/orders")
    assert len(children(raw, "/kafka-acl-changes")) == 2
    assert broker.store.load_all() == {orders_prefix: frozenset({bob_write})}


def test_two_brokers_follow_each_other(brokers: Callable[..., Broker]) -> None:
    one, two = brokers(), brokers()
    assert not two.can(READ, "orders-eu")
    assert one.store.create_acls([AclBinding(orders_prefix, alice_read)]) == [None]
    assert one.can(READ, "orders-eu")  # the writer's own cache at once
    wait_until(lambda: two.can(READ, "orders-eu"), WAIT, "broker 2 hearing of the ACL")

    assert two.store.create_acls([AclBinding(orders, alice_read)]) == [None]
    wait_until(lambda: one.can(READ, "orders"), WAIT, "broker 1 hearing of broker 2's ACL")

    [result] = two.store.delete_acls([AclBindingFilter(
        ResourcePatternFilter(TOPIC, "orders-eu", PatternType.MATCH))])
    assert {b for b, _ in result.deleted} == {AclBinding(orders_prefix, alice_read)}
    wait_until(lambda: not one.can(READ, "orders-eu"), WAIT, "broker 1 hearing of the delete")
    assert one.can(READ, "orders")
    assert one.authorizer.acls() == two.authorizer.acls() == [AclBinding(orders, alice_read)]


def test_a_broker_started_later_loads_everything(brokers: Callable[..., Broker]) -> None:
    one = brokers()
    one.store.create_acls([AclBinding(orders, alice_read), AclBinding(orders_prefix, bob_write),
                           AclBinding(ResourcePattern(GROUP, "*"), alice_read)])
    late = brokers()
    assert set(late.authorizer.acls()) == set(one.authorizer.acls())
    assert len(late.authorizer.acls()) == 3


def test_concurrent_adds_lose_nothing(brokers: Callable[..., Broker], raw: KazooClient) -> None:
    """AuthorizerTest.testDistributedConcurrentModificationOfResourceAcls, harder: two
    brokers adding to one resource at once, many times."""
    one = brokers(max_update_retries=1000, retry_backoff_ms=1)
    two = brokers(max_update_retries=1000, retry_backoff_ms=1)
    per_broker = 15
    errors: list[Any] = []

    def add(broker: Broker, first: int) -> None:
        for i in range(first, first + per_broker):
            entry = AccessControlEntry(f"User:{i}", "*", READ, ALLOW)
            errors.extend(r for r in broker.store.create_acls([AclBinding(orders, entry)]) if r)

    threads = [threading.Thread(target=add, args=(one, 0)),
               threading.Thread(target=add, args=(two, per_broker))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=WAIT)
    assert not errors
    expected = {AccessControlEntry(f"User:{i}", "*", READ, ALLOW) for i in range(2 * per_broker)}
    assert one.store.load_all() == {orders: frozenset(expected)}
    # one notification per change that happened, none for an attempt that lost
    assert len(children(raw, "/kafka-acl-changes")) == 2 * per_broker
    for broker in (one, two):
        wait_until(lambda b=broker: {x.entry for x in b.authorizer.acls()} == expected,  # type: ignore[misc]
                   WAIT, "every broker's cache to hold every ACL")


def test_a_conflicting_write_is_retried_on_fresh_data(new_client: Clients,
                                                      raw: KazooClient) -> None:
    """Another broker's write between our read and our write: our transaction fails on the
    znode's version, changes nothing, and is done again over what the other wrote."""
    store = ZkAclStore(new_client(), retry_backoff_ms=1)
    store.ensure_paths()
    raw.create("/kafka-acl/Topic/orders", encode_acls([bob_write]))
    read_versioned = store._get_versioned
    calls = []

    def racing_read(pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        result = read_versioned(pattern)
        calls.append(result)
        if len(calls) == 1:  # a Kafka broker adds its ACL meanwhile
            other = AccessControlEntry("User:carol", "*", READ, ALLOW)
            raw.set("/kafka-acl/Topic/orders", encode_acls([bob_write, other]))
        return result

    store._get_versioned = racing_read  # type: ignore[method-assign]
    assert store.create_acls([AclBinding(orders, alice_read)]) == [None]
    assert [version for _, version in calls] == [0, 1]
    assert store.load_all()[orders] == {
        bob_write, alice_read, AccessControlEntry("User:carol", "*", READ, ALLOW)}
    assert children(raw, "/kafka-acl-changes") == ["acl_changes_0000000000"]
    store.close()


def test_too_many_conflicts_fail_the_creation(new_client: Clients, raw: KazooClient) -> None:
    store = ZkAclStore(new_client(), max_update_retries=2, retry_backoff_ms=1)
    store.ensure_paths()
    raw.create("/kafka-acl/Topic/orders", encode_acls([bob_write]))
    read_versioned = store._get_versioned

    def always_raced(pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        result = read_versioned(pattern)
        raw.set("/kafka-acl/Topic/orders", encode_acls([bob_write]))  # a new version
        return result

    store._get_versioned = always_raced  # type: ignore[method-assign]
    errors = store.create_acls([AclBinding(orders, alice_read), AclBinding(orders, bob_write),
                                AclBinding(orders_prefix, alice_read)])
    assert isinstance(errors[0], AclStoreError) and errors[0] is errors[1]
    assert errors[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "after trying a maximum of 2 times" in str(errors[0])
    assert errors[2] is None  # another resource, another outcome
    assert store.load_all() == {orders: frozenset({bob_write}),
                                orders_prefix: frozenset({alice_read})}
    store.close()


def test_delete_finds_acls_this_broker_has_not_heard_of(new_client: Clients) -> None:
    """Kafka's MATCH deletes only see its cache; ours read ZooKeeper."""
    writer = ZkAclStore(new_client())
    deleter = ZkAclStore(new_client())  # never started: hears of nothing
    writer.create_acls([AclBinding(orders, alice_read), AclBinding(orders_prefix, bob_write),
                        AclBinding(ResourcePattern(TOPIC, "*"), alice_read),
                        AclBinding(ResourcePattern(GROUP, "orders"), alice_read)])
    match = AclBindingFilter(ResourcePatternFilter(TOPIC, "orders-eu", PatternType.MATCH))
    by_name = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "orders",
                                                     PatternType.ANY))
    results = deleter.delete_acls([match, by_name])
    assert {b for b, _ in results[0].deleted} == {
        AclBinding(orders_prefix, bob_write), AclBinding(ResourcePattern(TOPIC, "*"), alice_read)}
    assert {b for b, _ in results[1].deleted} == {
        AclBinding(orders, alice_read), AclBinding(ResourcePattern(GROUP, "orders"), alice_read)}
    assert writer.load_all() == {}


# ---- what Kafka wrote ---------------------------------------------------------------------------


def test_reads_and_follows_what_kafka_wrote(brokers: Callable[..., Broker],
                                            raw: KazooClient) -> None:
    # An older Kafka's JSON (version first, operation before host), and a type this
    # version does not know, which is skipped.
    raw.create("/kafka-acl/Topic/legacy",
               b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
               b'"operation":"Read","host":"*"}]}', makepath=True)
    raw.create("/kafka-acl/Widget/w", encode_acls([alice_read]), makepath=True)
    broker = brokers()
    assert broker.can(READ, "legacy")
    assert broker.authorizer.acls() == [
        AclBinding(ResourcePattern(TOPIC, "legacy"), alice_read)]

    # a Kafka broker's write: the znode, then its notification (not one transaction)
    raw.create("/kafka-acl-extended/prefixed/Topic/kafka-",
               encode_acls([AccessControlEntry("User:alice", "*", WRITE, ALLOW)]))
    raw.create("/kafka-acl-extended-changes/acl_changes_", sequence=True, value=(
        b'{"version":1,"resourceType":"TOPIC","name":"kafka-","patternType":"PREFIXED"}'))
    wait_until(lambda: broker.can(WRITE, "kafka-topic"), WAIT, "the extended change")
    raw.set("/kafka-acl/Topic/legacy", encode_acls([]))
    raw.create("/kafka-acl-changes/acl_changes_", b"Topic:legacy", sequence=True)
    wait_until(lambda: not broker.can(READ, "legacy"), WAIT, "the literal change")
    # a notification that names nothing is logged and skipped; the next one still counts
    raw.create("/kafka-acl-changes/acl_changes_", b"garbage", sequence=True)
    raw.create("/kafka-acl/Group/g", encode_acls([alice_read]))
    raw.create("/kafka-acl-changes/acl_changes_", b"GROUP:g", sequence=True)
    wait_until(lambda: broker.authorizer.authorize(ALICE, "h", READ, GROUP, "g"), WAIT,
               "the change after a bad one")


def test_start_takes_existing_notifications_as_read(new_client: Clients,
                                                    raw: KazooClient) -> None:
    writer = ZkAclStore(new_client())
    writer.create_acls([AclBinding(orders, alice_read)])
    heard: list[AclChanges] = []
    reader = ZkAclStore(new_client())
    reader.start(heard.append)
    time.sleep(0.3)  # room for a (wrong) replay of the old notification
    assert heard == [AclChanges({orders: frozenset({alice_read})}, full=True)]
    writer.create_acls([AclBinding(orders, bob_write)])
    wait_until(lambda: len(heard) == 2, WAIT, "the new change")
    assert heard[1] == AclChanges({orders: frozenset({alice_read, bob_write})})
    reader.close()


# ---- notifications' life ---------------------------------------------------------------------


def test_old_notifications_are_purged(brokers: Callable[..., Broker], raw: KazooClient) -> None:
    writer = brokers()
    writer.store.create_acls([AclBinding(orders, alice_read)])
    wait_until(lambda: len(children(raw, "/kafka-acl-changes")) == 1, WAIT)
    # A broker whose clock says the notification is 16 minutes old purges it after a pass.
    later = brokers(clock_ms=lambda: int(time.time() * 1000) + 16 * 60 * 1000)
    writer.store.create_acls([AclBinding(orders_prefix, alice_read)])
    wait_until(lambda: later.can(READ, "orders-x"), WAIT, "the second change")
    wait_until(lambda: not raw.get_children("/kafka-acl-changes"), WAIT,
               "the old literal notification purged")
    wait_until(lambda: not raw.get_children("/kafka-acl-extended-changes"), WAIT,
               "the processed extended notification purged")
    assert raw.exists("/kafka-acl/Topic/orders")  # the ACLs stay
    assert later.can(READ, "orders")
    # a broker with a true clock purges nothing as fresh
    writer.store.create_acls([AclBinding(orders, bob_write)])
    wait_until(lambda: len(raw.get_children("/kafka-acl-changes")) == 1, WAIT)


def test_a_new_session_reloads_everything(new_client: Clients, raw: KazooClient) -> None:
    """After a lost session, notifications of the time away may be purged already."""
    heard: list[AclChanges] = []
    store = ZkAclStore(new_client())
    store.start(heard.append)
    # Written behind the store's back, with no notification at all.
    raw.create("/kafka-acl/Topic/orders", encode_acls([alice_read]))
    store._on_state(KazooState.LOST)
    store._on_state(KazooState.CONNECTED)
    wait_until(lambda: len(heard) == 2, WAIT, "the reload")
    assert heard[1] == AclChanges({orders: frozenset({alice_read})}, full=True)
    store._on_state(KazooState.SUSPENDED)
    store._on_state(KazooState.CONNECTED)  # the same session: nothing to reload
    time.sleep(0.2)
    assert len(heard) == 2
    store.close()


def test_closed_store_hears_no_more(new_client: Clients, raw: KazooClient) -> None:
    heard: list[AclChanges] = []
    store = ZkAclStore(new_client())
    store.start(heard.append)
    store.close()
    writer = ZkAclStore(new_client())
    writer.create_acls([AclBinding(orders, alice_read)])
    time.sleep(0.3)
    assert len(heard) == 1


def test_filters_with_unknown_elements(new_client: Clients) -> None:
    store = ZkAclStore(new_client())
    store.create_acls([AclBinding(orders, alice_read)])
    [result] = store.delete_acls([AclBindingFilter(
        ResourcePatternFilter(TOPIC, None, PatternType.UNKNOWN), AccessControlEntryFilter())])
    assert result.error is not None and result.error.error_code == ErrorCode.INVALID_REQUEST
    assert store.load_all() == {orders: frozenset({alice_read})}


def test_acl_apis_over_zookeeper(brokers: Callable[..., Broker]) -> None:
    """CreateAcls on one broker, DescribeAcls on another: the ACL travels through
    ZooKeeper's notifications."""
    one, two = brokers(), brokers()
    apis_one = AclApis(one.authorizer, one.store)
    apis_two = AclApis(two.authorizer, two.store)

    def call(apis: AclApis, key: ApiKey, body: Message) -> Any:
        header = RequestHeader(request_api_key=key, request_api_version=3)
        context = RequestContext(1, "127.0.0.1", 5555, "PLAINTEXT", header)
        return asyncio.run(apis.handlers()[key](Request(header, API_SPECS[key], body), context))

    created = call(apis_one, ApiKey.CREATE_ACLS, create_acls_request.CreateAclsRequest(creations=[
        create_acls_request.AclCreation(resource_type=2, resource_name="orders-",
                                        resource_pattern_type=4, principal="User:alice",
                                        host="*", operation=3, permission_type=3)]))
    assert [(r.error_code, r.error_message) for r in created.results] == [(0, None)]
    describe = describe_acls_request.DescribeAclsRequest(
        resource_type_filter=2, resource_name_filter="orders-eu", pattern_type_filter=2,
        principal_filter=None, host_filter=None, operation=1, permission_type=1)
    wait_until(lambda: call(apis_two, ApiKey.DESCRIBE_ACLS, describe).resources, WAIT,
               "broker 2 describing broker 1's ACL")
    [resource] = call(apis_two, ApiKey.DESCRIBE_ACLS, describe).resources
    assert (resource.resource_name, resource.pattern_type, len(resource.acls)) == ("orders-", 4, 1)
