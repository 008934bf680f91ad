"""`odradek cluster up` and `odradek cluster status`: the pure helpers, then the commands
run as an operator runs them, as real processes (ZooKeeper and three brokers)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.wait import wait_until

from odradek.cli import cluster
from odradek.cli.client import EXIT_USAGE, CliError
from odradek.cli.main import build_parser

# ---- helpers ---------------------------------------------------------------------------------


def test_up_defaults_and_options() -> None:
    args = build_parser().parse_args(["cluster", "up"])
    assert (args.brokers, args.data_dir, args.port_base, args.zookeeper_port, args.settings) \
        == (3, "odradek-cluster", 9092, 2181, [])
    args = build_parser().parse_args(["cluster", "up", "--brokers", "5", "--port-base", "0",
                                      "--set", "num.partitions=3"])
    assert (args.brokers, args.port_base, args.settings) == (5, 0, ["num.partitions=3"])
    assert (args.http_port_base, args.no_http) == (None, False)
    for bad in (["--brokers", "0"], ["--port-base", "70000"], ["--zookeeper-port", "x"],
                ["--http-port-base", "-1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["cluster", "up", *bad])


def test_status_takes_the_client_options() -> None:
    args = build_parser().parse_args(["cluster", "status", "--bootstrap-server", "h:1",
                                      "--json", "--timeout", "5s"])
    assert (args.bootstrap_server, args.json, args.timeout) == ("h:1", True, 5.0)


def test_broker_settings() -> None:
    assert cluster.broker_settings(["num.partitions=3", " a = b "]) == {
        "num.partitions": "3", "a": "b"}
    for item in ("broker.id=4", "log.dirs=/x", "listeners=PLAINTEXT://:1",
                 "zookeeper.connect=h:2181", "http.listeners=http://:1"):
        with pytest.raises(CliError) as refused:
            cluster.broker_settings([item])
        assert refused.value.exit_code == EXIT_USAGE
    with pytest.raises(CliError):
        cluster.broker_settings(["no-value"])


def test_broker_ports() -> None:
    assert cluster.broker_ports(3, 9092) == [9092, 9093, 9094]
    assert cluster.broker_ports(2, 0) == [0, 0]
    with pytest.raises(CliError):
        cluster.broker_ports(3, 65534)


def test_http_ports() -> None:
    """Each broker's HTTP listener: 9644, 9645... beside 9092, 9093...; free ports beside
    free ones; as asked; none."""
    assert cluster.http_ports(3, None, 9092) == [9644, 9645, 9646]
    assert cluster.http_ports(2, None, 0) == [0, 0]
    assert cluster.http_ports(2, 8000, 0) == [8000, 8001]
    assert cluster.http_ports(2, 0, 9092) == [0, 0]
    assert cluster.http_ports(2, 8000, 9092, enabled=False) == [None, None]
    with pytest.raises(CliError):
        cluster.http_ports(3, 65534, 9092)


def test_stop_order_puts_the_controller_last() -> None:
    assert cluster.stop_order([3, 1, 2], controller=1) == [2, 3, 1]
    assert cluster.stop_order([2, 1], controller=None) == [1, 2]
    assert cluster.stop_order([2, 3], controller=1) == [2, 3]  # the controller is gone


def test_log_summary_shows_the_errors_else_the_tail() -> None:
    log = "\n".join([
        "2026-11-22 10:56:49,041 INFO odradek.server.network: starting",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in run',
        "OSError: [Errno 98] address already in use",
        "During handling of the above exception, another exception occurred:",
        "ValueError: list.remove(x): x not in list",
        "2026-11-22 10:56:50,000 ERROR odradek.broker: cannot run the broker: boom",
    ])
    assert cluster.log_summary(log).splitlines() == [
        "OSError: [Errno 98] address already in use",
        "ValueError: list.remove(x): x not in list",
        "2026-11-22 10:56:50,000 ERROR odradek.broker: cannot run the broker: boom"]
    quiet = "\n".join(f"line {i}" for i in range(20))
    assert cluster.log_summary(quiet, lines=2) == "line 18\nline 19"



def test_failure_cause_is_one_line_of_the_log() -> None:
    bind_failure = "\n".join([
        "2026-11-22 10:56:49,041 INFO odradek.broker: starting",
        "Traceback (most recent call last):",
        "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 9092): "
        "address already in use",
        "During handling of the above exception, another exception occurred:",
        "ValueError: list.remove(x): x not in list"])
    assert cluster.failure_cause(bind_failure) == "its port is in use (by another process?)"
    assert cluster.failure_cause(
        "odradek serve: invalid configuration: num.partitions=x is invalid\n") \
        == "invalid configuration: num.partitions=x is invalid"
    # The cause, not what the shutdown met after it.
    assert cluster.failure_cause("\n".join([
        "2026-11-22 10:56:49,041 INFO odradek.broker: starting",
        "2026-11-22 10:56:50,000 ERROR odradek: cannot run the broker: disk gone",
        "RuntimeError: later"])) == "cannot run the broker: disk gone"
    assert cluster.failure_cause("a\nlast words\n\n") == "last words"
    assert cluster.failure_cause("") == "it logged nothing"


def _partition(pid: int, leader: int, replicas: list[int], isr: list[int]) -> Any:
    return SimpleNamespace(id=pid, leader=leader, replicas=replicas, isrs=isr)


def test_partition_health() -> None:
    topics = {
        "b": SimpleNamespace(partitions={1: _partition(1, -1, [2], []),
                                         0: _partition(0, 1, [1, 2, 3], [1, 3])}),
        "a": SimpleNamespace(partitions={0: _partition(0, 2, [2, 3], [2, 3])}),
        "empty": SimpleNamespace(partitions={}),
    }
    count, under, offline = cluster.partition_health(topics)
    assert count == 3
    assert under == [{"topic": "b", "partition": 0, "leader": 1, "replicas": [1, 2, 3],
                      "isr": [1, 3]}]
    assert offline == [{"topic": "b", "partition": 1, "leader": None, "replicas": [2],
                        "isr": []}]


def test_a_second_signal_forces_only_after_a_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(cluster.time, "monotonic", lambda: now[0])
    signals = cluster._Signals()
    signals(signal.SIGTERM, None)
    signals(signal.SIGINT, None)  # the same request, delivered twice
    assert signals.stop.is_set() and not signals.forced
    now[0] += cluster._Signals.FORCE_AFTER_S
    signals(signal.SIGINT, None)
    assert signals.forced


def test_pids_left_by_an_earlier_run(tmp_path: Path) -> None:
    pids = cluster._Pids(tmp_path / "pids")
    pids.check_none_left()  # no file
    pids.add("zookeeper", os.getpid())  # this process: its command line lacks tmp_path
    pids.check_none_left()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                str(tmp_path / "broker-1")])
    try:
        # Until it has exec'd, the child's command line is still this process's.
        wait_until(lambda: str(tmp_path).encode() in Path(
            f"/proc/{sleeper.pid}/cmdline").read_bytes(), 10, "the sleeper's exec")
        pids.add("broker-1", sleeper.pid)
        with pytest.raises(CliError, match=rf"broker-1 \(pid {sleeper.pid}\)"):
            cluster._Pids(tmp_path / "pids").check_none_left()
    finally:
        sleeper.kill()
        sleeper.wait()
    cluster._Pids(tmp_path / "pids").check_none_left()
    pids.remove()
    assert not (tmp_path / "pids").exists()


# ---- a cluster on loopback -------------------------------------------------------------------

_PID = re.compile(r"^(zookeeper|broker \d+): .*, pid (\d+), log ")
_HTTP_URL = re.compile(r"^broker \d+: .*, (http://127\.0\.0\.1:\d+)$")


class Up:
    """`odradek cluster up` in the background, its output read as it comes."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        # The last broker to stop finds no broker to hand its leaderships to: its controlled
        # shutdown gives up after its retries; shorter backoffs keep the test short.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "3", "--port-base",
             "0", "--zookeeper-port", "0", "--data-dir", str(data_dir),
             "--set", "zookeeper.session.timeout.ms=6000",
             "--set", "controlled.shutdown.retry.backoff.ms=300"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.bootstrap: str = wait_until(self._bootstrap, 90, "the bootstrap address")
        except BaseException:
            if self.process.poll() is None:  # `up` stops what it started
                self.process.terminate()
                try:
                    self.process.wait(90)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            raise
        self.pids = {m.group(1): int(m.group(2))
                     for m in map(_PID.match, self.lines) if m is not None}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def _bootstrap(self) -> str | None:
        if self.process.poll() is not None:
            self._reader.join(5)
            raise AssertionError(f"cluster up exited {self.process.returncode}:\n"
                                 + "".join(self.lines))
        return next((line.split()[1] for line in self.lines if line.startswith("bootstrap: ")),
                    None)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        finally:
            self._reader.join(5)
        return code

    def explain(self) -> str:
        """Its output, and what the logs of brokers that did not stop cleanly say."""
        text = "".join(self.lines)
        for log in sorted(self.data_dir.glob("broker-*.log")):
            logged = log.read_text(errors="replace")
            if not logged.rstrip().endswith(" stopped"):
                text += f"\n{log.name}:\n{cluster.log_summary(logged, 6)}"
        return text

    def kill_leftovers(self) -> None:
        """Should the test fail half-way: nothing outlives it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP"}
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def odradek_with_input(text: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP"}
    return subprocess.run([sys.executable, "-m", "odradek", *args], input=text,
                          capture_output=True, text=True, timeout=60, env=env)


def restart_broker(broker_id: int, data_dir: Path) -> subprocess.CompletedProcess[str]:
    done = odradek("cluster", "restart-broker", str(broker_id), "--data-dir", str(data_dir))
    assert "Traceback" not in done.stderr, done
    return done


def status(up: Up, *extra: str) -> subprocess.CompletedProcess[str]:
    return odradek("cluster", "status", "--bootstrap-server", up.bootstrap, *extra)


def status_json(up: Up) -> dict[str, Any]:
    shown = status(up, "--json")
    # Offline: say, a new topic's partitions, their leaders on their way.
    assert shown.returncode in (0, cluster.EXIT_OFFLINE), shown
    answer: dict[str, Any] = json.loads(shown.stdout)
    return answer


def status_when(up: Up, what: str, condition: Callable[[dict[str, Any]], bool]
                ) -> dict[str, Any]:
    """`cluster status --json` once its answer meets `condition`."""
    last: list[dict[str, Any]] = []

    def shown() -> dict[str, Any] | None:
        answer = status_json(up)
        last[:] = [answer]
        return answer if condition(answer) else None

    try:
        answer: dict[str, Any] = wait_until(shown, 30, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; last shown: {last}") from None
    return answer


@pytest.fixture
def ups() -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        up.kill_leftovers()


def test_up_status_stop_and_up_again(tmp_path: Path, ups: list[Up]) -> None:
    data_dir = tmp_path / "local"
    up = Up(data_dir)
    ups.append(up)
    assert set(up.pids) == {"zookeeper", "broker 1", "broker 2", "broker 3"}, up.lines
    # Each broker's HTTP listener, on a free port (--port-base 0), printed with it: ready.
    urls = [m.group(1) for m in map(_HTTP_URL.search, up.lines) if m is not None]
    assert len(set(urls)) == 3, up.lines
    for url in urls:
        with urllib.request.urlopen(f"{url}/health/live", timeout=30) as response:
            assert response.read() == b"ok\n"
    created = odradek("topics", "create", "events", "--partitions", "3",
                      "--replication-factor", "3", "--bootstrap-server", up.bootstrap)
    assert created.returncode == 0, created
    answer = status_when(up, "a healthy cluster", lambda a: a["partitions"] == 3 and not (
        a["under_replicated"] or a["offline"]))
    assert [b["id"] for b in answer["brokers"]] == [1, 2, 3]
    assert answer["controller"] in (1, 2, 3) and answer["cluster_id"]
    text = status(up)
    assert text.returncode == 0, text
    assert f"controller: {answer['controller']}" in text.stdout
    assert f"{answer['controller']} (controller)" in text.stdout
    assert "3 brokers, 3 partitions: 0 under-replicated, 0 offline" in text.stdout, text
    described = odradek("topics", "describe", "events", "--json",
                        "--bootstrap-server", up.bootstrap)
    partitions = json.loads(described.stdout)[0]["partitions"]
    assert all(sorted(p["replicas"]) == [1, 2, 3] and p["leader"] in p["replicas"]
               for p in partitions), partitions
    produced = subprocess.run(
        [sys.executable, "-m", "odradek", "produce", "events", "--bootstrap-server",
         up.bootstrap, "--acks", "all"], input="kept\n", capture_output=True, text=True,
        timeout=60)
    assert produced.returncode == 0, produced

    assert up.stop() == 0, up.explain()
    assert up.lines[-1].strip() == "stopping", up.lines
    for name, pid in up.pids.items():
        assert wait_until(lambda pid=pid: not _alive(pid), 10, f"{name} gone")
    for i in (1, 2, 3):  # each broker stopped cleanly
        assert (data_dir / f"broker-{i}" / ".kafka_cleanshutdown").exists()
    assert not (data_dir / "pids").exists()

    # Started again on the same directory: the same cluster, its topic and its data.
    again = Up(data_dir)
    ups.append(again)
    answer2 = status_when(again, "the topic again", lambda a: a["partitions"] == 3)
    assert answer2["cluster_id"] == answer["cluster_id"]
    consumed = odradek("consume", "events", "--from-beginning", "--until-end", "--json",
                       "--timeout", "20s", "--bootstrap-server", again.bootstrap)
    assert [json.loads(line)["value"] for line in consumed.stdout.splitlines()] == ["kept"], \
        consumed

    # A broker killed: its replicas leave the ISRs, and a partition only it held goes
    # offline, which `status` says in its exit status. First every replica back in sync
    # after the restart: a partition whose ISR is still the victim alone would go offline
    # too (no unclean election), and the test would race the followers.
    status_when(again, "every replica in sync again", lambda a: not (
        a["under_replicated"] or a["offline"]))
    admin = AdminClient({"bootstrap.servers": again.bootstrap, "log_level": 0})
    victim = next(i for i in (1, 2, 3) if i != answer2["controller"])
    admin.create_topics([NewTopic("solo", 1, replica_assignment=[[victim]])])["solo"].result(30)
    os.kill(again.pids[f"broker {victim}"], signal.SIGKILL)
    # (consume made __consumer_offsets, whose replicas on the victim are gone too.)
    status_when(again, "solo offline, events under-replicated", lambda a: (
        [r["topic"] for r in a["offline"]] == ["solo"]
        and sum(r["topic"] == "events" for r in a["under_replicated"]) == 3))
    text = status(again)
    assert text.returncode == cluster.EXIT_OFFLINE, text
    assert "offline partitions:" in text.stdout and "under-replicated partitions:" in text.stdout
    assert re.search(rf"^solo\s+0\s+-\s+{victim}\s", text.stdout, re.M), text.stdout
    assert re.search(r"^2 brokers, \d+ partitions: \d+ under-replicated, 1 offline$",
                     text.stdout, re.M), text
    assert wait_until(lambda: any(
        f"broker {victim} exited with status -9; see {data_dir}/broker-{victim}.log; start it "
        f"again with: odradek cluster restart-broker {victim} --data-dir {data_dir}" in line
        for line in again.lines), 10, "the exit reported")

    # Started again from another terminal: on its port and its data, it rejoins; its
    # replicas catch up and go back into the ISRs, and the partition only it holds is back.
    port = next(line for line in again.lines if line.startswith(f"broker {victim}: ")
                ).split()[2].rstrip(",")
    restarted = restart_broker(victim, data_dir)
    assert restarted.returncode == 0, (restarted, again.explain())
    shown = _PID.match(restarted.stdout.splitlines()[-1])
    assert shown is not None and f": {port}, pid " in shown.group(0), restarted.stdout
    again.pids[f"broker {victim}"] = int(shown.group(2))
    status_when(again, "every replica in sync again", lambda a: len(a["brokers"]) == 3 and not (
        a["under_replicated"] or a["offline"]))
    produced = odradek_with_input("back\n", "produce", "solo", "--acks", "all",
                                  "--bootstrap-server", again.bootstrap)
    assert produced.returncode == 0, produced
    consumed = odradek("consume", "solo", "--from-beginning", "--until-end", "--json",
                       "--timeout", "20s", "--bootstrap-server", again.bootstrap)
    assert [json.loads(line)["value"] for line in consumed.stdout.splitlines()] == ["back"], \
        consumed

    # A running broker (the controller): a controlled shutdown first, then the same.
    controller = status_json(again)["controller"]
    restarted = restart_broker(controller, data_dir)
    assert restarted.returncode == 0, (restarted, again.explain())
    assert f"stopping broker {controller} (a controlled shutdown)" in restarted.stdout
    shown = _PID.match(restarted.stdout.splitlines()[-1])
    assert shown is not None, restarted.stdout
    assert not _alive(again.pids[f"broker {controller}"])
    again.pids[f"broker {controller}"] = int(shown.group(2))
    status_when(again, "in sync after the rolling restart", lambda a: len(a["brokers"]) == 3
                and not (a["under_replicated"] or a["offline"]))
    produced = odradek_with_input("rolled\n", "produce", "events", "--acks", "all",
                                  "--bootstrap-server", again.bootstrap)
    assert produced.returncode == 0, produced
    assert not any(f"broker {controller} exited" in line for line in again.lines), again.lines

    unknown = restart_broker(9, data_dir)
    assert unknown.returncode == 1, unknown
    assert unknown.stderr == ("odradek cluster restart-broker: no broker 9: this cluster has "
                              "brokers 1, 2, 3\n"), unknown

    assert again.stop() == 0, again.explain()
    assert not (data_dir / "control.sock").exists()
    for name, pid in again.pids.items():
        assert wait_until(lambda pid=pid: not _alive(pid), 10, f"{name} gone")


def test_refuses_a_directory_in_use(tmp_path: Path) -> None:
    lock = (tmp_path / ".lock").open("w")  # as a running `up` holds it
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        refused = odradek("cluster", "up", "--data-dir", str(tmp_path), "--port-base", "0")
    finally:
        lock.close()
    assert refused.returncode == 1, refused
    assert "another `odradek cluster up` runs on" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_refuses_ports_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:  # as the README's broker on 9092 would
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = odradek("cluster", "up", "--data-dir", str(tmp_path), "--brokers", "1",
                          "--port-base", str(port), "--zookeeper-port", "0")
    assert refused.returncode == 1, refused
    assert f"port {port} is in use" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "zookeeper").exists()  # nothing was started


def test_status_of_no_cluster() -> None:
    done = odradek("cluster", "status", "--bootstrap-server", "127.0.0.1:1", "--timeout", "1s")
    assert done.returncode == 1, done
    assert done.stderr.startswith("odradek cluster status: ") and "Traceback" not in done.stderr


def test_up_usage_errors() -> None:
    done = odradek("cluster", "up", "--set", "broker.id=7")
    assert done.returncode == 2, done
    assert "sets it for each broker itself" in done.stderr



def test_restart_broker_without_up(tmp_path: Path) -> None:
    for data_dir in (tmp_path / "none", tmp_path):
        done = restart_broker(2, data_dir)
        assert (done.returncode, done.stderr) == (
            1, f"odradek cluster restart-broker: no `odradek cluster up` runs on {data_dir}\n")
    # The socket a killed `up` left: nothing listens on it.
    with socket.socket(socket.AF_UNIX) as left:
        left.bind(str(tmp_path / "control.sock"))
    done = restart_broker(2, tmp_path)
    assert done.returncode == 1 and "no `odradek cluster up` runs on" in done.stderr, done
    # A directory too deep for a Unix socket's address: the socket is reached all the same
    # (here: nothing listens, and that is what is said).
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    done = restart_broker(2, deep)
    assert done.stderr == (f"odradek cluster restart-broker: no `odradek cluster up` runs on "
                           f"{deep}\n"), done


def _processes_on(directory: Path) -> list[str]:
    """The live processes with `directory` in their command line."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if os.fsencode(directory) in cmdline.read_bytes() and _alive(
                    int(cmdline.parent.name)):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def _fails_cleanly(done: subprocess.CompletedProcess[str], data_dir: Path) -> str:
    """The one line `up` ended with, once checked that it is all it said on stderr, that
    it exited 1 and that nothing it started still runs."""
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert wait_until(lambda: not _processes_on(data_dir), 15, "every process gone")
    assert not (data_dir / "pids").exists() and not (data_dir / "control.sock").exists()
    return done.stderr


def test_up_fails_cleanly_when_no_broker_starts(tmp_path: Path) -> None:
    # Every broker exits at once: there is no broker left to stop.
    done = odradek("cluster", "up", "--brokers", "2", "--port-base", "0", "--zookeeper-port",
                   "0", "--data-dir", str(tmp_path), "--set", "num.partitions=many")
    line = _fails_cleanly(done, tmp_path)
    assert re.fullmatch(
        rf"odradek cluster up: broker (\d) \(a free port on 127\.0\.0\.1\) exited with status "
        rf"2 while starting: invalid configuration: num\.partitions=many is invalid: .*; "
        rf"see {re.escape(str(tmp_path))}/broker-\1\.log\n", line), line


def test_up_fails_cleanly_when_a_broker_cannot_bind(tmp_path: Path) -> None:
    # A port taken after `up` checked it (a race check_ports_free cannot close): broker 1
    # cannot bind and exits; broker 2, started, is stopped.
    code = ("import sys; from odradek.cli import cluster; "
            "cluster.check_ports_free = lambda ports: None; "
            "from odradek.cli.main import main; sys.exit(main(sys.argv[1:]))")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", code, "cluster", "up", "--brokers", "2", "--port-base",
             str(port), "--zookeeper-port", "0", "--data-dir", str(tmp_path),
             "--set", "controlled.shutdown.retry.backoff.ms=200"],
            capture_output=True, text=True, timeout=120)
    line = _fails_cleanly(done, tmp_path)
    assert line == (f"odradek cluster up: broker 1 (127.0.0.1:{port}) exited with status 1 "
                    f"while starting: its port is in use (by another process?); see "
                    f"{tmp_path}/broker-1.log\n"), line
