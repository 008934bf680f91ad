"""TLS and SASL (issue 17): produce, consume and new connections over each kind of listener,
against PLAINTEXT in the same run, with confluent-kafka (librdkafka) and a raw-socket client.

Run: .venv/bin/python benchmarks/bench_security.py [--quick] [--seconds S] [--rounds N]
     [--key rsa|ec] [--connectors N] [--derive-each-time] [--quiet-wait S]
     (a full run takes about 8-12 minutes; --quick about 3-4)

The script starts one broker (benchmarks/bench_broker.py's BenchBroker: `python -m odradek
serve` on 127.0.0.1, its data under .bench-tmp/, removed at the end) with four listeners on
free ports: PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL, SASL with SCRAM-SHA-512. The TLS
listeners use a certificate made at start with `cryptography` (a CA and a server certificate
for localhost / 127.0.0.1, RSA 2048 by default, --key ec for P-256), written as PEM files into
the bench's temporary directory; TLS is asyncio's over the Python ssl module's OpenSSL. The
SCRAM user is created through the PLAINTEXT listener with the AdminClient
(alter_user_scram_credentials, 4096 iterations). Each client runs in its own process,
client and broker sharing this machine's cores:

1. produce: a producer process sends 1 KiB records with no key over one listener to a topic
   of 4 partitions of its own for --seconds, acks=all, linger.ms=5, batch.size=1 MiB
   (bench_broker's producer settings), then flushes; records/s from the first send to the
   end of the flush, every record checked against the topic's high watermarks.
   consume: a fresh consumer over one listener assigns the 4 partitions at offset 0 and reads
   every record of the topic the PLAINTEXT producer wrote in the same round (large fetches
   allowed, bench_broker's consume settings). Fetches over TLS cannot use sendfile: the
   broker reads the records and copies them through the TLS layer, so consume over SSL is
   where TLS costs most.
2. handshakes: --connectors client processes open connections to one listener in a loop for
   --seconds, one at a time each: TCP connect, the TLS handshake on SSL and SASL_SSL
   (Python's ssl, the CA verified, no session resumption: a full handshake each time),
   ApiVersions v3, and on the SASL listeners SaslHandshake v1 and the SCRAM exchange in
   SaslAuthenticate v2 (odradek's own SCRAM client, odradek/security/sasl/client.py), then
   close. Only connections that completed ApiVersions and the authentication count. A SCRAM
   client derives its key from the password with PBKDF2 (4096 rounds of HMAC-SHA-512) for
   each exchange, as librdkafka and Kafka's Java client do; that costs the client milliseconds
   and would make this a measure of the client's hashing, so the client here derives it once
   and reuses it (the broker's side of the exchange is unchanged); --derive-each-time derives
   it per connection, as real clients do. The derivation's cost is printed.

The cases run in rounds: each round runs every produce case, then every consume case, then
every handshake case, the order of the listeners rotated from one round to the next; the
figures are totals over the rounds, with ratios to PLAINTEXT. Each case prints the broker's,
the clients' and the rest of the machine's CPU ("others") in cores over its wall time; before
each case the script waits up to --quiet-wait seconds for other processes to go quiet, and
says when the machine stayed busy.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import ipaddress
import os
import platform
import re
import shutil
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_broker import (
    BENCH_ROOT,
    MB,
    MIB,
    PARTITIONS,
    PRODUCER_SETTINGS,
    Admin,
    BenchBroker,
    CpuWindow,
    cpu_model,
    filesystem_of,
    run_consumer,
    run_workers,
    self_cpu_s,
    spawn_context,
    wait_for_quiet,
)

SIZE = 1024
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_LISTENERS = ("SSL", "SASL_SSL")
SASL_LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "bench", "bench-secret"
SCRAM_ITERATIONS = 4096
HOST = "127.0.0.1"
FETCH_SETTINGS: dict[str, Any] = {
    "fetch.max.bytes": 64 * MIB, "max.partition.fetch.bytes": 8 * MIB,
    # librdkafka's local queue must not be what limits the consumer (bench_broker.py).
    "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576,
}
BUSY_CORES = 0.25  # others above this before a case: the machine is busy
_LISTENING = re.compile(r"listening on (\w+)://\S*:(\d+)")


# ---- certificates -------------------------------------------------------------------------


def make_certificates(directory: Path, key_type: str) -> dict[str, str]:
    """A CA and a server certificate for localhost and 127.0.0.1 signed by it, as PEM files:
    the broker's keystore (PKCS#8 key, then the certificate) and the clients' CA file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def new_key() -> Any:
        if key_type == "rsa":
            return rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return ec.generate_private_key(ec.SECP256R1())

    def common_name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = dt.datetime.now(dt.UTC)
    ca_key, server_key = new_key(), new_key()
    ca_name = common_name("Odradek bench CA")
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1))
          .not_valid_after(now + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(common_name("localhost")).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1))
              .not_valid_after(now + dt.timedelta(days=30))
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                  ca_key.public_key()), critical=False)
              .add_extension(x509.SubjectAlternativeName([
                  x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]),
                  critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
    files = {"keystore": key_pem + server.public_bytes(pem), "ca": ca.public_bytes(pem)}
    paths: dict[str, str] = {}
    for label, data in files.items():
        path = directory / f"{label}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        paths[label] = str(path)
    return paths


# ---- the broker and its clients' settings -------------------------------------------------


def broker_settings(certs: dict[str, str]) -> dict[str, str]:
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    settings = {
        "listeners": ",".join(f"{name}://{HOST}:0" for name in LISTENERS),
        "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in LISTENERS),
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs["keystore"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs["ca"],
        "sasl.enabled.mechanisms": MECHANISM,
    }
    for listener in SASL_LISTENERS:
        settings[f"listener.name.{listener.lower()}.{MECHANISM.lower()}.sasl.jaas.config"] = scram
    return settings


def listener_ports(broker: BenchBroker) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in _LISTENING.finditer(broker.log_text())}


def client_security(listener: str, ca: str) -> dict[str, str]:
    """librdkafka's settings to connect over `listener`."""
    settings: dict[str, str] = {}
    if listener != "PLAINTEXT":
        settings["security.protocol"] = listener
    if listener in TLS_LISTENERS:
        settings["ssl.ca.location"] = ca
    if listener in SASL_LISTENERS:
        settings.update({"sasl.mechanism": MECHANISM, "sasl.username": USER,
                         "sasl.password": PASSWORD})
    return settings


def create_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
        PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def pbkdf2_ms() -> float:
    """What one SCRAM-SHA-512 client spends deriving its key (PBKDF2, 4096 rounds), in ms."""
    from odradek.security.sasl.scram import salted_password

    start = time.perf_counter()
    for _ in range(10):
        salted_password(MECHANISM, PASSWORD, os.urandom(16), SCRAM_ITERATIONS)
    return (time.perf_counter() - start) / 10 * 1000


# ---- worker processes ---------------------------------------------------------------------


def run_secure_producer(bootstrap: str, security: dict[str, str], topic: str, seconds: float,
                        start_event: Any) -> dict[str, Any]:
    """bench_broker's producer (1 KiB, acks=all, its settings) over one listener."""
    from confluent_kafka import KafkaError, Producer

    failed = [0]
    last_error: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed[0] += 1
            last_error[:] = [str(err)]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **PRODUCER_SETTINGS,
                         **security, "on_delivery": on_delivery, "log_level": 3})
    producer.list_topics(topic, timeout=30)  # connected, authenticated: not timed
    value = os.urandom(SIZE)
    produce, poll = producer.produce, producer.poll
    start_event.wait()
    cpu0 = self_cpu_s()
    start = time.monotonic()
    deadline = start + seconds
    n = 0
    while True:
        try:
            produce(topic, value)
        except BufferError:  # the client's queue is full: let it drain
            poll(0.001)
            continue
        n += 1
        if not n & 1023:
            poll(0)
            if time.monotonic() >= deadline:
                break
    left = producer.flush(120)
    end = time.monotonic()
    return {"records": n - failed[0] - left, "failed": failed[0] + left, "start": start,
            "end": end, "cpu": self_cpu_s() - cpu0,
            "last_error": last_error[0] if last_error else None}


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the broker closed the connection")
        got += k
    return bytes(buf)


def _exchange(sock: socket.socket, body: Any, version: int, correlation_id: int) -> Any:
    from odradek.protocol.framing import decode_response, encode_request

    sock.sendall(encode_request(body, version, correlation_id, "odradek-bench"))
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    got, response = decode_response(_read_exactly(sock, size), body.API_KEY, version)
    if got != correlation_id:
        raise RuntimeError(f"correlation id {got}, expected {correlation_id}")
    return response


def connect_once(port: int, context: ssl.SSLContext | None, sasl: bool) -> None:
    """One connection through to an authenticated session, then closed. Raises if the
    broker refuses anything."""
    from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
    from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
    from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
    from odradek.security.sasl.client import create_sasl_client

    sock = socket.create_connection((HOST, port), timeout=30)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="localhost")
        versions = _exchange(sock, ApiVersionsRequest(client_software_name="odradek-bench",
                                                      client_software_version="1"), 3, 1)
        if versions.error_code:
            raise RuntimeError(f"ApiVersions: error {versions.error_code}")
        if not sasl:
            return
        handshake = _exchange(sock, SaslHandshakeRequest(mechanism=MECHANISM), 1, 2)
        if handshake.error_code:
            raise RuntimeError(f"SaslHandshake: error {handshake.error_code}, mechanisms "
                               f"{handshake.mechanisms}")
        client = create_sasl_client(MECHANISM, USER, PASSWORD)
        token: bytes | None = client.initial_response()
        correlation_id = 3
        while token is not None:
            response = _exchange(sock, SaslAuthenticateRequest(auth_bytes=token), 2,
                                 correlation_id)
            if response.error_code:
                raise RuntimeError(f"SaslAuthenticate: error {response.error_code}: "
                                   f"{response.error_message}")
            token = client.evaluate_challenge(bytes(response.auth_bytes))
            correlation_id += 1
        if not client.is_complete():
            raise RuntimeError("the SCRAM exchange did not complete")
    finally:
        sock.close()


def run_connector(port: int, listener: str, ca: str, seconds: float, derive_each_time: bool,
                  ready: Any, start_event: Any) -> dict[str, Any]:
    """Connections to `listener`, one after another, for `seconds`: how many completed."""
    if not derive_each_time:
        # The client's PBKDF2 (milliseconds of its CPU) once, not per connection: the
        # exchange on the wire and the broker's work are the same.
        import odradek.security.sasl.client as sasl_client

        sasl_client.salted_password = functools.lru_cache(maxsize=8)(  # type: ignore[assignment]
            sasl_client.salted_password)
    context = None
    if listener in TLS_LISTENERS:
        context = ssl.create_default_context(cafile=ca)
    sasl = listener in SASL_LISTENERS
    connect_once(port, context, sasl)  # works, and modules imported: not timed
    ready.put(True)
    start_event.wait()
    cpu0 = self_cpu_s()
    start = time.monotonic()
    deadline = start + seconds
    n = 0
    while time.monotonic() < deadline:
        connect_once(port, context, sasl)
        n += 1
    end = time.monotonic()
    return {"connections": n, "start": start, "end": end, "cpu": self_cpu_s() - cpu0}


# ---- cases --------------------------------------------------------------------------------


@dataclass
class Result:
    kind: str  # produce, consume, handshake
    listener: str
    round_no: int
    count: int  # records, or connections
    seconds: float
    wall: float  # the CPU window's
    broker_cpu: float  # seconds
    client_cpu: float
    others: float  # cores
    busy_before: float  # cores used by others before the case

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def broker_cores(self) -> float:
        return self.broker_cpu / self.wall if self.wall else 0.0

    @property
    def client_cores(self) -> float:
        return self.client_cpu / self.wall if self.wall else 0.0


class Bench:
    def __init__(self, broker: BenchBroker, ports: dict[str, int], ca: str,
                 args: argparse.Namespace) -> None:
        self.ctx = spawn_context()
        self.broker = broker
        self.ports = ports
        self.ca = ca
        self.seconds: float = args.seconds
        self.connectors: int = args.connectors
        self.derive_each_time: bool = args.derive_each_time
        self.quiet_wait: float = args.quiet_wait
        self.admin = Admin(broker.bootstrap)

    def bootstrap(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def quiet(self, case: str) -> float:
        if self.quiet_wait <= 0:
            return 0.0
        load = wait_for_quiet(self.quiet_wait, BUSY_CORES)
        if load >= BUSY_CORES:
            print(f"  ({case}: the machine is busy, {load:.2f} cores used by others)",
                  flush=True)
        return load

    def produce(self, listener: str, round_no: int) -> tuple[Result, str]:
        topic = f"bench-security-{listener.lower()}-{round_no}"
        self.admin.create_topic(topic, PARTITIONS)
        os.sync()  # earlier cases' dirty pages written back first
        load = self.quiet(f"produce {listener}")
        start_event = self.ctx.Event()
        window = CpuWindow(self.broker.pid)

        def go() -> None:  # once the producer has connected and authenticated
            time.sleep(1.5)
            window.start()
            start_event.set()

        [r] = run_workers(self.ctx, [(run_secure_producer, (
            self.bootstrap(listener), client_security(listener, self.ca), topic, self.seconds,
            start_event))], on_started=go)
        window.stop()
        stored = self.admin.end_offsets(topic)
        if r["failed"] or stored != r["records"]:
            raise RuntimeError(f"produce over {listener}: {r['records']:,} records "
                               f"acknowledged, {r['failed']:,} failed ({r['last_error']}), "
                               f"{stored:,} in the topic")
        _, _, others = window.cores(r["cpu"])
        return Result("produce", listener, round_no, r["records"], r["end"] - r["start"],
                      window.wall, window.broker, r["cpu"], others, load), topic

    def consume(self, listener: str, round_no: int, topic: str, expected: int) -> Result:
        load = self.quiet(f"consume {listener}")
        window = CpuWindow(self.broker.pid).start()
        [r] = run_workers(self.ctx, [(run_consumer, (
            self.bootstrap(listener), topic, expected, SIZE,
            {**FETCH_SETTINGS, **client_security(listener, self.ca)}))])
        window.stop()
        if r["records"] != expected:
            raise RuntimeError(f"consume over {listener}: {r['records']:,} records read, "
                               f"{expected:,} in the topic")
        _, _, others = window.cores(r["cpu"])
        return Result("consume", listener, round_no, r["records"], r["end"] - r["start"],
                      window.wall, window.broker, r["cpu"], others, load)

    def handshakes(self, listener: str, round_no: int) -> Result:
        load = self.quiet(f"handshakes {listener}")
        ready, start_event = self.ctx.Queue(), self.ctx.Event()
        window = CpuWindow(self.broker.pid)

        def go() -> None:  # once every connector has made its first connection
            for _ in range(self.connectors):
                ready.get(timeout=60)
            time.sleep(0.5)
            window.start()
            start_event.set()

        results = run_workers(self.ctx, [(run_connector, (
            self.ports[listener], listener, self.ca, self.seconds, self.derive_each_time,
            ready, start_event))] * self.connectors, on_started=go)
        window.stop()
        client = sum(r["cpu"] for r in results)
        _, _, others = window.cores(client)
        seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
        return Result("handshake", listener, round_no, sum(r["connections"] for r in results),
                      seconds, window.wall, window.broker, client, others, load)

    def delete_topics(self, topics: list[str]) -> None:
        futures = self.admin.admin.delete_topics(topics, operation_timeout=60)
        for future in futures.values():
            with contextlib.suppress(Exception):
                future.result(120)

    def close(self) -> None:
        self.admin.close()


# ---- report -------------------------------------------------------------------------------


def progress(r: Result) -> None:
    if r.kind == "handshake":
        figure = (f"{r.count:>9,} connections in {r.seconds:4.1f} s = {r.rate:>8,.0f}/s, broker "
                  f"{r.broker_cpu / max(r.count, 1) * 1000:.3f} ms CPU each")
    else:
        figure = (f"{r.count:>9,} records in {r.seconds:4.1f} s = {r.rate:>10,.0f} records/s "
                  f"{r.rate * SIZE / MB:7.1f} MB/s")
    print(f"  {r.kind:9} {r.listener:14} {figure}; CPU broker {r.broker_cores:.2f} / client "
          f"{r.client_cores:.2f} / others {r.others:.2f} cores", flush=True)


def totals(results: list[Result], kind: str, listener: str) -> dict[str, float]:
    rs = [r for r in results if r.kind == kind and r.listener == listener]
    count = sum(r.count for r in rs)
    wall = sum(r.wall for r in rs)
    broker = sum(r.broker_cpu for r in rs)
    return {"rate": count / sum(r.seconds for r in rs), "broker_cores": broker / wall,
            "client_cores": sum(r.client_cpu for r in rs) / wall,
            "others": statistics.mean(r.others for r in rs),
            "broker_per_unit": broker / count if count else 0.0,
            "client_per_unit": sum(r.client_cpu for r in rs) / count if count else 0.0}


def round_ratios(results: list[Result], kind: str, listener: str) -> list[float]:
    """This listener's rate over PLAINTEXT's, round by round."""
    by = {(r.listener, r.round_no): r for r in results if r.kind == kind}
    rounds = sorted({r.round_no for r in results if r.kind == kind})
    return [by[(listener, n)].rate / by[("PLAINTEXT", n)].rate for n in rounds
            if by[("PLAINTEXT", n)].rate]


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    return f"{min(values):.2f}-{max(values):.2f}"


def report(results: list[Result], rounds: int) -> None:
    for kind in ("produce", "consume"):
        title = ("produce, 1 KiB records, acks=all" if kind == "produce" else
                 "consume of the round's PLAINTEXT topic")
        print(f"\n{title} (totals over {rounds} round(s)):")
        print(f"  {'listener':15} {'records/s':>10} {'MB/s':>7} {'x PLAINTEXT':>12} "
              f"{'rounds':>10} {'broker':>7} {'client':>7} {'others':>7} "
              f"{'broker ms/MB':>13} {'x PLAINTEXT':>12}")
        base = totals(results, kind, "PLAINTEXT")
        for listener in LISTENERS:
            t = totals(results, kind, listener)
            per_mb = t["broker_per_unit"] * 1000 / (SIZE / MB)
            base_mb = base["broker_per_unit"] * 1000 / (SIZE / MB)
            print(f"  {listener:15} {t['rate']:>10,.0f} {t['rate'] * SIZE / MB:>7.1f} "
                  f"{t['rate'] / base['rate']:>11.2f}x "
                  f"{spread(round_ratios(results, kind, listener)):>10} "
                  f"{t['broker_cores']:>7.2f} {t['client_cores']:>7.2f} {t['others']:>7.2f} "
                  f"{per_mb:>13.3f} {per_mb / base_mb:>11.2f}x")
        if kind == "consume":
            print("  Fetches over TLS cannot use sendfile: the broker reads the records from the "
                  "segment and copies\n  them through the TLS layer (encryption on the event "
                  "loop's thread), so consume over SSL is where\n  TLS costs most; PLAINTEXT "
                  "and SASL_PLAINTEXT fetches go from the page cache to the socket by "
                  "sendfile.")
    print(f"\nnew connections, one at a time per connector (totals over {rounds} round(s)):")
    print(f"  {'listener':15} {'conn/s':>8} {'x PLAINTEXT':>12} {'rounds':>10} "
          f"{'broker ms/conn':>15} {'x PLAINTEXT':>12} {'client ms/conn':>15} "
          f"{'broker':>7} {'client':>7} {'others':>7} {'conn/s per broker core':>23}")
    base = totals(results, "handshake", "PLAINTEXT")
    for listener in LISTENERS:
        t = totals(results, "handshake", listener)
        broker_ms = t["broker_per_unit"] * 1000
        print(f"  {listener:15} {t['rate']:>8,.0f} {t['rate'] / base['rate']:>11.2f}x "
              f"{spread(round_ratios(results, 'handshake', listener)):>10} "
              f"{broker_ms:>15.3f} {t['broker_per_unit'] / base['broker_per_unit']:>11.2f}x "
              f"{t['client_per_unit'] * 1000:>15.3f} {t['broker_cores']:>7.2f} "
              f"{t['client_cores']:>7.2f} {t['others']:>7.2f} "
              f"{1000 / broker_ms if broker_ms else 0.0:>23,.0f}")
    print("  PLAINTEXT: TCP connect + ApiVersions; SSL adds a full TLS handshake; SASL_* add "
          "SaslHandshake and\n  two SaslAuthenticate round trips (SCRAM-SHA-512). conn/s per "
          "broker core: 1 / the broker's CPU per\n  connection, what a broker with a core to "
          "itself would accept.")
    busy = [r.busy_before for r in results]
    others = [r.others for r in results]
    if max(busy, default=0.0) >= BUSY_CORES or max(others, default=0.0) >= BUSY_CORES:
        print(f"\nThe machine was BUSY: other processes used {min(others):.2f}-{max(others):.2f} "
              f"cores during the cases ({min(busy):.2f}-{max(busy):.2f} before them); figures "
              "are indicative,\nratios within this run less so than on a quiet machine.")
    else:
        print(f"\nThe machine was quiet: other processes used at most {max(others):.2f} cores "
              "during the cases.")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds of 2 s per case (about 3-4 minutes in all)")
    parser.add_argument("--seconds", type=float,
                        help="per produce and handshake case (default 6; quick 2)")
    parser.add_argument("--rounds", type=int, help="rounds of all the cases (default 3; quick 2)")
    parser.add_argument("--key", choices=["rsa", "ec"], default="rsa",
                        help="the certificates' keys: RSA 2048 (default) or EC P-256")
    parser.add_argument("--connectors", type=int, default=1,
                        help="client processes opening connections in the handshake cases")
    parser.add_argument("--derive-each-time", action="store_true",
                        help="the SCRAM client derives its key (PBKDF2) for every connection, "
                        "as real clients do (default: once, so the broker is what is measured)")
    parser.add_argument("--quiet-wait", type=float,
                        help="wait up to this long before each case for other load to end "
                        "(default 10; quick 3)")
    args = parser.parse_args()
    args.seconds = args.seconds or (2.0 if args.quick else 6.0)
    rounds = max(1, args.rounds or (2 if args.quick else 3))
    if args.quiet_wait is None:
        args.quiet_wait = 3.0 if args.quick else 10.0
    args.connectors = max(1, args.connectors)

    import confluent_kafka

    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-security-", dir=BENCH_ROOT))
    print(f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}, "
          f"{ssl.OPENSSL_VERSION}, confluent-kafka {confluent_kafka.__version__} (librdkafka "
          f"{confluent_kafka.libversion()[0]}), data on {filesystem_of(tmp)}")
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the "
          f"start; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"{rounds} round(s) of {args.seconds:g} s per produce and handshake case; 1 KiB "
          f"records, {PARTITIONS} partitions, acks=all; {MECHANISM} ({SCRAM_ITERATIONS} "
          f"iterations); {'RSA 2048' if args.key == 'rsa' else 'EC P-256'} certificates; "
          f"{args.connectors} connector process(es)")
    derive = pbkdf2_ms()
    print(f"a {MECHANISM} client's key derivation (PBKDF2, {SCRAM_ITERATIONS} rounds) costs "
          f"{derive:.1f} ms of its CPU: "
          + ("done for every connection (--derive-each-time)" if args.derive_each_time else
             "done once per connector here, per connection by librdkafka and the Java client"),
          flush=True)
    certs = make_certificates(tmp, args.key)
    broker = BenchBroker(tmp / "data", "default", settings=broker_settings(certs)).start()
    bench: Bench | None = None
    try:
        ports = listener_ports(broker)
        missing = [name for name in LISTENERS if name not in ports]
        if missing:
            raise RuntimeError(f"the broker did not report listeners {missing}")
        print(f"broker pid {broker.pid}, on {broker.event_loop()}: "
              + ", ".join(f"{name} :{ports[name]}" for name in LISTENERS), flush=True)
        create_scram_user(broker.bootstrap)
        bench = Bench(broker, ports, certs["ca"], args)
        results: list[Result] = []
        for round_no in range(rounds):
            order = LISTENERS[round_no % 4:] + LISTENERS[:round_no % 4]
            print(f"\nround {round_no + 1} of {rounds} ({', '.join(order)}):", flush=True)
            topics: dict[str, str] = {}
            for listener in order:
                r, topics[listener] = bench.produce(listener, round_no)
                results.append(r)
                progress(r)
            source = next(r for r in results if r.kind == "produce" and r.round_no == round_no
                          and r.listener == "PLAINTEXT")
            for listener in order:
                results.append(bench.consume(listener, round_no, topics["PLAINTEXT"],
                                             source.count))
                progress(results[-1])
            for listener in order:
                results.append(bench.handshakes(listener, round_no))
                progress(results[-1])
            bench.delete_topics(list(topics.values()))
        report(results, rounds)
    finally:
        if bench is not None:
            bench.close()
        broker.stop()
        if "Traceback" in broker.log_text():
            print("\nthe broker logged a traceback:\n" + broker.log_text()[-4000:],
                  file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # left when other benchmarks use it
            BENCH_ROOT.rmdir()


if __name__ == "__main__":
    main()
