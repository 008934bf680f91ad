"""The schema registry (`odradek registry`) as a real process beside a real broker, driven
by confluent-kafka's SchemaRegistryClient and Avro/JSON serializers and by plain REST calls:
Confluent's API shapes and error codes, the evolution rules, and a registry restarted or
started twice that rebuilds the same state from the _schemas topic."""

from __future__ import annotations

import json
import signal

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support.broker import BrokerProcess
from support.registry import RegistryProcess, module_fixtures
from support.wait import wait_until


def avro_record(name: str, *fields: dict[str, object]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop",
                       "fields": list(fields)})


ID = {"name": "id", "type": "long"}
ITEM = {"name": "item", "type": "string"}
EMAIL_DEFAULT = {"name": "email", "type": ["null", "string"], "default": None}
EMAIL_REQUIRED = {"name": "email", "type": "string"}
V1 = avro_record("Order", ID, ITEM)
V2 = avro_record("Order", ID, ITEM, EMAIL_DEFAULT)


broker, registry, client = module_fixtures("registry-broker")


def test_avro_round_trip_through_the_broker(broker: BrokerProcess, client: SchemaRegistryClient
                                            ) -> None:
    serializer = AvroSerializer(client, V1)
    context = SerializationContext("orders-avro", MessageField.VALUE)
    orders = [{"id": i, "item": f"book {i}"} for i in range(5)]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for order in orders:
        producer.produce("orders-avro", value=serializer(order, context))
    assert producer.flush(30) == 0
    registered = client.get_latest_version("orders-avro-value")
    assert registered.version == 1 and registered.schema.schema_type == "AVRO"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "avro-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders-avro"])
    deserializer = AvroDeserializer(client)
    read = []
    while len(read) < len(orders):
        message = consumer.poll(5)
        assert message is not None, f"only {read} read"
        assert message.error() is None
        value = message.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == registered.schema_id
        read.append(deserializer(value, context))
    consumer.close()
    assert read == orders


def test_json_schema_round_trip(client: SchemaRegistryClient) -> None:
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#",
                         "title": "Payment", "type": "object",
                         "properties": {"amount": {"type": "number"},
                                        "currency": {"type": "string"}},
                         "required": ["amount"]})
    context = SerializationContext("payments", MessageField.VALUE)
    data = JSONSerializer(schema, client)({"amount": 9.5, "currency": "EUR"}, context)
    assert JSONDeserializer(schema)(data, context) == {"amount": 9.5, "currency": "EUR"}
    latest = client.get_latest_version("payments-value")
    assert latest.schema.schema_type == "JSON"


def test_backward_evolution(client: SchemaRegistryClient) -> None:
    subject = "evolve-backward"
    first = client.register_schema(subject, Schema(V1, "AVRO"))
    # The same schema again: the same id, no new version.
    assert client.register_schema(subject, Schema(V1, "AVRO")) == first
    # A field added with a default: BACKWARD (the default level) lets it in.
    second = client.register_schema(subject, Schema(V2, "AVRO"))
    assert second != first
    assert client.get_versions(subject) == [1, 2]
    # A field added without a default: 409, with the reason.
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(avro_record(
            "Order", ID, ITEM, EMAIL_DEFAULT, {"name": "phone", "type": "string"}), "AVRO"))
    assert refused.value.http_status_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in refused.value.error_message
    assert client.get_versions(subject) == [1, 2]
    # The same schema under another subject shares its id.
    assert client.register_schema("another-subject", Schema(V2, "AVRO")) == second


def test_forward_and_transitive_levels(registry: RegistryProcess) -> None:
    subject = "evolve-forward"
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "FORWARD"}) == (
        200, {"compatibility": "FORWARD"})
    assert registry.call("GET", f"/config/{subject}") == (
        200, {"compatibilityLevel": "FORWARD"})
    assert registry.call("POST", f"/subjects/{subject}/versions", {"schema": V2})[0] == 200
    # Removing a field with a default keeps old readers working: FORWARD allows it.
    status, _ = registry.call("POST", f"/subjects/{subject}/versions", {"schema": V1})
    assert status == 200
    # Removing a field old readers need (no default): refused under FORWARD.
    status, body = registry.call("POST", f"/subjects/{subject}/versions",
                                 {"schema": avro_record("Order", ID)})
    assert status == 409 and body["error_code"] == 409
    # Transitive: v3 is checked against every version, not only the latest. v1 has a
    # string email, v2 none, v3 an int email with a default: v3 reads v2's records (the
    # default) but not v1's (a string is no int).
    v3 = avro_record("Order", ID, {"name": "email", "type": "int", "default": 0})
    for level, expected in (("BACKWARD", 200), ("BACKWARD_TRANSITIVE", 409)):
        subject = f"transitive-{level.lower()}"
        registry.call("PUT", f"/config/{subject}", {"compatibility": level})
        for schema in (avro_record("Order", ID, EMAIL_REQUIRED), avro_record("Order", ID)):
            assert registry.call("POST", f"/subjects/{subject}/versions",
                                 {"schema": schema})[0] == 200
        # The check without a version is the one registering makes.
        status, body = registry.call("POST", f"/compatibility/subjects/{subject}/versions"
                                     "?verbose=true", {"schema": v3})
        assert (status, body["is_compatible"]) == (200, expected == 200), body
        assert bool(body["messages"]) is (expected != 200)
        status, body = registry.call("POST", f"/subjects/{subject}/versions", {"schema": v3})
        assert status == expected, (level, body)


def test_rest_shapes_and_errors(registry: RegistryProcess) -> None:
    subject = "shapes"
    status, body = registry.call("POST", f"/subjects/{subject}/versions", {"schema": V1})
    assert status == 200
    schema_id = body["id"]
    assert registry.call("GET", f"/subjects/{subject}/versions/1") == (200, {
        "subject": subject, "version": 1, "id": schema_id, "schema": V1})
    assert registry.call("GET", f"/schemas/ids/{schema_id}") == (200, {"schema": V1})
    assert subject in registry.call("GET", "/subjects")[1]
    assert registry.call("GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    assert registry.call("POST", f"/subjects/{subject}", {"schema": V1})[1]["version"] == 1
    assert registry.call("GET", "/subjects/none-such/versions") == (404, {
        "error_code": 40401, "message": "Subject 'none-such' not found."})
    assert registry.call("GET", f"/subjects/{subject}/versions/9")[1]["error_code"] == 40402
    assert registry.call("GET", f"/subjects/{subject}/versions/zero")[1]["error_code"] == 42202
    assert registry.call("GET", "/schemas/ids/999999")[1]["error_code"] == 40403
    assert registry.call("POST", f"/subjects/{subject}", {"schema": V2})[1]["error_code"] \
        == 40403
    # Bad input: nothing stored.
    versions_before = registry.call("GET", f"/subjects/{subject}/versions")[1]
    for bad in ({"schema": "{not json"}, {"schema": json.dumps({"type": "nonsense"})},
                {"schema": V1, "schemaType": "XML"},
                {"schema": avro_record("Order", {"name": "n", "type": "int",
                                                 "default": "seven"})}):
        status, body = registry.call("POST", f"/subjects/{subject}/versions", bad)
        assert (status, body["error_code"]) == (422, 42201), (bad, body)
    assert registry.call("POST", f"/subjects/{subject}/versions", raw=b"{oops")[0] == 400
    assert registry.call("PUT", "/config", {"compatibility": "SIDEWAYS"})[1]["error_code"] \
        == 42203
    assert registry.call("GET", f"/subjects/{subject}/versions")[1] == versions_before


def test_soft_and_permanent_deletes(registry: RegistryProcess) -> None:
    subject = "to-delete"
    registry.call("POST", f"/subjects/{subject}/versions", {"schema": V1})
    registry.call("POST", f"/subjects/{subject}/versions", {"schema": V2})
    # Permanently, before softly: refused.
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true")[1]["error_code"] \
        == 40405
    assert registry.call("DELETE", f"/subjects/{subject}/versions/1") == (200, 1)
    assert registry.call("GET", f"/subjects/{subject}/versions") == (200, [2])
    assert registry.call("GET", f"/subjects/{subject}/versions?deleted=true") == (200, [1, 2])
    assert registry.call("DELETE", f"/subjects/{subject}") == (200, [2])
    assert subject not in registry.call("GET", "/subjects")[1]
    assert subject in registry.call("GET", "/subjects?deleted=true")[1]
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true") == (200, [1, 2])
    assert subject not in registry.call("GET", "/subjects?deleted=true")[1]
    # A new version after a soft delete continues the numbering.
    registry.call("POST", "/subjects/renumbered/versions", {"schema": V1})
    registry.call("DELETE", "/subjects/renumbered")
    registry.call("POST", "/subjects/renumbered/versions", {"schema": V1})
    assert registry.call("GET", "/subjects/renumbered/versions") == (200, [2])


def test_a_restarted_and_a_second_registry_rebuild_the_same_state(
        broker: BrokerProcess, registry: RegistryProcess) -> None:
    registry.call("POST", "/subjects/rebuilt/versions", {"schema": V1})
    registry.call("POST", "/subjects/rebuilt/versions", {"schema": V2})
    registry.call("PUT", "/config/rebuilt", {"compatibility": "FULL"})

    def snapshot(r: RegistryProcess) -> dict[str, object]:
        subjects = r.call("GET", "/subjects?deleted=true")[1]
        return {"subjects": subjects,
                "versions": {s: r.call("GET", f"/subjects/{s}/versions?deleted=true")[1]
                             for s in subjects},
                "latest": {s: r.call("GET", f"/subjects/{s}/versions/latest")[1]
                           for s in subjects},
                "config": r.call("GET", "/config/rebuilt")[1]}
    before = snapshot(registry)
    second = RegistryProcess(broker.bootstrap).start()
    try:
        assert snapshot(second) == before
    finally:
        second.stop()
    registry.stop()
    registry.start()
    assert snapshot(registry) == before
    # Ids continue after the highest read back: no id issued twice.
    status, body = registry.call("POST", "/subjects/after-restart/versions",
                                 {"schema": avro_record("Fresh", ID)})
    ids = {v["id"] for v in before["latest"].values()}  # type: ignore[union-attr]
    assert status == 200 and body["id"] not in ids and body["id"] > max(ids)


def test_a_registry_in_the_brokers_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    """registry.listeners (scripts/start's http://localhost:8081): the broker's process
    serves the registry too, and a restarted broker's registry has its schemas back."""
    process = BrokerProcess(tmp_path_factory.mktemp("in-process"),
                            {"registry.listeners": "http://127.0.0.1:0",
                             "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        def registry_url() -> str:
            for line in reversed(process.log_text().splitlines()):  # the last start
                if "schema registry listening on " in line:
                    return line.split("listening on ", 1)[1].split()[0]
            raise AssertionError(f"no registry in {process.log_text()}")
        client = SchemaRegistryClient({"url": registry_url()})
        schema_id = client.register_schema("in-process-value", Schema(V1, "AVRO"))
        process.restart()
        client = SchemaRegistryClient({"url": registry_url()})
        assert client.get_schema(schema_id).schema_str == V1
        assert client.get_latest_version("in-process-value").schema_id == schema_id
    finally:
        process.stop()
    assert "Traceback" not in process.log_text()


def test_writes_reach_the_primary_and_survive_its_death(broker: BrokerProcess) -> None:
    """Two registries elect one primary through the group coordinator; a write sent to
    the other is forwarded to it. The primary is killed (SIGKILL) while writes go on: the
    survivor is elected, every registration acknowledged is there, and no id was given to
    two different schemas."""
    options = ("--group-id", "failover-registries", "--session-timeout-ms", "6000",
               "--topic", "_schemas_failover")
    first = RegistryProcess(broker.bootstrap, *options).start()
    second = RegistryProcess(broker.bootstrap, *options).start()
    try:
        acknowledged: dict[str, int] = {}

        def register(registry: RegistryProcess, n: int) -> None:
            schema = avro_record(f"Event{n}", ID)
            status, body = registry.call("POST", f"/subjects/failover-{n}/versions",
                                         {"schema": schema})
            if status == 200:
                acknowledged[schema] = body["id"]
        for n in range(10):  # through both: one of them forwards
            register(first if n % 2 else second, n)
        assert len(acknowledged) == 10
        primary = wait_until(lambda: next((r for r in (first, second)
                                           if "is now the primary" in r.log_text()), None),
                             what="a primary")
        survivor = second if primary is first else first
        primary.stop(signal.SIGKILL)
        for n in range(10, 20):  # during and after the election
            register(survivor, n)
        assert len(acknowledged) == 20, sorted(acknowledged.values())
        for schema, schema_id in acknowledged.items():
            assert survivor.call("GET", f"/schemas/ids/{schema_id}") == (
                200, {"schema": schema})
        assert len(set(acknowledged.values())) == 20  # twenty schemas, twenty ids
    finally:
        for registry in (first, second):
            registry.stop(signal.SIGKILL)


def test_schema_references(registry: RegistryProcess) -> None:
    """An Avro schema that uses a type registered in another subject, by reference."""
    address = json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                          "fields": [{"name": "city", "type": "string"}]})
    assert registry.call("POST", "/subjects/address/versions", {"schema": address})[0] == 200
    customer = avro_record("Customer", ID, {"name": "home", "type": "shop.Address"})
    reference = [{"name": "shop.Address", "subject": "address", "version": 1}]
    # Without the reference the type is unknown: invalid.
    assert registry.call("POST", "/subjects/customer/versions",
                         {"schema": customer})[1]["error_code"] == 42201
    status, body = registry.call("POST", "/subjects/customer/versions",
                                 {"schema": customer, "references": reference})
    assert status == 200
    assert registry.call("GET", "/subjects/customer/versions/1")[1]["references"] == reference
    assert registry.call("GET", "/subjects/address/versions/1/referencedby") == (
        200, [body["id"]])
    # A referenced version cannot be deleted.
    assert registry.call("DELETE", "/subjects/address/versions/1")[1]["error_code"] == 42206
    # A reference to nothing registered: invalid.
    assert registry.call("POST", "/subjects/customer/versions", {
        "schema": customer, "references": [{**reference[0], "version": 9}]})[1][
        "error_code"] == 42201


def test_confluents_answers_at_the_edges(registry: RegistryProcess) -> None:
    registry.call("POST", "/subjects/edges/versions", {"schema": V1})
    registry.call("DELETE", "/subjects/edges")
    # Every version soft-deleted: the subject is not found, as Confluent says.
    assert registry.call("GET", "/subjects/edges/versions/latest")[1]["error_code"] == 40401
    # A subject without a level of its own has none to delete.
    assert registry.call("DELETE", "/config/edges")[1]["error_code"] == 40401
    assert registry.call("DELETE", "/mode/edges")[1]["error_code"] == 40401
    # The global level reset to the default.
    registry.call("PUT", "/config", {"compatibility": "FULL"})
    assert registry.call("DELETE", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert registry.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    # Unknown paths and methods answer in Confluent's error shape.
    assert registry.call("GET", "/no/such/path") == (
        404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert registry.call("PATCH", "/subjects")[1]["error_code"] == 405
