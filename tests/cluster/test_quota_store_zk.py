"""Client quotas in ZooKeeper as Kafka keeps them: /config/users/<user>[/clients/<id>] and
/config/clients/<id> ({"version":1,"config":{...}}, <default> for a default, names
sanitized), each change notified with its entity path; a user's SCRAM credentials share
/config/users/<user> and survive a change of its quotas."""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from zk_helpers import StoreFactory

from odradek.cluster.zookeeper import znodes as z


def config(raw: KazooClient, path: str) -> dict[str, str]:
    return dict(json.loads(raw.get(path)[0])["config"])


def test_quota_configs_round_trip_in_kafkas_znodes(make_store: StoreFactory,
                                                   raw: KazooClient) -> None:
    store = make_store()
    store.alter_user_configs({"alice": {"SCRAM-SHA-256": "salt=abc,iterations=4096"}})
    store.alter_quota_configs({
        (("user", "alice"),): {"producer_byte_rate": "1024"},
        (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": "2048"},
        (("user", None), ("client-id", "app 1")): {"request_percentage": "12.5"},
        (("client-id", "app 1"),): {"producer_byte_rate": "4096"},
        (("client-id", None),): {"producer_byte_rate": "1"},
    })
    assert config(raw, "/config/users/alice") == {
        "SCRAM-SHA-256": "salt=abc,iterations=4096", "producer_byte_rate": "1024"}
    assert config(raw, "/config/users/alice/clients/<default>") == {
        "consumer_byte_rate": "2048"}
    assert config(raw, "/config/users/<default>/clients/app%201") == {
        "request_percentage": "12.5"}
    assert config(raw, "/config/clients/app%201") == {"producer_byte_rate": "4096"}
    assert config(raw, "/config/clients/<default>") == {"producer_byte_rate": "1"}
    changes = sorted(raw.get_children(z.CONFIG_CHANGES))
    entity_paths = [json.loads(raw.get(f"{z.CONFIG_CHANGES}/{c}")[0])["entity_path"]
                    for c in changes]
    assert set(entity_paths) == {"users/alice", "users/alice/clients/<default>",
                                 "users/<default>/clients/app%201", "clients/app%201",
                                 "clients/<default>"}
    assert store.quota_configs() == {
        (("user", "alice"),): {"producer_byte_rate": "1024"},
        (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": "2048"},
        (("user", None), ("client-id", "app 1")): {"request_percentage": "12.5"},
        (("client-id", "app 1"),): {"producer_byte_rate": "4096"},
        (("client-id", None),): {"producer_byte_rate": "1"},
    }
    # Removing alice's quota keeps her credential; another store reads the same.
    store.alter_quota_configs({(("user", "alice"),): {"producer_byte_rate": None}})
    other = make_store(2)
    assert other.user_configs()["alice"] == {"SCRAM-SHA-256": "salt=abc,iterations=4096"}
    assert (("user", "alice"),) not in other.quota_configs()
