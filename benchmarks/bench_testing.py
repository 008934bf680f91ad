"""How fast odradek.testing gives a test a broker: start-to-first-produce and memory.

    .venv/bin/python benchmarks/bench_testing.py [--repeat 5]

Each case runs in a fresh interpreter (as a test session starts), with the package's
bytecode cached as pip leaves it after an install (PYTHONPYCACHEPREFIX, warmed by one run
that is not counted), and times from before `import odradek.testing` to the first record
acknowledged (acks=all) by a confluent-kafka producer:

- thread: EmbeddedBroker() in the test's process (the import included: the broker's
  modules load once per process);
- thread, second broker: another EmbeddedBroker in the same process (a test after the
  first: what each function-scoped fixture costs);
- process: EmbeddedBroker(mode="process"), a child `python -m odradek serve`;
- cluster: EmbeddedCluster() of 3 brokers in the process and a private ZooKeeper;
- pytest: what the `odradek_broker` fixture adds to a test session: the wall time of
  `pytest` running one test that produces a record to the fixture's broker, less that of
  the same session running the same test without odradek (`-p no:odradek`, the record
  not sent). Inside pytest, what a bare interpreter also pays (importlib.metadata, which
  the crc32c package imports, among others) is already loaded.

Baselines measured in the same run: the interpreter's own start (`python -c pass`) and
importing confluent-kafka, which every case pays. Memory: the test process's RSS growth
for a broker in a thread, the child's RSS for a broker in a process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGETS = {"thread": 0.5, "process": 1.5, "cluster": 3.0, "pytest": 0.5}

SESSION_TEST = r"""
import os
from confluent_kafka import Producer

def test_one(request):
    if os.environ["BENCH_SESSION"] == "without":
        Producer({"bootstrap.servers": "127.0.0.1:9"})
        return
    bootstrap = request.getfixturevalue("bootstrap_servers")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    done = []
    producer.produce("first", b"x", on_delivery=lambda err, msg: done.append(err))
    producer.flush(30)
    assert done == [None], done
"""

CASE = r"""
import json, os, sys, time
began = time.monotonic()
from confluent_kafka import Producer
from odradek.testing import EmbeddedBroker, EmbeddedCluster

def rss_kib(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

def first_produce(bootstrap):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    done = []
    producer.produce("first", b"x", on_delivery=lambda err, msg: done.append(err))
    producer.flush(30)
    assert done == [None], done

case = sys.argv[1]
before = rss_kib()
out = {}
if case == "cluster":
    with EmbeddedCluster() as cluster:
        first_produce(cluster.bootstrap_servers)
        out["seconds"] = time.monotonic() - began
else:
    broker = EmbeddedBroker(mode=case).start()
    first_produce(broker.bootstrap_servers)
    out["seconds"] = time.monotonic() - began
    if case == "thread":
        out["rss_kib"] = rss_kib() - before
        again = time.monotonic()
        second = EmbeddedBroker().start()
        first_produce(second.bootstrap_servers)
        out["second_seconds"] = time.monotonic() - again
        second.close()
    else:
        out["rss_kib"] = rss_kib(broker._runner.process.pid)
    broker.close()
print(json.dumps(out))
"""


def run(argv: list[str], env: dict[str, str]) -> float:
    began = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.monotonic() - began


def session(with_broker: bool, directory: str, env: dict[str, str]) -> float:
    """One pytest session's wall time, with or without the odradek_broker fixture."""
    plugins = ["no:cacheprovider"] + ([] if with_broker else ["no:odradek"])
    argv = [sys.executable, "-m", "pytest", "-q", *(f"-p{p}" for p in plugins), directory]
    return run(argv, {**env, "BENCH_SESSION": "with" if with_broker else "without"})


def case(name: str, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CASE, name], check=True, env=env,
                          capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median shown)")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="bench-testing-pyc-")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; "
          f"Python {sys.version.split()[0]}; {args.repeat} fresh interpreters per case, "
          "median; bytecode cached")
    for name in ("thread", "process", "cluster"):
        case(name, env)  # warms the bytecode cache (and the OS's file cache)
    interpreter = statistics.median(run([sys.executable, "-c", "pass"], env)
                                    for _ in range(args.repeat))
    client = statistics.median(run([sys.executable, "-c", "import confluent_kafka"], env)
                               for _ in range(args.repeat))
    print(f"baseline: interpreter start {interpreter * 1000:.0f} ms, "
          f"+ import confluent_kafka {client * 1000:.0f} ms (paid by every case below)")
    results = {name: [case(name, env) for _ in range(args.repeat)]
               for name in ("thread", "process", "cluster")}
    tests = tempfile.mkdtemp(prefix="bench-testing-session-")
    with open(os.path.join(tests, "test_session.py"), "w") as f:
        f.write(SESSION_TEST)
    session(True, tests, env)  # warms the bytecode cache of pytest and the test
    sessions = [(session(False, tests, env), session(True, tests, env))
                for _ in range(args.repeat)]
    without = statistics.median(w for w, _ in sessions)
    results["pytest"] = [{"seconds": b - w} for w, b in sessions]
    rows = [("thread (first in the process)", "thread", "seconds"),
            ("thread (next in the process)", "thread", "second_seconds"),
            ("process", "process", "seconds"),
            ("cluster of 3 + ZooKeeper", "cluster", "seconds"),
            ("pytest session, + odradek_broker", "pytest", "seconds")]
    print(f"{'case':32} {'start -> first produce':>24} {'target':>8} {'ratio':>6}")
    for label, name, key in rows:
        seconds = statistics.median(r[key] for r in results[name])
        target = TARGETS[name]
        print(f"{label:32} {seconds * 1000:21.0f} ms {target:7.1f}s {seconds / target:6.2f}")
    for name in ("thread", "process"):
        rss = statistics.median(r["rss_kib"] for r in results[name]) / 1024
        what = "test process grew by" if name == "thread" else "child process RSS"
        print(f"memory, {name}: {what} {rss:.0f} MiB")
    print(f"the pytest row: a session of one test takes {without * 1000:.0f} ms without "
          "odradek; the figure is what the fixture's broker adds to it")
    print("the process-start figures include the interpreter start and the client import "
          "above; docs/testing.md compares them with testcontainers and pytest-kafka")


if __name__ == "__main__":
    main()
