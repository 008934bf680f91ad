"""A private ZooKeeper server: one standalone process for tests, benchmarks and
`odradek cluster up`.

It runs Debian's `zookeeper` package (its jars in /usr/share/java) with `java`, as
`java -cp ... org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`, from a zoo.cfg
it writes in its own directory, never touching the system's /etc/zookeeper or a system
service: data in <directory>/data, logs in <directory>/zookeeper.log (the JVM's own output
in <directory>/zookeeper.out), the client port on loopback (a free one unless given), the
AdminServer off and only the `ruok`, `srvr` and `stat` four-letter words allowed.

    with ZooKeeperServer(tmp_path / "zk") as zk:
        store = ZooKeeperMetadataStore(zk.connect_string + "/kafka", broker_id=1)

stop() and start() again (or restart()) keep the port and the data; kill() is a crash,
pause() and resume() freeze and thaw the process (SIGSTOP, SIGCONT) for fault tests.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

JARS_DIR = Path("/usr/share/java")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# A small heap and the serial collector: a metadata store for a few brokers, on small
# machines, next to the brokers it serves.
DEFAULT_JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
# Debian's ZooKeeper logs through SLF4J 1.7; its log4j 1.2 binding (both are dependencies
# of the package) is preferred, logback (Apache's tarball) next.
_LOG_BINDINGS = (("slf4j-log4j12.jar", "log4j-1.2.jar"),
                 ("logback-classic.jar", "logback-core.jar"))

# Servers with a running process, held until stopped, for the exit hook below.
_running: set[ZooKeeperServer] = set()


class ZooKeeperUnavailableError(RuntimeError):
    """Java or ZooKeeper's jars are not installed, or the server did not start."""


class ZooKeeperServer:
    """One standalone ZooKeeper process. Not thread-safe: one owner starts and stops it.

    Session timeouts from `min_session_timeout_ms` to `max_session_timeout_ms` are granted
    as asked (Kafka's zookeeper.session.timeout.ms is 18 s; fault tests use a few seconds);
    sessions expire on ticks of `tick_time_ms`. `force_sync=False` skips ZooKeeper's fsync
    of its transaction log: faster, and safe against a process crash but not a machine's.
    """

    def __init__(self, directory: Path, port: int = 0, *, host: str = "127.0.0.1",
                 tick_time_ms: int = 500, min_session_timeout_ms: int = 1_000,
                 max_session_timeout_ms: int = 60_000, force_sync: bool = True,
                 config: Mapping[str, str] | None = None, java: str | None = None,
                 jars_dir: Path = JARS_DIR, jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
                 start_timeout: float = 60.0) -> None:
        self.directory = Path(directory).resolve()
        self.host = host
        self.port = port  # 0: a free port, chosen at the first start and kept afterwards
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.config = dict(config or {})
        self.java = java
        self.jars_dir = Path(jars_dir)
        self.jvm_options = tuple(jvm_options)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.started_in: float | None = None  # seconds the last start() took

    # ---- paths and properties ------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_file(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def out_file(self) -> Path:
        """The JVM's standard output and error: start-up failures land here."""
        return self.directory / "zookeeper.out"

    @property
    def connect_string(self) -> str:
        """host:port for a client (zookeeper.connect), without a chroot."""
        if not self.port:
            raise ZooKeeperUnavailableError("the ZooKeeper server has not been started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> ZooKeeperServer:
        """Starts the process and returns once it serves clients (`ruok` answers `imok`
        and `srvr` reports it serving), or raises ZooKeeperUnavailableError."""
        if self.is_running():
            raise ZooKeeperUnavailableError(f"ZooKeeper already runs (pid {self.pid})")
        java = self._find_java()
        classpath = self._classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        chosen = not self.port
        for attempt in range(3):
            if chosen:
                self.port = _free_port(self.host)
            self._write_config()
            began = time.monotonic()
            self._spawn(java, classpath)
            try:
                self._wait_serving(began + self.start_timeout)
            except ZooKeeperUnavailableError:
                self.kill()
                # A port chosen free may have been taken before ZooKeeper bound it.
                if chosen and attempt < 2 and "Address already in use" in self._output():
                    continue
                raise
            self.started_in = time.monotonic() - began
            log.info("ZooKeeper serving on %s (pid %s) after %.2f s", self.connect_string,
                     self.pid, self.started_in)
            return self
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
        process = self.process
        if process is None or process.poll() is not None:
            self._forget()
            return
        if self.paused:
            self.resume()
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("ZooKeeper (pid %s) ignored SIGTERM for %.0f s: killing it",
                        process.pid, timeout)
            process.kill()
            process.wait(timeout)
        self._forget()

    def kill(self) -> None:
        """SIGKILL: a crash. The data directory stays, as after a power cut of the process."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(15)
        self._forget()

    def restart(self) -> None:
        """Stops and starts again on the same port with the same data."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP, returning once every thread of the process has stopped: the server
        answers nothing (sessions are not expired while it is frozen; it expires the
        overdue ones when it resumes)."""
        self._signal(signal.SIGSTOP)
        self.paused = True
        self._wait_stopped(True)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False
        self._wait_stopped(False)

    def four_letter_word(self, word: str, timeout: float = 5.0) -> str:
        """The answer to a four-letter word (ruok, srvr, stat)."""
        return _four_letter_word(self.host, self.port, word, timeout)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.is_running() else "stopped"
        return f"ZooKeeperServer({self.host}:{self.port}, {state}, {self.directory})"

    # ---- internals --------------------------------------------------------------------------

    def _find_java(self) -> str:
        if self.java:  # given: that one or none
            candidates = [self.java]
        elif os.environ.get("JAVA_HOME"):
            candidates = [str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"), "java"]
        else:
            candidates = ["java"]
        for candidate in candidates:
            found = shutil.which(candidate)
            if found:
                return found
        raise ZooKeeperUnavailableError(
            "ZooKeeper needs Java, and no java was found (tried "
            f"{', '.join(candidates)}): install a Java runtime (Debian: apt-get install "
            "default-jre-headless) or set JAVA_HOME")

    def _classpath(self) -> str:
        return os.pathsep.join(str(jar) for jar in zookeeper_classpath(self.jars_dir))

    def _write_config(self) -> None:
        settings = {
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.data_dir),
            "clientPort": str(self.port),
            "clientPortAddress": self.host,
            "minSessionTimeout": str(self.min_session_timeout_ms),
            "maxSessionTimeout": str(self.max_session_timeout_ms),
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat",
            "forceSync": "yes" if self.force_sync else "no",
            # A private server is thrown away with its directory: no purging, small files.
            "autopurge.purgeInterval": "0",
            "preAllocSize": "4096",  # KB of transaction log preallocated (64 MB by default)
            **self.config,
        }
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        log_file = str(self.log_file)
        (self.directory / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, FILE\n"
            "log4j.appender.FILE=org.apache.log4j.FileAppender\n"
            f"log4j.appender.FILE.File={log_file}\n"
            "log4j.appender.FILE.Append=true\n"
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n")
        (self.directory / "logback.xml").write_text(
            "<configuration>\n"
            '  <appender name="FILE" class="ch.qos.logback.core.FileAppender">\n'
            f"    <file>{log_file}</file>\n"
            "    <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>\n"
            "  </appender>\n"
            '  <root level="INFO"><appender-ref ref="FILE"/></root>\n'
            "</configuration>\n")

    def _spawn(self, java: str, classpath: str) -> None:
        argv = [
            java, *self.jvm_options,
            f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
            f"-Dlogback.configurationFile={self.directory / 'logback.xml'}",
            f"-Dzookeeper.log.dir={self.directory}",
            "-cp", classpath, MAIN_CLASS, str(self.config_file),
        ]
        with open(self.out_file, "ab") as out:
            # Its own session: a Ctrl-C meant for the tests does not reach it; the owner
            # (or the exit hook below) stops it.
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, cwd=self.directory,
                                            start_new_session=True)
        self.paused = False
        _running.add(self)

    def _wait_serving(self, deadline: float) -> None:
        assert self.process is not None
        while True:
            if self.process.poll() is not None:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper exited with status {self.process.returncode} at start-up:\n"
                    + self._output())
            try:
                if (_four_letter_word(self.host, self.port, "ruok", 1.0) == "imok"
                        and "Mode:" in _four_letter_word(self.host, self.port, "srvr", 1.0)):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper did not serve on {self.host}:{self.port} within "
                    f"{self.start_timeout:.0f} s:\n" + self._output())
            time.sleep(0.02)  # polling a socket: the server gives no other sign

    def _output(self, lines: int = 30) -> str:
        text = []
        for path in (self.out_file, self.log_file):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    def _signal(self, sig: signal.Signals) -> None:
        if not self.is_running():
            raise ZooKeeperUnavailableError("the ZooKeeper server is not running")
        assert self.process is not None
        self.process.send_signal(sig)

    def _wait_stopped(self, stopped: bool, timeout: float = 10.0) -> None:
        """Waits until the threads are all stopped (state T), or none is (Linux's /proc;
        elsewhere the signal's delivery is not awaited)."""
        assert self.process is not None
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = [(t / "stat").read_text().rpartition(")")[2].split()[0]
                          for t in tasks.iterdir()]
            except OSError:  # no /proc, or a thread ended while listed
                states = None
            if states is None and not tasks.exists():
                return
            if states is not None and all((state == "T") == stopped for state in states):
                return
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper (pid {self.process.pid}) did not "
                    f"{'stop' if stopped else 'continue'} within {timeout:.0f} s")
            time.sleep(0.005)

    def _forget(self) -> None:
        self.process = None
        self.paused = False
        _running.discard(self)


def zookeeper_classpath(jars_dir: Path = JARS_DIR) -> list[Path]:
    """The jars to run ZooKeeper's server: zookeeper.jar and zookeeper-jute.jar, the
    dependencies zookeeper.jar's manifest lists (Debian puts its Class-Path there:
    netty, slf4j-api, metrics, snappy, commons...), and an SLF4J logging binding. From a
    directory of versioned jars without such a manifest (Apache's lib/), every jar."""
    jars_dir = Path(jars_dir)
    server = _jar(jars_dir, "zookeeper")
    jute = _jar(jars_dir, "zookeeper-jute")
    if server is None or jute is None:
        raise ZooKeeperUnavailableError(
            f"ZooKeeper's jars (zookeeper.jar, zookeeper-jute.jar) are not in {jars_dir}: "
            "install Debian's zookeeper package (apt-get install zookeeper)")
    listed = _manifest_class_path(server)
    if not listed:
        return sorted(jars_dir.glob("*.jar"))
    classpath = [server, jute, *(p for p in listed if p.exists() and p not in (server, jute))]
    for binding in _LOG_BINDINGS:
        jars = [jars_dir / name for name in binding]
        if all(jar.exists() for jar in jars):
            classpath += jars
            break
    return classpath


def _jar(jars_dir: Path, name: str) -> Path | None:
    plain = jars_dir / f"{name}.jar"
    if plain.exists():
        return plain
    # Versioned names: zookeeper-3.8.4.jar, zookeeper-jute-3.8.4.jar.
    versioned = sorted(p for p in jars_dir.glob(f"{name}-[0-9]*.jar")
                       if "-" not in p.name[len(name) + 1:].removesuffix(".jar"))
    return versioned[-1] if versioned else None


def _manifest_class_path(jar: Path) -> list[Path]:
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return []
    # Manifest lines are wrapped at 72 bytes; a continuation line starts with a space.
    unwrapped = manifest.replace("\r\n", "\n").replace("\n ", "")
    for line in unwrapped.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "class-path":
            return [(jar.parent / entry).resolve() if not entry.startswith("/") else Path(entry)
                    for entry in value.split()]
    return []


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _four_letter_word(host: str, port: int, word: str, timeout: float) -> str:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


@atexit.register
def _stop_leftovers() -> None:
    """A safety net: no ZooKeeper outlives the Python process that started it."""
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.kill()
