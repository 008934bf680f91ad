"""Where ACLs live: ZooKeeper in Kafka's own format (ZkAclStore), or one JSON file for a
single-node broker (EmbeddedAclStore). Both are an AclStore.

ZooKeeper, as Kafka's AclAuthorizer keeps it (kafka.zk.ZkData, KafkaZkClient):

    /kafka-acl/<Type>/<name>                     the ACLs of a LITERAL pattern
    /kafka-acl-extended/prefixed/<Type>/<name>   the ACLs of a PREFIXED pattern
        {"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",
                  "operation":"Read"}],"version":1}
    /kafka-acl-changes/acl_changes_<seq>           "TOPIC:orders" (a LITERAL pattern changed)
    /kafka-acl-extended-changes/acl_changes_<seq>
        {"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}

<Type> is the Pascal-case name (Topic, Group, Cluster, TransactionalId, DelegationToken,
User). The JSON is what Kafka 3.9 writes byte for byte (its keys in the order of Java's
HashMap); Kafka 3.7 and before wrote "version" first and "operation" before "host", which
we read as well.

Each change of a resource's ACLs is a conditional write (the znode's version; a create
for a new one) and, in the same ZooKeeper transaction, a sequential change notification:
two brokers changing one resource at once both succeed, one after re-reading (up to
`max_update_retries` times, as Kafka's updateResourceAcls), and a notification exists iff
its change does. Every broker watches the change znodes, reads the resources they name
and tells its listener (Kafka's ZkNodeChangeNotificationListener, with the same purge of
notifications older than 15 minutes).

Threads: every method blocks on ZooKeeper (or the disk): call them from a worker thread
(asyncio.to_thread), never on the event loop. The listener is called on the store's
threads: on kazoo's and the store's notification thread for changes made elsewhere, and
on the caller's thread, before create_acls/delete_acls return, for its own changes. It is
called in the order of the changes, one call at a time, and must not block or call the
store: AclAuthorizer.apply qualifies as it is; anything owned by an event loop should be
handed over with loop.call_soon_threadsafe.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import KazooRetry

from odradek.protocol.exceptions import KafkaError
from odradek.security.acl import (
    RESOURCE_TYPES,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclChanges,
    AclDeleteResult,
    AclOperation,
    AclPermissionType,
    InvalidRequestError,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
    validate_acl_binding,
)
from odradek.storage.checkpoints import write_durably

log = logging.getLogger(__name__)

T = TypeVar("T")
AclChangeListener = Callable[[AclChanges], None]
Acls = dict[ResourcePattern, frozenset[AccessControlEntry]]

LITERAL_ACL_PATH = "/kafka-acl"  # LiteralAclStore.aclPath
EXTENDED_ACL_PATH = "/kafka-acl-extended"  # ExtendedAclZNode.path
PREFIXED_ACL_PATH = f"{EXTENDED_ACL_PATH}/prefixed"  # ExtendedAclStore(PREFIXED).aclPath
LITERAL_CHANGES_PATH = "/kafka-acl-changes"  # LiteralAclChangeStore.aclChangePath
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"  # ExtendedAclChangeStore.aclChangePath
CHANGE_PREFIX = "acl_changes_"  # ZkAclChangeStore.SequenceNumberPrefix
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # ZkNodeChangeNotificationListener.changeExpirationMs
ACL_VERSION = 1  # AclEntry.CURRENT_VERSION
ACL_FILE = "odradek-acls.json"  # the embedded store's file, in the first log dir


class AclStoreError(KafkaError):
    """A store failure: UNKNOWN_SERVER_ERROR on the wire, as Kafka answers it."""


class AclStore(Protocol):
    """Where the ACLs are kept. Every method blocks: call it in a worker thread."""

    def start(self, listener: AclChangeListener) -> None:
        """Loads every ACL and gives them to `listener` (a full AclChanges), then every
        change after that, wherever it is made, for as long as the store is open."""
        ...

    def load_all(self) -> Acls:
        """Every resource pattern with ACLs, and its ACLs."""
        ...

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Adds the ACLs (those there already stay, once): one result per binding, None
        when it was created (or already existed)."""
        ...

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Deletes the ACLs the filters match: per filter, the bindings it deleted. A
        binding matched by several filters is reported under the first."""
        ...

    def close(self) -> None:
        ...


# ---- znodes (pure functions) ----------------------------------------------------------------


def acl_root(pattern_type: PatternType) -> str:
    """ZkAclStore(patternType).aclPath."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ACL_PATH
    raise ValueError(f"Invalid pattern type: {pattern_type.name}")


def resource_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{acl_root(pattern_type)}/{resource_type.security_name}"


def resource_path(pattern: ResourcePattern) -> str:
    """ResourceZNode.path: /kafka-acl/Topic/orders, /kafka-acl-extended/prefixed/Topic/o."""
    return f"{resource_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def acl_paths() -> list[str]:
    """The persistent znodes KafkaZkClient.createAclPaths makes sure of."""
    paths = []
    for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
        paths.append(acl_root(pattern_type))
        paths.extend(resource_type_path(pattern_type, t) for t in RESOURCE_TYPES)
    return [*paths, LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH]


def _compact(value: Any) -> bytes:
    """Jackson's compact JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _entry_json(e: AccessControlEntry) -> dict[str, str]:
    # Kafka 3.9's AclEntry.toMap is a java.util.HashMap: these keys iterate in this order.
    return {"principal": e.principal, "permissionType": e.permission_type.security_name,
            "host": e.host, "operation": e.operation.security_name}


def _sorted_entries(entries: Iterable[AccessControlEntry]) -> list[AccessControlEntry]:
    # Kafka writes its Set in no particular order; we write a stable one.
    return sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """ResourceZNode.encode, as Kafka 3.9 writes it (toJsonCompatibleMap is a HashMap too:
    "acls" before "version")."""
    return _compact({"acls": [_entry_json(e) for e in _sorted_entries(entries)],
                     "version": ACL_VERSION})


def _entries_from_json(items: Iterable[Any], where: str) -> frozenset[AccessControlEntry]:
    entries = set()
    for item in items:
        try:
            principal = str(parse_principal(item["principal"]))
            entries.add(AccessControlEntry(
                principal, str(item["host"]),
                AclOperation.from_security_name(item["operation"]),
                AclPermissionType.from_security_name(item["permissionType"])))
        except (KeyError, TypeError, ValueError) as e:
            # Kafka would fail to load; a broker here keeps the others and says so.
            log.error("ignoring a malformed ACL in %s: %r (%s)", where, item, e)
    return frozenset(entries)


def decode_acls(data: bytes | None, where: str = "") -> frozenset[AccessControlEntry]:
    """AclEntry.fromBytes: an empty znode holds no ACL."""
    if not data:
        return frozenset()
    parsed = json.loads(data)
    if parsed.get("version") != ACL_VERSION:
        raise ValueError(f"{where}: unsupported ACL format version {parsed.get('version')!r}")
    return _entries_from_json(parsed.get("acls") or (), where)


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The change notification of a pattern: its sequential znode's prefix and its data."""
    if pattern.pattern_type == PatternType.LITERAL:
        # LiteralAclChangeStore: the legacy form, ResourceType.toString (the enum name)
        return (f"{LITERAL_CHANGES_PATH}/{CHANGE_PREFIX}",
                f"{pattern.resource_type.name}:{pattern.name}".encode())
    return (f"{EXTENDED_CHANGES_PATH}/{CHANGE_PREFIX}",
            _compact({"version": 1, "resourceType": pattern.resource_type.name,
                      "name": pattern.name, "patternType": pattern.pattern_type.name}))


def decode_change(changes_path: str, data: bytes) -> ResourcePattern:
    """The pattern a change notification names; ValueError if it names none."""
    text = data.decode()
    if changes_path == LITERAL_CHANGES_PATH:
        type_name, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format ResourceType:ResourceName but got {text}")
        # ResourceType.fromString; "Topic:..." of old Kafka versions reads as well
        resource_type = (ResourceType.from_string(type_name)
                         or ResourceType.from_security_name(type_name))
        pattern_type = PatternType.LITERAL
    else:
        event = json.loads(text)
        if int(event.get("version", 0)) > 1:
            raise ValueError(f"Acl change event received for unsupported version: "
                             f"{event['version']}")
        resource_type = ResourceType.from_string(event["resourceType"])
        pattern_type = PatternType.from_string(event["patternType"])
        name = event["name"]
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or not pattern_type.is_specific:
        raise ValueError(f"no resource pattern in the ACL change event {text!r}")
    return ResourcePattern(resource_type, name, pattern_type)


def _sequence(child: str) -> int:
    return int(child[len(CHANGE_PREFIX):])


def _pattern_key(p: ResourcePattern) -> tuple[int, int, str]:
    return (p.resource_type, p.pattern_type, p.name)


# ---- what both stores do the same ----------------------------------------------------------


class _AclStoreBase:
    """create_acls and delete_acls over one primitive of each store: `_update`, a
    resource's ACLs changed by a function of its current ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one change (or notification batch) at a time
        self._listener: AclChangeListener | None = None

    def _update(self, pattern: ResourcePattern,
                change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
                ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        """Applies `change` to the pattern's ACLs as stored; returns (before, after)."""
        raise NotImplementedError

    def _candidates(self, filters: Sequence[AclBindingFilter]) -> Iterable[ResourcePattern]:
        """The stored patterns that the filters may match (a superset will do)."""
        raise NotImplementedError

    def _read_many(self, patterns: Sequence[ResourcePattern]) -> Acls:
        """The ACLs of the patterns now (all at once), to skip those nothing matches."""
        raise NotImplementedError

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        results: list[KafkaError | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            try:
                validate_acl_binding(binding)
            except InvalidRequestError as e:
                results[i] = e
                continue
            by_pattern.setdefault(binding.pattern, []).append(i)
        changes: Acls = {}
        with self._lock:
            for pattern, indexes in by_pattern.items():
                added = frozenset(bindings[i].entry for i in indexes)
                try:
                    before, after = self._update(pattern, added.union)
                except Exception as e:
                    log.warning("could not add ACLs to %s: %r", pattern, e)
                    error = _kafka_error(e, f"Failed to create ACLs for {pattern}")
                    for i in indexes:
                        results[i] = error
                    continue
                if before != after:
                    changes[pattern] = after
                    log.info("ACLs of %s: added %s", pattern,
                             ", ".join(str(e) for e in _sorted_entries(after - before)))
            self._emit(AclChanges(changes))
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        deleted: list[list[tuple[AclBinding, KafkaError | None]]] = [[] for _ in filters]
        errors: list[KafkaError | None] = [None] * len(filters)
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(filters):
            if f.pattern_filter.is_unknown:  # AclControlManager.validateFilter
                errors[i] = InvalidRequestError("Unknown patternFilter.")
            elif f.entry_filter.is_unknown:
                errors[i] = InvalidRequestError("Unknown entryFilter.")
            else:
                valid.append((i, f))
        changes: Acls = {}
        with self._lock:
            try:
                candidates = sorted(set(self._candidates([f for _, f in valid])),
                                    key=_pattern_key)
                current = self._read_many(candidates)
            except Exception as e:
                log.warning("could not list the ACLs to delete: %r", e)
                for i, _ in valid:
                    errors[i] = _kafka_error(e, "Failed to delete ACLs")
                candidates, current = [], {}
            for pattern in candidates:
                matching = [(i, f) for i, f in valid if f.pattern_filter.matches(pattern)]
                if not any(f.entry_filter.matches(e) for _, f in matching
                           for e in current.get(pattern, ())):
                    continue  # one write (and its read) per resource that loses an ACL only
                removed: dict[AclBinding, int] = {}  # each to the first filter matching it
                try:
                    before, after = self._update(pattern, _remover(pattern, matching, removed))
                except Exception as e:
                    log.warning("could not delete ACLs of %s: %r", pattern, e)
                    error = _kafka_error(e, f"Failed to delete ACLs of {pattern}")
                    for binding, i in removed.items():
                        deleted[i].append((binding, error))
                    continue
                for binding, i in removed.items():
                    deleted[i].append((binding, None))
                if before != after:
                    changes[pattern] = after
                    log.info("ACLs of %s: deleted %s", pattern,
                             ", ".join(str(e) for e in _sorted_entries(before - after)))
            self._emit(AclChanges(changes))
        return [AclDeleteResult(deleted[i], errors[i]) for i in range(len(filters))]

    def _emit(self, changes: AclChanges) -> None:
        """Called with self._lock held: listeners hear of changes in their order."""
        listener = self._listener
        if listener is None or not (changes.acls or changes.full):
            return
        try:
            listener(changes)
        except Exception:
            log.exception("an ACL change listener failed")


def _remover(pattern: ResourcePattern, matching: list[tuple[int, AclBindingFilter]],
             removed: dict[AclBinding, int]
             ) -> Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]:
    def remove(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
        removed.clear()  # a retry starts again from what is stored then
        kept = set()
        for entry in current:
            first = next((i for i, f in matching if f.entry_filter.matches(entry)), None)
            if first is None:
                kept.add(entry)
            else:
                removed[AclBinding(pattern, entry)] = first
        return frozenset(kept)

    return remove


def _kafka_error(e: Exception, context: str) -> KafkaError:
    if isinstance(e, KafkaError):
        return e
    return AclStoreError(f"{context}: {e!r}")


# ---- ZooKeeper -------------------------------------------------------------------------------


class ZkAclStore(_AclStoreBase):
    """The ACLs in ZooKeeper, through the broker's kazoo client (its session, its chroot).
    The client stays the caller's: close() stops the watches, not the client."""

    def __init__(self, client: KazooClient, *, change_expiration_ms: int = CHANGE_EXPIRATION_MS,
                 max_update_retries: int = 10, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30_000,
                 clock_ms: Callable[[], int] | None = None) -> None:
        super().__init__()
        self.client = client
        self.change_expiration_ms = change_expiration_ms
        self.max_update_retries = max_update_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout = request_timeout_ms / 1000
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._last_executed = {LITERAL_CHANGES_PATH: -1, EXTENDED_CHANGES_PATH: -1}
        self._queued: set[str] = set()  # change paths with a pass waiting to start
        self._queue_lock = threading.Lock()
        # Notification passes and reloads, one at a time and in order, off kazoo's threads.
        self._events = ThreadPoolExecutor(1, thread_name_prefix="zk-acl-changes")
        self._paths_ready = False
        self._session_lost = False
        self._closed = False

    # ---- life cycle ------------------------------------------------------------------------

    def start(self, listener: AclChangeListener) -> None:
        """Loads every ACL into `listener`, then follows the change notifications. The
        notifications there already are taken as read: the load sees their changes."""
        self.ensure_paths()
        with self._lock:
            self._listener = listener
            self._reload()
        self.client.add_listener(self._on_state)
        for path in (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH):
            ChildrenWatch(self.client, path, self._watcher(path))

    def close(self) -> None:
        self._closed = True
        with suppress(Exception):
            self.client.remove_listener(self._on_state)
        self._events.shutdown(wait=False, cancel_futures=True)

    def ensure_paths(self) -> None:
        """KafkaZkClient.createAclPaths."""
        if self._paths_ready:
            return

        def create_all() -> None:
            pending = [self.client.create_async(p, makepath=True) for p in acl_paths()]
            for result in pending:
                with suppress(NodeExistsError):
                    self._wait(result)

        self._read(create_all)
        self._paths_ready = True

    # ---- reads ------------------------------------------------------------------------------

    def load_all(self) -> Acls:
        """Every ACL in ZooKeeper (AclAuthorizer.loadAllAcls), the reads pipelined."""
        def read() -> Acls:
            pending = {}
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                root = acl_root(pattern_type)
                for type_name in self._children_or_empty(root):
                    resource_type = ResourceType.from_security_name(type_name)
                    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
                        log.warning("Ignoring unknown ResourceType: %s", type_name)
                        continue
                    for name in self._children_or_empty(f"{root}/{type_name}"):
                        pattern = ResourcePattern(resource_type, name, pattern_type)
                        pending[pattern] = self.client.get_async(f"{root}/{type_name}/{name}")
            return self._collect(pending)

        return self._read(read)

    def read_acls(self, patterns: Iterable[ResourcePattern]) -> Acls:
        """The ACLs of each pattern now (an empty set for one without), pipelined."""
        def read() -> Acls:
            pending = {p: self.client.get_async(resource_path(p)) for p in patterns}
            acls = {p: frozenset[AccessControlEntry]() for p in pending}
            acls.update(self._collect(pending))
            return acls

        return self._read(read)

    def _read_many(self, patterns: Sequence[ResourcePattern]) -> Acls:
        return self.read_acls(patterns)

    def _collect(self, pending: dict[ResourcePattern, Any]) -> Acls:
        acls = {}
        for pattern, result in pending.items():
            try:
                data, _ = self._wait(result)
            except NoNodeError:
                continue
            try:
                entries = decode_acls(data, resource_path(pattern))
            except ValueError as e:
                log.error("ignoring the ACLs of %s: %s", pattern, e)
                continue
            if entries:
                acls[pattern] = entries
        return acls

    def _get_versioned(self, pattern: ResourcePattern
                       ) -> tuple[frozenset[AccessControlEntry], int]:
        """A resource's ACLs and its znode's version (-1: no znode)."""
        try:
            data, stat = self._wait(self.client.get_async(resource_path(pattern)))
        except NoNodeError:
            return frozenset(), -1
        return decode_acls(data, resource_path(pattern)), int(stat.version)

    def _candidates(self, filters: Sequence[AclBindingFilter]) -> Iterable[ResourcePattern]:
        """Read from ZooKeeper, not from any cache, so that a filter also deletes ACLs this
        broker has not heard of yet (Kafka's MATCH filters only see its cache)."""
        direct: set[ResourcePattern] = set()
        listed: set[tuple[PatternType, ResourceType]] = set()
        for f in filters:
            pf = f.pattern_filter
            types = RESOURCE_TYPES if pf.resource_type == ResourceType.ANY else (
                pf.resource_type,)
            pattern_types = ((pf.pattern_type,) if pf.pattern_type.is_specific
                             else (PatternType.LITERAL, PatternType.PREFIXED))
            for t in types:
                for pt in pattern_types:
                    if pf.name is not None and pf.pattern_type != PatternType.MATCH:
                        direct.add(ResourcePattern(t, pf.name, pt))
                    else:
                        listed.add((pt, t))

        def read() -> set[ResourcePattern]:
            pending = {(pt, t): self.client.get_children_async(resource_type_path(pt, t))
                       for pt, t in listed}
            found = set(direct)
            for (pt, t), result in pending.items():
                with suppress(NoNodeError):
                    found.update(ResourcePattern(t, name, pt) for name in self._wait(result))
            return found

        return self._read(read)

    # ---- writes -----------------------------------------------------------------------------

    def _update(self, pattern: ResourcePattern,
                change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
                ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        """Kafka's updateResourceAcls: read, change, write conditionally on the version
        read (with the change notification, in one transaction), again on a conflict."""
        self.ensure_paths()
        path = resource_path(pattern)
        change_prefix, change_data = encode_change(pattern)
        conflicts = 0
        deadline = time.monotonic() + self.request_timeout
        while True:
            current, version = self._read(lambda: self._get_versioned(pattern))
            new = change(current)
            if new == current:
                return current, new
            tx = self.client.transaction()
            if new and version >= 0:
                tx.set_data(path, encode_acls(new), version)
            elif new:
                tx.create(path, encode_acls(new))
            else:
                tx.delete(path, version)
            tx.create(change_prefix, change_data, sequence=True)
            try:
                results = self._wait(tx.commit_async())
            except (ConnectionLoss, OperationTimeoutError, KazooTimeoutError):
                # Lost on the way: it may or may not have been applied. Read again (a
                # write that was applied makes this one a conflict, or no change at all).
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            failure = next((r for r in results if isinstance(r, Exception)
                            and not isinstance(r, RolledBackError)), None)
            if failure is None:
                return current, new
            if not isinstance(failure, (BadVersionError, NoNodeError, NodeExistsError)):
                raise failure
            conflicts += 1
            if conflicts > self.max_update_retries:
                raise AclStoreError(f"Failed to update ACLs for {pattern} after trying a "
                                    f"maximum of {self.max_update_retries} times")
            log.debug("ACLs of %s changed meanwhile (version %d): reading them again",
                      pattern, version)
            time.sleep((self.retry_backoff_ms + random.randrange(50)) / 1000)

    # ---- change notifications ----------------------------------------------------------------

    def _watcher(self, path: str) -> Callable[[list[str]], bool | None]:
        def on_children(children: list[str]) -> bool | None:  # kazoo's thread: no blocking
            if self._closed:
                return False  # stops the watch
            self._enqueue(path)
            return None

        return on_children

    def _enqueue(self, path: str) -> None:
        """One pass queued per path at most: a pass reads all the children anyway."""
        with self._queue_lock:
            if path in self._queued:
                return
            self._queued.add(path)
        with suppress(RuntimeError):  # shut down: closing
            self._events.submit(self._process, path)

    def _process(self, path: str) -> None:
        """ZkNodeChangeNotificationListener.processNotifications: the notifications after
        the last one processed, each resource they name read once, then the purge."""
        with self._queue_lock:
            self._queued.discard(path)
        if self._closed:
            return
        try:
            with self._lock:
                children = self._read(lambda: self._children_or_empty(path))
                fresh = sorted((c for c in children if c.startswith(CHANGE_PREFIX)
                                and _sequence(c) > self._last_executed[path]), key=_sequence)
                if fresh:
                    log.info("Processing notification(s) to %s", path)
                    patterns = self._notified_patterns(path, fresh)
                    acls = self.read_acls(patterns)
                    self._last_executed[path] = _sequence(fresh[-1])
                    self._emit(AclChanges(acls))
            self._purge(path, children)
        except Exception:
            log.exception("Error while processing notification change for path = %s", path)

    def _notified_patterns(self, path: str, children: list[str]) -> list[ResourcePattern]:
        def read() -> list[tuple[str, bytes | None]]:
            pending = [(c, self.client.get_async(f"{path}/{c}")) for c in children]
            out = []
            for child, result in pending:
                try:
                    out.append((child, self._wait(result)[0]))
                except NoNodeError:
                    out.append((child, None))
            return out

        patterns: dict[ResourcePattern, None] = {}  # in order, each once
        for child, data in self._read(read):
            if data is None:
                log.warning("read null data from %s/%s", path, child)
                continue
            try:
                patterns[decode_change(path, data)] = None
            except (ValueError, KeyError, TypeError) as e:
                log.error("error processing change notification %r from %s/%s: %s",
                          data, path, child, e)
        return list(patterns)

    def _purge(self, path: str, children: list[str]) -> None:
        """Deletes the notifications older than change_expiration_ms (by creation time)."""
        if not children:
            return
        now = self._clock_ms()

        def purge() -> None:
            stats = [(c, self.client.exists_async(f"{path}/{c}")) for c in children]
            deletes = []
            for child, result in stats:
                stat = self._wait(result)
                if stat is not None and now - stat.ctime > self.change_expiration_ms:
                    log.debug("Purging change notification %s/%s", path, child)
                    deletes.append(self.client.delete_async(f"{path}/{child}"))
            for result in deletes:
                with suppress(NoNodeError):
                    self._wait(result)

        self._read(purge)

    def _reload(self) -> None:
        """Under self._lock: the notifications there are now count as processed, then
        every ACL is read (so it includes their changes) and given to the listener."""
        def latest() -> dict[str, int]:
            return {path: max((_sequence(c) for c in self._children_or_empty(path)
                               if c.startswith(CHANGE_PREFIX)), default=-1)
                    for path in (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH)}

        self._last_executed.update(self._read(latest))
        self._emit(AclChanges(self.load_all(), full=True))

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: nothing here may block. After a lost session the
        notifications of the time away may be purged already: everything is read again."""
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            with suppress(RuntimeError):
                self._events.submit(self._reload_after_session_loss)

    def _reload_after_session_loss(self) -> None:
        try:
            with self._lock:
                self._reload()
            log.info("ACLs read again after a new ZooKeeper session")
        except Exception:
            log.exception("could not read the ACLs again after a new ZooKeeper session")

    # ---- kazoo helpers ---------------------------------------------------------------------

    def _wait(self, result: Any) -> Any:
        return result.get(timeout=self.request_timeout)

    def _read(self, read: Callable[[], T]) -> T:
        """A read (or an idempotent write), retried across connection losses until the
        request timeout."""
        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0,
                           deadline=self.request_timeout)
        return retry(read)  # type: ignore[no-any-return]

    def _children_or_empty(self, path: str) -> list[str]:
        try:
            return list(self._wait(self.client.get_children_async(path)))
        except NoNodeError:
            return []


# ---- one JSON file -----------------------------------------------------------------------------


class EmbeddedAclStore(_AclStoreBase):
    """The ACLs of a single-node broker in one JSON file, rewritten whole on each change
    (temporary file, fsync, rename, fsync of the directory): a crash leaves the old ACLs
    or the new ones. Thread-safe. The listener is called on the caller's thread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._acls: Acls = self._read_file()

    def start(self, listener: AclChangeListener) -> None:
        with self._lock:
            self._listener = listener
            self._emit(AclChanges(dict(self._acls), full=True))

    def close(self) -> None:
        self._listener = None

    def load_all(self) -> Acls:
        with self._lock:
            return dict(self._acls)

    def _candidates(self, filters: Sequence[AclBindingFilter]) -> Iterable[ResourcePattern]:
        return list(self._acls)

    def _read_many(self, patterns: Sequence[ResourcePattern]) -> Acls:
        return self._acls

    def _update(self, pattern: ResourcePattern,
                change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
                ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        current = self._acls.get(pattern, frozenset())
        new = change(current)
        if new == current:
            return current, new
        acls = dict(self._acls)
        if new:
            acls[pattern] = new
        else:
            del acls[pattern]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_durably(self.path, self._encode(acls))
        except (OSError, KafkaError) as e:
            raise AclStoreError(f"cannot write the ACLs to {self.path}: {e}") from e
        self._acls = acls
        return current, new

    @staticmethod
    def _encode(acls: Acls) -> bytes:
        resources = [{"resourceType": p.resource_type.security_name,
                      "patternType": p.pattern_type.name, "name": p.name,
                      "acls": [_entry_json(e) for e in _sorted_entries(entries)]}
                     for p, entries in sorted(acls.items(), key=lambda kv: _pattern_key(kv[0]))]
        return (json.dumps({"version": ACL_VERSION, "resources": resources}, indent=1,
                           ensure_ascii=False) + "\n").encode()

    def _read_file(self) -> Acls:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            # Refuse to start rather than start with no ACLs (or everything allowed).
            raise AclStoreError(f"cannot read the ACLs in {self.path}: {e}") from e
        if not isinstance(data, dict) or data.get("version") != ACL_VERSION:
            raise AclStoreError(f"{self.path}: unknown ACL file format")
        acls: Acls = {}
        for resource in data.get("resources", ()):
            try:
                pattern = ResourcePattern(
                    ResourceType.from_security_name(resource["resourceType"]),
                    resource["name"], PatternType.from_string(resource["patternType"]))
            except (KeyError, TypeError, ValueError) as e:
                raise AclStoreError(f"{self.path}: a malformed resource {resource!r}") from e
            entries = _entries_from_json(resource.get("acls", ()), str(self.path))
            if entries:
                acls[pattern] = entries
        return acls
