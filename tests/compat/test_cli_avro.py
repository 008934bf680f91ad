"""`odradek produce --value-schema` and `odradek consume --value-format avro|json` as real
processes against a broker process and a schema registry process (`odradek registry`):
the Confluent wire format both ways, read and written by confluent-kafka's Avro and JSON
Schema serializers too, key schemas, bad lines, undecodable records and a registry that
is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support.broker import BrokerProcess
from support.registry import RegistryProcess, running_registry
from test_cli import Run, closed_port, failed, ok

ORDER = json.dumps({
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "address", "type": {
            "type": "record", "name": "Address",
            "fields": [{"name": "city", "type": "string"},
                       {"name": "zip", "type": ["null", "int"], "default": None}]}},
    ]})
ORDERS = [
    {"id": 1, "item": "book", "note": None, "address": {"city": "Prague", "zip": 11000}},
    {"id": 2**40, "item": "pen", "note": "gift wrap", "address": {"city": "Wien", "zip": None}},
    {"id": -3, "item": "ink ✒", "note": None, "address": {"city": "", "zip": 0}},
]
PAYMENT = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#",
                      "title": "Payment", "type": "object",
                      "properties": {"amount": {"type": "number"},
                                     "currency": {"type": "string"}},
                      "required": ["amount"]})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-avro-broker"),
                            {"auto.create.topics.enable": "true",
                             "group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
    yield from running_registry(broker.bootstrap)


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def cli(broker: BrokerProcess, registry_url: str, *args: str, stdin: bytes = b"") -> Run:
    """`python -m odradek ARGS`, the registry's URL from $ODRADEK_REGISTRY_URL."""
    env = {**os.environ, "ODRADEK_BOOTSTRAP": broker.bootstrap,
           "ODRADEK_REGISTRY_URL": registry_url}
    return Run(subprocess.run([sys.executable, "-m", "odradek", *args], input=stdin,
                              capture_output=True, timeout=60, env=env))


def cli_together(broker: BrokerProcess, registry_url: str, *runs: tuple[tuple[str, ...], bytes]
                 ) -> list[Run]:
    """Independent `cli` runs, (args, stdin) each, at the same time: the processes spend
    most of their life starting Python."""
    with ThreadPoolExecutor(len(runs)) as pool:
        return list(pool.map(lambda run: cli(broker, registry_url, *run[0], stdin=run[1]),
                             runs))


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    """`odradek ARGS` run by odradek.cli.main in the test's process, for commands that stop
    before they read any input or reach the broker."""
    from odradek.cli.main import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return Run(subprocess.CompletedProcess(list(args), code, out.encode(), err.encode()))


def lines(*values: Any) -> bytes:
    return b"".join(json.dumps(v).encode() + b"\n" for v in values)


def read_all(broker: BrokerProcess, topic: str) -> list[Any]:
    """Every record of partition 0 of `topic`, as confluent-kafka's Consumer gets it."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        while len(messages) < high:
            message = consumer.poll(10)
            assert message is not None and message.error() is None, message
            messages.append(message)
        return messages
    finally:
        consumer.close()


def produce_raw(broker: BrokerProcess, topic: str, *records: tuple[bytes | None, bytes]
                ) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def test_avro_round_trip_and_interop(broker: BrokerProcess, registry: RegistryProcess,
                                     client: SchemaRegistryClient) -> None:
    topic = "orders"
    produced = ok(cli(broker, registry.url, "produce", topic, "--value-schema", ORDER,
                      stdin=lines(*ORDERS)))
    assert "produced 3 records" in produced.err, produced
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.version == 1 and registered.schema.schema_type == "AVRO"

    # confluent-kafka's AvroDeserializer reads what the CLI wrote.
    context = SerializationContext(topic, MessageField.VALUE)
    deserialize = AvroDeserializer(client)
    messages = read_all(broker, topic)
    for message in messages:
        value = message.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == registered.schema_id
    assert [deserialize(m.value(), context) for m in messages] == ORDERS

    # And the CLI prints what AvroSerializer wrote, after what it wrote itself.
    more = [{"id": 4, "item": "map", "note": "from Python",
             "address": {"city": "Brno", "zip": 60200}}]
    serialize = AvroSerializer(client, ORDER)
    produce_raw(broker, topic, *[(None, serialize(v, context)) for v in more])
    as_json = ok(cli(broker, "http://127.0.0.1:1", "consume", topic, "--from-beginning",
                     "--until-end", "--value-format", "avro", "--json",
                     "--registry-url", registry.url))
    records = as_json.json_lines()
    assert [r["value"] for r in records] == ORDERS + more
    assert {r["value_schema_id"] for r in records} == {registered.schema_id}
    assert records[0]["key"] is None and "value_encoding" not in records[0]
    assert [r["offset"] for r in records] == [0, 1, 2, 3]
    assert "consumed 4 records" in as_json.err


def test_key_schema(broker: BrokerProcess, registry: RegistryProcess,
                    client: SchemaRegistryClient, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "keyed-orders"
    input_lines = b"".join(json.dumps(o["id"]).encode() + b"\t" + json.dumps(o).encode()
                           + b"\n" for o in ORDERS)
    ok(cli(broker, registry.url, "produce", topic, "-K", "\\t", "--key-schema", '"long"',
           "--value-schema", ORDER, stdin=input_lines))
    # Confluent keeps a primitive schema as given ("long"); Odradek's registry answers
    # {"type":"long"}: the same schema either way.
    assert json.loads(client.get_latest_version(f"{topic}-key").schema.schema_str) in \
        ("long", {"type": "long"})
    key_context = SerializationContext(topic, MessageField.KEY)
    deserialize = AvroDeserializer(client)
    assert [deserialize(m.key(), key_context) for m in read_all(broker, topic)] == \
        [o["id"] for o in ORDERS]
    printed = ok(cli(broker, registry.url, "consume", topic, "--from-beginning", "-e",
                     "--key-format", "avro", "--value-format", "avro",
                     "--format", "{key}\\t{value}"))
    pairs = [line.split("\t") for line in printed.out.splitlines()]
    assert [(json.loads(k), json.loads(v)) for k, v in pairs] == \
        [(o["id"], o) for o in ORDERS]
    # A key schema without a separator to find keys by: a usage error.
    usage = failed(in_process(capsys, "produce", topic, "--key-schema", '"long"',
                              "--registry-url", registry.url), "needs --key-separator")
    assert usage.code == 2, usage


def test_json_schema(broker: BrokerProcess, registry: RegistryProcess,
                     client: SchemaRegistryClient) -> None:
    topic = "payments"
    payments = [{"amount": 9.5, "currency": "EUR"}, {"amount": 3}]
    ok(cli(broker, registry.url, "produce", topic, "--schema-type", "json",
           "--value-schema", PAYMENT, stdin=lines(*payments)))
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"
    context = SerializationContext(topic, MessageField.VALUE)
    deserialize = JSONDeserializer(PAYMENT)
    assert [deserialize(m.value(), context) for m in read_all(broker, topic)] == payments
    from_python = {"amount": 1.25, "currency": "CZK"}
    produce_raw(broker, topic, (None, JSONSerializer(PAYMENT, client)(from_python, context)))
    printed, member, bad = cli_together(
        broker, registry.url,
        (("consume", topic, "--from-beginning", "-e", "--value-format", "json", "--json"),
         b""),
        (("consume", topic, "--group", "payments-audit", "--from-beginning", "-e",
          "--value-format", "json", "--format", "{offset} {value}"), b""),
        # A value that breaks the schema stops the input at its line.
        (("produce", "payments-bad", "--schema-type", "JSON", "--value-schema", PAYMENT),
         lines({"amount": 1}, {"currency": "EUR"})))
    assert [r["value"] for r in ok(printed).json_lines()] == [*payments, from_python]
    assert [r["value_schema_id"] for r in printed.json_lines()] == \
        [client.get_latest_version(f"{topic}-value").schema_id] * 3
    assert ok(member).out.splitlines() == [f"{offset} {json.dumps(value, separators=(',', ':'))}"
                                           for offset, value in
                                           enumerate([*payments, from_python])]
    failed(bad, "line 2: the value does not match its JSON Schema", "produced 1 record ")
    assert "'amount' is a required property" in bad.err and bad.code == 1, bad


def test_bad_lines(broker: BrokerProcess, registry: RegistryProcess) -> None:
    not_json, mismatch = cli_together(
        broker, registry.url,
        (("produce", "orders-not-json", "--value-schema", ORDER),
         lines(*ORDERS[:2]) + b"{oops\n" + lines(ORDERS[2])),
        (("produce", "orders-mismatch", "--value-schema", ORDER),
         lines(ORDERS[0], {**ORDERS[0], "colour": "red"}, ORDERS[1])))
    failed(not_json, "line 3: the value is not JSON", "produced 2 records")
    failed(mismatch, "line 2: the value does not match its Avro schema",
           "no field 'colour'", "produced 1 record ")
    assert not_json.code == mismatch.code == 1, (not_json, mismatch)
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    for topic, sent in (("orders-not-json", ORDERS[:2]), ("orders-mismatch", ORDERS[:1])):
        context = SerializationContext(topic, MessageField.VALUE)
        assert [deserialize(m.value(), context) for m in read_all(broker, topic)] == sent


@pytest.mark.parametrize(("value", "needle"), [
    ({**ORDERS[0], "id": "one"}, "shop.Order.id is <one> of type <class 'str'> expected long"),
    ({**ORDERS[0], "colour": "red"}, "shop.Order has no field 'colour'"),
    ({**ORDERS[0], "address": {"city": "x", "country": "CZ"}},
     "address has no field 'country'"),
    ({"id": 1, "address": {"city": "x"}}, "shop.Order.item is missing (no default)"),
    ({**ORDERS[0], "address": {"city": "x", "zip": "a"}}, "shop.Address.zip is <a>"),
    ([1, 2], "a record shop.Order wants a JSON object, not an array"),
])
def test_avro_mismatches_named(value: Any, needle: str) -> None:
    """What the CLI says of a line that does not fit (the check run in-process)."""
    from fastavro import parse_schema

    from odradek.cli.schema_serde import avro_mismatch

    schema = parse_schema(json.loads(ORDER))
    assert needle in (avro_mismatch(value, schema) or ""), avro_mismatch(value, schema)
    # Optional fields may be left out, as the schema's defaults say.
    assert avro_mismatch({"id": 1, "item": "x", "address": {"city": "y"}}, schema) is None


def test_undecodable_records_are_named_and_skipped(broker: BrokerProcess,
                                                    registry: RegistryProcess,
                                                    client: SchemaRegistryClient) -> None:
    topic = "orders-mixed"
    context = SerializationContext(topic, MessageField.VALUE)
    good = AvroSerializer(client, ORDER)(ORDERS[1], context)
    json_value = JSONSerializer(PAYMENT, client)(
        {"amount": 1}, SerializationContext("payments-mixed", MessageField.VALUE))
    produce_raw(broker, topic, (None, b"plain text"), (None, b"\0\0\x01\x86\xa0payload"),
                (None, good), (None, b"\0\0"), (None, json_value))
    run = failed(cli(broker, registry.url, "consume", topic, "--from-beginning", "-e",
                     "--value-format", "avro"))
    assert run.code == 1, run
    assert [json.loads(line) for line in run.out.splitlines()] == [ORDERS[1]]
    assert "offset 0 of partition 0 of orders-mixed: value: not in the schema " \
        "registry's wire format" in run.err, run
    assert "offset 1 of partition 0 of orders-mixed: value: schema id 100000 is unknown" \
        in run.err, run
    assert "offset 3 of partition 0" in run.err, run
    assert "offset 4 of partition 0 of orders-mixed: value: written with JSON schema" \
        in run.err and "try --value-format json" in run.err, run
    assert "consumed 1 record; 4 records could not be decoded" in run.err, run


def test_registry_refusals_and_bad_schemas(broker: BrokerProcess, registry: RegistryProcess,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    topic = "orders-evolving"
    SchemaRegistryClient({"url": registry.url}).register_schema(f"{topic}-value",
                                                                Schema(ORDER, "AVRO"))
    incompatible = json.loads(ORDER)
    incompatible["fields"].append({"name": "phone", "type": "string"})
    refused = failed(in_process(capsys, "produce", topic, "--value-schema",
                                json.dumps(incompatible), "--registry-url", registry.url),
                     "refused the value schema for subject orders-evolving-value",
                     "(error 409)")
    assert refused.code == 1 and "produced" not in refused.err, refused
    usage = failed(in_process(capsys, "produce", topic, "--value-schema", '{"type": "recrd"}'),
                   "--value-schema is not an Avro schema")
    assert usage.code == 2, usage


def test_unreachable_registry(broker: BrokerProcess, registry: RegistryProcess,
                              tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(ORDER)
    produced = failed(in_process(capsys, "produce", "orders-nowhere", "--value-schema-file",
                                 str(schema_file), "--registry-url", down),
                      f"cannot reach the schema registry at {down}")
    assert produced.code == 1 and len(produced.err.strip().splitlines()) == 1, produced
    produce_raw(broker, "orders-unread", (None, b"\0\0\0\0\x01payload"))
    consumed = failed(cli(broker, registry.url, "consume", "orders-unread", "--from-beginning",
                          "-e", "--value-format", "avro", "--registry-url", down),
                      f"cannot reach the schema registry at {down}")
    assert consumed.code == 1 and consumed.out == "", consumed
