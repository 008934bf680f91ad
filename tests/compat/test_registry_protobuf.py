"""Protobuf in the schema registry (`odradek registry`) as a real process beside a real broker:
confluent-kafka's ProtobufSerializer registering a message's file (a base64
FileDescriptorProto, its import registered as a reference) and its ProtobufDeserializer
reading the records back (fetching `?format=serialized`), evolution checked by Confluent's
rules, and schemas answered as .proto text.

The message classes are built at run time from FileDescriptorProtos: no protoc."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from support.broker import BrokerProcess
from support.registry import RegistryProcess, module_fixtures

from odradek.cli.main import main

FieldProto = descriptor_pb2.FieldDescriptorProto


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int,
           kind: int, type_name: str = "") -> None:
    field = message.field.add(name=name, number=number, type=kind,
                              label=FieldProto.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name


def shop_files() -> tuple[descriptor_pb2.FileDescriptorProto, descriptor_pb2.FileDescriptorProto]:
    """shop/common.proto (Money) and shop/order.proto (Order, which imports it and the
    well-known Timestamp), as protoc would describe them."""
    common = descriptor_pb2.FileDescriptorProto(name="shop/common.proto", package="shop",
                                                syntax="proto3")
    money = common.message_type.add(name="Money")
    _field(money, "currency", 1, FieldProto.TYPE_STRING)
    _field(money, "cents", 2, FieldProto.TYPE_INT64)
    order_file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3",
        dependency=["shop/common.proto", "google/protobuf/timestamp.proto"])
    order = order_file.message_type.add(name="Order")
    _field(order, "id", 1, FieldProto.TYPE_INT64)
    _field(order, "item", 2, FieldProto.TYPE_STRING)
    _field(order, "price", 3, FieldProto.TYPE_MESSAGE, ".shop.Money")
    _field(order, "placed", 4, FieldProto.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    return common, order_file


def order_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    for file in shop_files():
        pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


ORDER_TEXT = """\
syntax = "proto3";
package shop;

import "shop/common.proto";
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string item = 2;
  .shop.Money price = 3;
  .google.protobuf.Timestamp placed = 4;
}
"""


broker, registry, client = module_fixtures("registry-protobuf-broker")


def test_protobuf_round_trip_through_the_broker(broker: BrokerProcess,
                                                registry: RegistryProcess,
                                                client: SchemaRegistryClient) -> None:
    order = order_class()
    serializer = ProtobufSerializer(order, client)
    context = SerializationContext("orders-proto", MessageField.VALUE)
    orders = []
    for i in range(5):
        sent = order(id=i, item=f"book {i}")
        sent.price.currency, sent.price.cents = "EUR", 1000 + i
        sent.placed.seconds = 1_700_000_000 + i
        orders.append(sent)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for sent in orders:
        producer.produce("orders-proto", value=serializer(sent, context))
    assert producer.flush(30) == 0

    # Registered as Confluent's registry has it: .proto text, the import a reference.
    status, version = registry.call("GET", "/subjects/orders-proto-value/versions/latest")
    assert status == 200
    assert version["schemaType"] == "PROTOBUF" and version["schema"] == ORDER_TEXT
    assert version["references"] == [{"name": "shop/common.proto",
                                      "subject": "shop/common.proto", "version": 1}]
    status, common = registry.call("GET", "/subjects/shop%2Fcommon.proto/versions/1")
    assert status == 200 and "message Money {" in common["schema"]
    status, serialized = registry.call("GET", f"/schemas/ids/{version['id']}?format=serialized")
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert [m.name for m in file.message_type] == ["Order"]
    assert list(file.dependency) == ["shop/common.proto", "google/protobuf/timestamp.proto"]

    # A reader with its own client: it fetches the writer's schema, serialized.
    reader = ProtobufDeserializer(order, {}, SchemaRegistryClient({"url": registry.url}))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "proto-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders-proto"])
    read = []
    while len(read) < len(orders):
        message = consumer.poll(5)
        assert message is not None, f"only {len(read)} read"
        assert message.error() is None
        value = message.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == version["id"]
        assert value[5] == 0  # message indexes [0]: the file's first message
        read.append(reader(value, context))
    consumer.close()
    assert read == orders


def test_protobuf_evolution(registry: RegistryProcess, client: SchemaRegistryClient) -> None:
    subject = "evolving-proto"
    v1 = 'syntax = "proto3";\n\nmessage Event {\n  int64 id = 1;\n  string name = 2;\n}\n'
    v2 = ('syntax = "proto3";\nmessage Event {\n  int64 id = 1;\n  string name = 2;\n'
          '  repeated string tags = 3;\n}\n')
    first = client.register_schema(subject, Schema(v1, "PROTOBUF"))
    assert client.register_schema(subject, Schema(v2, "PROTOBUF")) != first  # field added
    assert client.get_latest_version(subject).version == 2

    incompatible = Schema('syntax = "proto3";\nmessage Event {\n  string id = 1;\n}\n',
                          "PROTOBUF")
    assert client.test_compatibility(subject, incompatible) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, incompatible)
    assert refused.value.http_status_code == 409
    assert "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message  # int64 to string

    # The schema is answered as canonical .proto text, whatever the spacing it came in.
    status, body = registry.call("GET", f"/schemas/ids/{first}")
    assert (status, body) == (200, {"schemaType": "PROTOBUF", "schema": v1})
    spaced = 'syntax="proto3";  message Event { int64 id=1; string name=2; }'
    assert registry.call("POST", f"/subjects/{subject}",
                         {"schema": spaced, "schemaType": "PROTOBUF"})[1]["id"] == first
    status, body = registry.call("POST", f"/subjects/{subject}/versions",
                                 {"schema": "message {", "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201)
    assert "line 1:9" in body["message"]
    assert registry.call("GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])


def test_cli_registers_a_proto_file(registry: RegistryProcess, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODRADEK_REGISTRY_URL", raising=False)
    path = tmp_path / "note.proto"
    path.write_text('syntax = "proto3";\nmessage Note {\n  string text = 1;\n}\n')
    code = main(["schemas", "register", "notes-value", "--type", "protobuf", "--schema-file",
                 str(path), "--registry-url", registry.url])
    status, version = registry.call("GET", "/subjects/notes-value/versions/1")
    assert status == 200 and version["schemaType"] == "PROTOBUF"
    assert (code, capsys.readouterr().out) == (
        0, f"Registered notes-value version 1: schema id {version['id']}.\n")
    # stored canonically: a blank line after the syntax
    assert version["schema"] == path.read_text().replace(";\n", ";\n\n", 1)
