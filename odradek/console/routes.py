"""Console: the web console's page and its JSON API on the broker's HTTP listener.

  /                      the page (static/index.html), /static/... its files (vendored JS)
  /api/cluster           brokers, controller, partition health
  /api/topics[/{name}]   topics; one topic's partitions, sizes, segments and configs
  /api/topics/{name}/messages   the message browser (newest N, from an offset or a time)
  /api/groups[/{id}]     consumer groups; one group's members, offsets and lag
  /api/history[/topics/{name}|/groups/{id}]   this broker's recent history, for the charts

Reads come from the broker's metadata cache and, for what other brokers hold, from
ConsoleClient (cluster_client.py). The three writes (create a topic, delete records,
reset a group's offsets) exist only with `http.console.write.enabled=true`; each needs the
header `X-Odradek-Console: 1` (which a cross-site form cannot send) and, on a broker with an
authorizer, HTTP Basic credentials of a SCRAM user, whose ACLs decide as for the Kafka
requests the write stands for (CreateTopics, DeleteRecords, OffsetCommit).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

import odradek
from odradek.broker.inter_broker_client import DisconnectedError
from odradek.console.cluster_client import (
    EARLIEST,
    LATEST,
    ConsoleClient,
    ConsoleError,
    ConsoleRecord,
)
from odradek.console.history import MetricsHistory, total_lag
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.security.principal import KafkaPrincipal
from odradek.security.sasl.scram import credential_from_password

if TYPE_CHECKING:
    from odradek.broker.kafka_server import KafkaServer

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_RECORDS = 500  # the message browser's limit per request
MAX_BODY = 64 * 1024  # a write's JSON body
WRITE_HEADER = "X-Odradek-Console"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS = {"UNKNOWN_TOPIC_OR_PARTITION": 404, "GROUP_ID_NOT_FOUND": 404,
           "TOPIC_AUTHORIZATION_FAILED": 403, "GROUP_AUTHORIZATION_FAILED": 403,
           "CLUSTER_AUTHORIZATION_FAILED": 403, "CONSOLE_READ_ONLY": 403,
           "SASL_AUTHENTICATION_FAILED": 401, "INVALID_REQUEST": 400,
           "TOPIC_ALREADY_EXISTS": 409, "NON_EMPTY_GROUP": 409,
           "UNKNOWN_MEMBER_ID": 409, "REBALANCE_IN_PROGRESS": 409,
           # what the request asked for is refused by the broker: the asker's error
           "INVALID_TOPIC_EXCEPTION": 400, "INVALID_PARTITIONS": 400,
           "INVALID_REPLICATION_FACTOR": 400, "INVALID_REPLICA_ASSIGNMENT": 400,
           "INVALID_CONFIG": 400, "POLICY_VIOLATION": 400, "OFFSET_OUT_OF_RANGE": 400}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _int(request: web.Request, name: str, default: int | None = None) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConsoleError("INVALID_REQUEST", f"{name} must be an integer, not {value!r}") from None


class Console:
    def __init__(self, server: KafkaServer, client: ConsoleClient, history: MetricsHistory,
                 *, write_enabled: bool = False) -> None:
        self.server = server
        self.client = client
        self.history = history
        self.write_enabled = write_enabled

    def add_routes(self, app: web.Application) -> None:
        app.middlewares.append(self._errors)
        router = app.router
        router.add_get("/", self._page)
        router.add_static("/static/", STATIC, append_version=False)
        router.add_get("/api/cluster", self._cluster)
        router.add_get("/api/topics", self._topics)
        router.add_get("/api/topics/{name}", self._topic)
        router.add_get("/api/topics/{name}/messages", self._messages)
        router.add_get("/api/groups", self._groups)
        router.add_get("/api/groups/{id}", self._group)
        router.add_get("/api/history", self._history)
        router.add_get("/api/history/topics/{name}", self._topic_history)
        router.add_get("/api/history/groups/{id}", self._group_history)
        router.add_post("/api/topics", self._create_topic)
        router.add_post("/api/topics/{name}/delete-records", self._delete_records)
        router.add_post("/api/groups/{id}/reset-offsets", self._reset_offsets)

    async def close(self) -> None:
        await self.history.stop()
        await self.client.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ConsoleError as e:
            return _json({"error": e.error, "message": e.message}, _STATUS.get(e.error, 502))
        except DisconnectedError as e:  # the broker that holds the answer is unreachable
            return _json({"error": "NETWORK_EXCEPTION", "message": str(e)}, 503)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html",
                                headers={"Cache-Control": "no-cache"})

    # ---- reads -----------------------------------------------------------------------------

    def _cache(self) -> Any:
        cache = self.server.metadata_cache
        if cache is None:
            raise ConsoleError("BROKER_NOT_AVAILABLE", "the broker is starting")
        return cache

    def _partition_health(self, metadata: Any) -> tuple[int, int, int]:
        """(under-replicated, offline, under min ISR) partitions of a topic."""
        cache = self._cache()
        min_isr = self.server.config.log_config.with_overrides(
            metadata.configs).min_insync_replicas
        under = offline = under_min = 0
        for index, state in list(metadata.partitions.items()):
            dead = set(cache.offline_replicas.get((metadata.name, index), ()))
            if state.leader < 0 or state.leader not in cache.brokers or state.leader in dead:
                offline += 1
                continue
            if len(state.isr) < len(state.replicas):
                under += 1
            if len(state.isr) < min_isr:
                under_min += 1
        return under, offline, under_min

    async def _cluster(self, request: web.Request) -> web.StreamResponse:
        cache = self._cache()
        config = self.server.config
        listener = config.inter_broker_listener_name
        under = offline = under_min = partitions = 0
        for metadata in list(cache.topics.values()):
            u, o, m = self._partition_health(metadata)
            under, offline, under_min = under + u, offline + o, under_min + m
            partitions += len(metadata.partitions)
        # Every broker's groups (ListGroups), as /api/groups lists them: not only those
        # this broker coordinates.
        groups = await self.client.list_groups()
        brokers = []
        for broker_id in sorted(cache.brokers):
            broker = cache.brokers[broker_id]
            host, port = broker.endpoints.get(listener) or next(
                iter(broker.endpoints.values()), ("", 0))
            brokers.append({"id": broker_id, "host": host, "port": port, "rack": broker.rack,
                            "controller": broker_id == cache.controller_id})
        return _json({
            "cluster_id": cache.cluster_id, "broker_id": config.node_id,
            "controller_id": cache.controller_id, "version": odradek.__version__,
            "mode": "zookeeper" if self.server.zk_store is not None else "single node",
            "brokers": brokers, "topics": len(cache.topics), "partitions": partitions,
            "under_replicated": under, "offline": offline, "under_min_isr": under_min,
            "groups": len([g for g in groups if g["state"] != "Dead"]),
            "console": {"write_enabled": self.write_enabled,
                        "history_interval_s": self.history.interval_s}})

    async def _topics(self, request: web.Request) -> web.StreamResponse:
        cache = self._cache()
        topics = sorted(list(cache.topics.values()), key=lambda t: t.name)
        all_partitions = [(t.name, p) for t in topics for p in t.partitions]
        sizes_by_broker, ends, starts = await asyncio.gather(
            self.client.log_dirs(), self.client.list_offsets(all_partitions, LATEST),
            self.client.list_offsets(all_partitions, EARLIEST))
        rows = []
        for metadata in topics:
            under, offline, _ = self._partition_health(metadata)
            size: int | None = 0
            messages: int | None = 0
            for index, state in metadata.partitions.items():
                tp = (metadata.name, index)
                leader_sizes = sizes_by_broker.get(state.leader, {})
                size = None if size is None or tp not in leader_sizes else size + leader_sizes[tp]
                messages = (None if messages is None or tp not in ends or tp not in starts
                            else messages + ends[tp] - starts[tp])
            any_state = next(iter(metadata.partitions.values()), None)
            rows.append({"name": metadata.name, "internal": metadata.name.startswith("__"),
                         "partitions": len(metadata.partitions),
                         "replication_factor": len(any_state.replicas) if any_state else 0,
                         "under_replicated": under, "offline": offline,
                         "size_bytes": size, "messages": messages})
        return _json({"topics": rows})

    def _topic_metadata(self, name: str) -> Any:
        metadata = self._cache().topics.get(name)
        if metadata is None:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {name!r}")
        return metadata

    async def _topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        metadata = self._topic_metadata(name)
        cache = self._cache()
        tps = [(name, p) for p in sorted(metadata.partitions)]
        sizes, ends, starts, configs = await asyncio.gather(
            self.client.partition_sizes(name), self.client.list_offsets(tps, LATEST),
            self.client.list_offsets(tps, EARLIEST), self.client.topic_configs(name))
        rm = self.server.replica_manager
        min_isr = self.server.config.log_config.with_overrides(
            metadata.configs).min_insync_replicas
        partitions = []
        for tp in tps:
            state = metadata.partitions[tp[1]]
            dead = list(cache.offline_replicas.get(tp, []))
            offline = state.leader < 0 or state.leader not in cache.brokers or state.leader in dead
            local = rm.partitions.get(tp) if rm is not None else None
            segments = None
            if local is not None and local.is_leader and tp not in rm.offline_partitions:
                segments = len(local.log.segments())  # as kafka_log_log_numlogsegments
            partitions.append({
                "partition": tp[1], "leader": state.leader if not offline else -1,
                "replicas": list(state.replicas), "isr": list(state.isr),
                "offline_replicas": dead, "log_start_offset": starts.get(tp),
                "high_watermark": ends.get(tp), "size_bytes": sizes.get(tp),
                "segments": segments, "offline": offline,
                "under_replicated": not offline and len(state.isr) < len(state.replicas),
                "under_min_isr": not offline and len(state.isr) < min_isr})
        return _json({"name": name, "internal": name.startswith("__"),
                      "topic_id": str(metadata.topic_id), "partitions": partitions,
                      "configs": configs})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        metadata = self._topic_metadata(name)
        mode = request.query.get("mode", "newest")
        asked = _int(request, "limit")
        limit = max(1, min(MAX_RECORDS, 50 if asked is None else asked))
        partition = _int(request, "partition")
        indexes = sorted(metadata.partitions) if partition is None else [partition]
        if partition is not None and partition not in metadata.partitions:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"no partition {name}-{partition}")
        tps = [(name, p) for p in indexes]
        starts, ends = await asyncio.gather(self.client.list_offsets(tps, EARLIEST),
                                            self.client.list_offsets(tps, LATEST))
        if mode == "newest":
            # The newest `limit` of all the partitions are among each one's last `limit`.
            offsets = {p: max(starts.get((name, p), 0), ends[(name, p)] - limit)
                       for p in indexes if (name, p) in ends}
        elif mode == "offset":
            start = _int(request, "offset", 0) or 0
            offsets = {p: max(start, starts.get((name, p), 0)) for p in indexes}
        elif mode == "timestamp":
            timestamp = _int(request, "timestamp")
            if timestamp is None or timestamp < 0:
                raise ConsoleError("INVALID_REQUEST", "timestamp mode needs a timestamp (ms)")
            found = await self.client.list_offsets(tps, timestamp)
            offsets = {p: found[(name, p)] for p in indexes if found.get((name, p), -1) >= 0}
        else:
            raise ConsoleError("INVALID_REQUEST", f"mode must be newest, offset or timestamp,"
                                                  f" not {mode!r}")
        offsets = {p: o for p, o in offsets.items() if o < ends.get((name, p), 0)}
        records = await self.client.fetch(name, offsets, limit=limit) if offsets else []
        records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
        # newest: the last `limit`; else the first `limit` from the position asked for
        records = records[-limit:] if mode == "newest" else records[:limit]
        return _json({"records": [_record(r) for r in records],
                      "partitions": [{"partition": p, "log_start_offset": starts.get((name, p)),
                                      "high_watermark": ends.get((name, p))} for p in indexes]})

    async def _groups(self, request: web.Request) -> web.StreamResponse:
        groups = await self.client.list_groups()
        committed = await asyncio.gather(
            *(self.client.committed_offsets(g["group_id"], g["coordinator"]) for g in groups),
            return_exceptions=True)
        known = [c for c in committed if isinstance(c, dict)]
        ends = await self.client.list_offsets({tp for c in known for tp in c}, LATEST)
        for group, offsets in zip(groups, committed, strict=True):
            if isinstance(offsets, ConsoleError | DisconnectedError):  # shown without lag
                offsets = {}
            elif isinstance(offsets, BaseException):
                raise offsets
            group["lag"] = total_lag(offsets, ends)
            group["topics"] = sorted({t for t, _ in offsets})
        return _json({"groups": groups})

    async def _group(self, request: web.Request) -> web.StreamResponse:
        group = await self.client.describe_group(request.match_info["id"])
        owner: dict[tuple[str, int], str] = {}
        for member in group.members:
            for assigned in member["assignment"]:
                for p in assigned["partitions"]:
                    owner[(assigned["topic"], p)] = member["member_id"]
        partitions = set(group.offsets) | set(owner)
        ends = await self.client.list_offsets(partitions, LATEST)
        offsets = []
        for tp in sorted(partitions):
            committed = group.offsets.get(tp)
            end = ends.get(tp)
            offsets.append({"topic": tp[0], "partition": tp[1], "committed": committed,
                            "high_watermark": end, "member_id": owner.get(tp),
                            "lag": None if committed is None or end is None
                            else max(0, end - committed)})
        return _json({"group_id": group.group_id, "state": group.state,
                      "protocol_type": group.protocol_type, "protocol": group.protocol,
                      "coordinator": group.coordinator, "members": group.members,
                      "offsets": offsets, "lag": total_lag(group.offsets, ends)})

    async def _history(self, request: web.Request) -> web.StreamResponse:
        return _json({"broker_id": self.server.config.node_id,
                      **self.history.broker_series()})

    async def _topic_history(self, request: web.Request) -> web.StreamResponse:
        return _json(self.history.topic_series(request.match_info["name"]))

    async def _group_history(self, request: web.Request) -> web.StreamResponse:
        return _json(self.history.group_series(request.match_info["id"]))

    # ---- writes ----------------------------------------------------------------------------

    async def _write_body(self, request: web.Request) -> dict[str, Any]:
        """The JSON body of a write the console allows; the handler then authorizes it."""
        if not self.write_enabled:
            raise ConsoleError("CONSOLE_READ_ONLY", "this console is read-only (set "
                                                    "http.console.write.enabled=true)")
        if request.headers.get(WRITE_HEADER) != "1":
            raise ConsoleError("CONSOLE_READ_ONLY", f"a write needs the header {WRITE_HEADER}")
        try:
            async with asyncio.timeout(10):
                body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConsoleError("INVALID_REQUEST", f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise ConsoleError("INVALID_REQUEST", "the body must be a JSON object")
        return body

    async def _authorized(self, request: web.Request, operation: AclOperation,
                          resource_type: ResourceType, name: str) -> bool:
        """Without an authorizer, True; with one, whether the request's SCRAM user (HTTP
        Basic, else SASL_AUTHENTICATION_FAILED) may."""
        auth = getattr(self.server, "auth", None)
        authorizer = getattr(auth, "authorizer", None)
        if authorizer is None:
            return True
        principal = await self._principal(request)
        return bool(authorizer.authorize(principal, request.remote or "", operation,
                                         resource_type, name, request="console"))

    async def _authorize(self, request: web.Request, operation: AclOperation,
                         resource_type: ResourceType, name: str) -> None:
        if not await self._authorized(request, operation, resource_type, name):
            kind = {ResourceType.TOPIC: "TOPIC", ResourceType.GROUP: "GROUP"}.get(
                resource_type, "CLUSTER")
            raise ConsoleError(f"{kind}_AUTHORIZATION_FAILED",
                               f"the user may not {operation.name} {name}")

    async def _principal(self, request: web.Request) -> KafkaPrincipal:
        """The SCRAM user of the request's HTTP Basic credentials."""
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = password = ""
        if scheme.lower() == "basic" and user:
            for mechanism in SCRAM_MECHANISMS:
                stored = self.server.credentials.lookup(user, mechanism)
                if stored is None:
                    continue
                made = await asyncio.to_thread(credential_from_password, mechanism, password,
                                               stored.salt, stored.iterations)
                if hmac.compare_digest(made.stored_key, stored.stored_key):
                    return KafkaPrincipal.user(user)
        raise ConsoleError("SASL_AUTHENTICATION_FAILED",
                           "this broker has an authorizer: a write needs the user name and "
                           "password of a SCRAM user (HTTP Basic)")

    async def _create_topic(self, request: web.Request) -> web.StreamResponse:
        body = await self._write_body(request)
        name, partitions = body.get("name"), body.get("partitions", 1)
        replication_factor, configs = body.get("replication_factor", 1), body.get("configs", {})
        if not isinstance(name, str) or not name:
            raise ConsoleError("INVALID_REQUEST", "name: the topic's name expected")
        if not isinstance(partitions, int) or not isinstance(replication_factor, int):
            raise ConsoleError("INVALID_REQUEST", "partitions and replication_factor must "
                                                  "be integers")
        if not isinstance(configs, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise ConsoleError("INVALID_REQUEST", "configs: {name: value} strings expected")
        # As Kafka's CreateTopics: CREATE on the cluster, or else on the topic.
        if not await self._authorized(request, AclOperation.CREATE, ResourceType.CLUSTER,
                                      CLUSTER_NAME):
            await self._authorize(request, AclOperation.CREATE, ResourceType.TOPIC, name)
        await self.client.create_topic(name, partitions, replication_factor, configs)
        log.info("console: topic %s created (%d partitions, replication factor %d)", name,
                 partitions, replication_factor)
        return _json({"ok": True, "name": name})

    async def _delete_records(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await self._write_body(request)
        await self._authorize(request, AclOperation.DELETE, ResourceType.TOPIC, name)
        raw = body.get("partitions")
        if not isinstance(raw, dict) or not raw:
            raise ConsoleError("INVALID_REQUEST", "partitions: {partition: offset} expected")
        try:
            before = {int(p): int(o) for p, o in raw.items()}
        except (TypeError, ValueError):
            raise ConsoleError("INVALID_REQUEST",
                               "partitions and offsets must be integers") from None
        metadata = self._topic_metadata(name)
        unknown = sorted(set(before) - set(metadata.partitions))
        if unknown:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION",
                               f"{name} has no partition {unknown[0]}")
        if -1 in before.values():
            ends = await self.client.list_offsets([(name, p) for p in before], LATEST)
            before = {p: ends.get((name, p), o) if o == -1 else o for p, o in before.items()}
        done = await self.client.delete_records(name, before)
        log.info("console: records of %s deleted: log start offsets now %s", name, done)
        return _json({"ok": True, "log_start_offsets": {str(p): o for p, o in done.items()}})

    async def _reset_offsets(self, request: web.Request) -> web.StreamResponse:
        group_id = request.match_info["id"]
        body = await self._write_body(request)
        await self._authorize(request, AclOperation.READ, ResourceType.GROUP, group_id)
        topic = body.get("topic")
        to = body.get("to")
        if not isinstance(topic, str) or to not in ("earliest", "latest", "offset", "timestamp"):
            raise ConsoleError("INVALID_REQUEST", "topic and to (earliest, latest, offset or "
                                                  "timestamp) expected")
        await self._authorize(request, AclOperation.READ, ResourceType.TOPIC, topic)
        metadata = self._topic_metadata(topic)
        chosen = body.get("partitions")
        indexes = sorted(metadata.partitions) if chosen is None else chosen
        if not isinstance(indexes, list) or not all(
                isinstance(p, int) and p in metadata.partitions for p in indexes):
            raise ConsoleError("INVALID_REQUEST", f"partitions must be partitions of {topic}")
        tps = [(topic, p) for p in indexes]
        value = body.get("value")
        if to in ("offset", "timestamp") and not isinstance(value, int):
            raise ConsoleError("INVALID_REQUEST", f"to={to} needs an integer value")
        if to == "offset":
            starts, ends = await asyncio.gather(self.client.list_offsets(tps, EARLIEST),
                                                self.client.list_offsets(tps, LATEST))
            offsets = {tp: min(max(value, starts[tp]), ends[tp]) for tp in tps
                       if tp in starts and tp in ends}
        else:
            timestamp = {"earliest": EARLIEST, "latest": LATEST}.get(to, value)
            offsets = await self.client.list_offsets(tps, timestamp)
            if to == "timestamp":  # past the last record: the end, as kafka-consumer-groups
                ends = await self.client.list_offsets(tps, LATEST)
                offsets = {tp: o if o >= 0 else ends[tp] for tp, o in offsets.items()
                           if o >= 0 or tp in ends}
        if len(offsets) != len(tps):
            raise ConsoleError("LEADER_NOT_AVAILABLE", "some partitions' leaders did not answer")
        # As kafka-consumer-groups --reset-offsets: only a group without active members.
        try:
            state = (await self.client.describe_group(group_id)).state
        except ConsoleError as e:
            if e.error != "GROUP_ID_NOT_FOUND":
                raise
            state = "Dead"
        if state not in ("Empty", "Dead"):
            raise ConsoleError("NON_EMPTY_GROUP", f"group {group_id} is {state}: offsets can "
                                                  "only be reset while it has no members")
        await self.client.commit_offsets(group_id, offsets)
        log.info("console: offsets of group %s reset to %s", group_id, to)
        return _json({"ok": True, "offsets": [{"topic": t, "partition": p, "offset": o}
                                              for (t, p), o in sorted(offsets.items())]})


def _record(record: ConsoleRecord) -> dict[str, Any]:
    return {"partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp,
            "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
            "key": _b64(record.key), "value": _b64(record.value),
            "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers]}
