"""JSON Schema subjects through a real registry process beside a real broker, with
confluent-kafka's SchemaRegistryClient and JSONSerializer: Confluent's JSON Schema
compatibility rules (odradek/registry/json_schema_compatibility.py) deciding what may be
registered, the 409 refusals and the verbose compatibility answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support.broker import BrokerProcess
from support.registry import RegistryProcess, module_fixtures

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def order_schema(properties: dict[str, Any], required: list[str], *, closed: bool) -> str:
    schema: dict[str, Any] = {"$schema": DRAFT7, "title": "Order", "type": "object",
                              "properties": properties, "required": required}
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


ID = {"type": "integer"}
ITEM = {"type": "string"}
EMAIL = {"type": "string"}


broker, registry, client = module_fixtures("registry-json-broker")


def test_backward_json_evolution_through_the_broker(
        broker: BrokerProcess, registry: RegistryProcess, client: SchemaRegistryClient
) -> None:
    topic, subject = "orders-json", "orders-json-value"
    assert client.set_compatibility(subject, "BACKWARD") == {"compatibility": "BACKWARD"}
    v1 = order_schema({"id": ID, "item": ITEM}, ["id"], closed=True)
    # An optional property added to a closed content model: what old writers wrote
    # never has it, so the new schema reads it all.
    v2 = order_schema({"id": ID, "item": ITEM, "email": EMAIL}, ["id"], closed=True)
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=JSONSerializer(v1, client)({"id": 1, "item": "book"},
                                                             context))
    assert client.test_compatibility(subject, Schema(v2, "JSON")) is True
    producer.produce(topic, value=JSONSerializer(v2, client)(
        {"id": 2, "item": "pen", "email": "a@b.c"}, context))
    assert producer.flush(30) == 0
    assert client.get_versions(subject) == [1, 2]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "json-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = []
    while len(read) < 2:
        message = consumer.poll(5)
        assert message is not None, f"only {read} read"
        assert message.error() is None
        read.append(JSONDeserializer(v2)(message.value(), context))
    consumer.close()
    assert read == [{"id": 1, "item": "book"}, {"id": 2, "item": "pen", "email": "a@b.c"}]

    # The email made required, no default: records written with v2 may lack it.
    v3 = order_schema({"id": ID, "item": ITEM, "email": EMAIL}, ["id", "email"], closed=True)
    expected = ('{errorType:"REQUIRED_ATTRIBUTE_ADDED", description:"The keyword at path '
                "'#/required/email' in the new schema is not present in the old schema'}")
    assert client.test_compatibility(subject, Schema(v3, "JSON"), verbose=True) is False
    status, body = registry.call(
        "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
        {"schema": v3, "schemaType": "JSON"})
    assert (status, body) == (200, {"is_compatible": False, "messages": [expected]})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(v3, "JSON"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert refused.value.error_message == (
        "Schema being registered is incompatible with an earlier schema for subject "
        f'"{subject}", details: [{expected}]')
    assert client.get_versions(subject) == [1, 2]


def test_open_content_model(registry: RegistryProcess, client: SchemaRegistryClient) -> None:
    subject = "payments-json-value"
    assert client.set_compatibility(subject, "BACKWARD") == {"compatibility": "BACKWARD"}
    v1 = order_schema({"id": ID, "item": ITEM, "note": ITEM}, ["id"], closed=False)
    client.register_schema(subject, Schema(v1, "JSON"))
    # Removing a property from an open content model: it may still come, as anything.
    v2 = order_schema({"id": ID, "item": ITEM}, ["id"], closed=False)
    assert client.test_compatibility(subject, Schema(v2, "JSON")) is True
    client.register_schema(subject, Schema(v2, "JSON"))
    # Adding a typed one (even optional) is refused: old records may hold an "email"
    # of any kind. Confluent 7.x's rule; a closed content model (above) lets it in.
    v3 = order_schema({"id": ID, "item": ITEM, "email": EMAIL}, ["id"], closed=False)
    expected = ('{errorType:"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", description:"The new '
                "schema has an open content model and has a property or item at path "
                "'#/properties/email' which is missing in the old schema'}")
    status, body = registry.call("POST", f"/compatibility/subjects/{subject}/versions"
                                 "?verbose=true", {"schema": v3, "schemaType": "JSON"})
    assert (status, body) == (200, {"is_compatible": False, "messages": [expected]})
    status, body = registry.call("POST", f"/subjects/{subject}/versions",
                                 {"schema": v3, "schemaType": "JSON"})
    assert status == 409 and body["error_code"] == 409, body
    assert expected in body["message"]
    # A note that is a number: BACKWARD refuses it (added to v2's open content model);
    # FORWARD_TRANSITIVE also checks v1, whose note was a string.
    v4 = order_schema({"id": ID, "item": ITEM, "note": {"type": "number"}}, ["id"],
                      closed=False)
    for level, compatible in (("BACKWARD", False), ("NONE", True)):
        client.set_compatibility(subject, level)
        assert client.test_compatibility(subject, Schema(v4, "JSON")) is compatible
    client.set_compatibility(subject, "FORWARD_TRANSITIVE")
    status, body = registry.call("POST", f"/compatibility/subjects/{subject}/versions"
                                 "?verbose=true", {"schema": v4, "schemaType": "JSON"})
    assert body == {"is_compatible": False, "messages": [
        '{errorType:"TYPE_CHANGED", description:"A type at path \'#/properties/note\' is '
        "different between the old schema and the new schema'}"]}, (status, body)
    assert client.get_versions(subject) == [1, 2]
