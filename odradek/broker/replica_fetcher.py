"""Replica fetchers: the follower side of replication (Kafka's ReplicaFetcherManager,
ReplicaFetcherThread and AbstractFetcherThread), as asyncio tasks on the broker's loop.

The ReplicaManager hands the partitions this broker follows to the `ReplicaFetcherManager`,
which keeps one `ReplicaFetcher` per leader broker (num.replica.fetchers=1), each with its
own InterBrokerClient connection: a follower's long-polling Fetch must not hold up other
requests to that broker. A fetcher with no partitions left stops.

Each partition goes through Kafka's PartitionFetchState:

- Truncating (KIP-101/279): the follower asks the leader, with OffsetForLeaderEpoch, where
  its latest leader epoch ended in the leader's log, and truncates its own log there, so
  that it never keeps records the leader does not have. It may take several rounds when
  the leader answers with an epoch the follower does not know.
- Fetching: full Fetch requests (no fetch session) from the log end offset; the leader's
  records are appended with their offsets and epochs, then the follower's high watermark
  and log start offset follow the leader's. OFFSET_OUT_OF_RANGE is answered as Kafka's
  handleOutOfRangeError does (ListOffsets to the leader, then truncate).
- Delayed: after an error the partition waits replica.fetch.backoff.ms before it is
  tried again; a connection failure delays every partition of the fetcher.
- Failed: fenced by a newer leader epoch (FENCED_LEADER_EPOCH), or the local log failed
  (a storage error). The partition is left alone until add_partitions gives it a new
  leader epoch, as Kafka waits for the next LeaderAndIsr.

Everything runs on the event loop: a fetcher mutates its partitions' states only between
awaits, and after each await it checks that the state it is about to act on is still the
one it sent the request for (the partition may have been removed, re-added or moved to
another leader meanwhile), as Kafka's fetcher does under its partitionMapLock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from odradek.broker.inter_broker_client import (
    DEFAULT_CLIENT_ID,
    DisconnectedError,
    InterBrokerClient,
    RequestBuilder,
)
from odradek.metrics.stats import BrokerTopicStats
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import CorruptRecordError, InvalidRecordError, KafkaError
from odradek.protocol.message import Message
from odradek.protocol.messages.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ReplicaState,
)
from odradek.protocol.messages.fetch_response import FetchResponse
from odradek.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from odradek.protocol.messages.list_offsets_response import ListOffsetsResponse
from odradek.protocol.messages.offset_for_leader_epoch_request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from odradek.protocol.messages.offset_for_leader_epoch_response import (
    OffsetForLeaderEpochResponse,
)
from odradek.protocol.primitives import ZERO_UUID
from odradek.protocol.records import iter_batch_headers
from odradek.storage.errors import RecordBatchTooLargeError
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LogAppendInfo

if TYPE_CHECKING:
    from odradek.broker.inter_broker_security import InterBrokerSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Endpoints = Callable[[int], "tuple[str, int] | None"]  # broker id -> (host, port)
ClientFactory = Callable[[str], InterBrokerClient]  # client id -> a client of its own

READ_UNCOMMITTED = 0
_LAST_NAME_VERSION = 12  # Fetch names topics up to v12, by topic id from v13 (KIP-516)
_LAST_REPLICA_ID_VERSION = 14  # ReplicaId up to v14, ReplicaState from v15 (KIP-903)
# Errors after which a partition is simply tried again after the backoff: the leader is
# moving, or its metadata is behind ours (Kafka's partitionsWithError).
_RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
    # The leader's log dir failed: the controller is moving the leadership (KIP-112).
    ErrorCode.KAFKA_STORAGE_ERROR,
})


class FollowerPartition(Protocol):
    """The local replica a fetcher writes to; odradek.broker.partition.Partition is one."""

    topic: str
    index: int
    topic_id: uuid.UUID

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int:
        """The latest epoch in the leader epoch cache; -1 when it is empty."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch`, its end offset); (-1, -1) when unknown."""
        ...

    def append_records_as_follower(self, records: memoryview | bytes) -> LogAppendInfo: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def update_follower_high_watermark(self, leader_high_watermark: int,
                                       leader_log_start_offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The replica fetchers' settings, by their Kafka names."""

    fetch_max_bytes: int = 1 << 20  # replica.fetch.max.bytes, per partition
    fetch_response_max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    fetch_backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms: the requests' timeout

    def __post_init__(self) -> None:
        for name in ("fetch_max_bytes", "fetch_response_max_bytes", "fetch_min_bytes",
                     "fetch_wait_max_ms", "fetch_backoff_ms", "socket_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        # A long-polling fetch must be answered before its request times out (Kafka
        # requires replica.socket.timeout.ms >= replica.fetch.wait.max.ms).
        if self.socket_timeout_ms < self.fetch_wait_max_ms:
            raise ValueError(
                f"replica.socket.timeout.ms ({self.socket_timeout_ms}) must be at least "
                f"replica.fetch.wait.max.ms ({self.fetch_wait_max_ms})")

    @classmethod
    def from_broker_config(cls, get: Callable[[str], Any]) -> FetcherConfig:
        """From a broker's settings by Kafka name (BrokerConfig.get); a setting `get` does
        not know (KeyError) or leaves unset (None) keeps Kafka's default."""
        names = {"fetch_max_bytes": "replica.fetch.max.bytes",
                 "fetch_response_max_bytes": "replica.fetch.response.max.bytes",
                 "fetch_min_bytes": "replica.fetch.min.bytes",
                 "fetch_wait_max_ms": "replica.fetch.wait.max.ms",
                 "fetch_backoff_ms": "replica.fetch.backoff.ms",
                 "socket_timeout_ms": "replica.socket.timeout.ms"}
        values: dict[str, int] = {}
        for field_name, key in names.items():
            try:
                value = get(key)
            except KeyError:
                continue
            if value is not None:
                values[field_name] = int(value)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """What add_partitions needs to follow a partition (Kafka's InitialFetchState)."""

    leader_id: int
    leader_epoch: int
    partition: FollowerPartition


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PartitionFetchStatus:
    """One followed partition as tests and metrics see it. `state` is "truncating",
    "fetching", "delayed" (either of those, backing off after an error) or "failed"."""

    leader_id: int
    leader_epoch: int
    state: str
    fetch_offset: int
    lag: int | None  # the leader's high watermark minus fetch_offset, at the last fetch


class _PartitionState:
    """Kafka's PartitionFetchState. A new one is made whenever the partition is (re-)added
    with another leader or epoch, so a fetcher holding an old one can tell."""

    __slots__ = (
        "delay_until",
        "fetch_offset",
        "lag",
        "leader_epoch",
        "leader_id",
        "partition",
        "state",
        "tp",
    )

    def __init__(self, tp: TopicPartition, initial: InitialFetchState) -> None:
        self.tp = tp
        self.partition = initial.partition
        self.leader_id = initial.leader_id
        self.leader_epoch = initial.leader_epoch
        # The fetch starts at the log end offset, once truncated. Kafka (with truncation on
        # fetch) starts there too when the log has leader epochs, and at the high watermark
        # when it has none. Here a log without epochs goes straight to fetching from its log
        # end: follower appends record every batch's epoch in the cache (and the leader's
        # appends stamp it), so an empty cache means an empty log, or one written before
        # epochs or by tools, where there is nothing to compare with the leader. A log
        # longer than the leader's is still cut back by the OFFSET_OUT_OF_RANGE handling.
        self.fetch_offset = initial.partition.log_end_offset
        self.state = (FetchState.FETCHING if initial.partition.latest_epoch == UNDEFINED_EPOCH
                      else FetchState.TRUNCATING)
        self.delay_until: float | None = None  # loop time; None: not delayed
        self.lag: int | None = None

    @property
    def name(self) -> str:
        return f"{self.tp[0]}-{self.tp[1]}"

    def ready(self, state: FetchState, now: float) -> bool:
        return self.state is state and (self.delay_until is None or self.delay_until <= now)

    def status(self, now: float) -> PartitionFetchStatus:
        state = self.state.value
        if self.state is not FetchState.FAILED and self.delay_until is not None and (
                self.delay_until > now):
            state = "delayed"
        return PartitionFetchStatus(self.leader_id, self.leader_epoch, state,
                                    self.fetch_offset, self.lag)


def offset_truncation_state(partition: FollowerPartition, fetch_offset: int,
                            leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
    """Where to truncate after the leader answered OffsetForLeaderEpoch with
    (`leader_epoch`, `leader_end_offset`), and whether truncation is then complete: Kafka's
    AbstractFetcherThread.getOffsetTruncationState. An incomplete truncation asks again
    with the follower's new latest epoch."""
    log_end = partition.log_end_offset
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing of the epoch: Kafka falls back to the fetch offset the
        # partition was added with (there the high watermark, here the log end offset).
        return min(fetch_offset, log_end), True
    if leader_epoch == UNDEFINED_EPOCH:
        # An old leader that answers offsets without epochs: trust its offset.
        return min(leader_end_offset, log_end), True
    follower_epoch, follower_end = partition.end_offset_for_epoch(leader_epoch)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        # The follower tracked no epochs then (a new or pre-epoch log); the leader's epoch
        # is below the one asked, so its offset is safe to truncate to.
        return min(leader_end_offset, log_end), True
    if follower_epoch != leader_epoch:
        # The follower does not know the leader's epoch: truncate to where the follower's
        # largest epoch below it ends and ask again with that one.
        return min(follower_end, log_end), False
    return min(follower_end, leader_end_offset, log_end), True


class _PartitionError(Exception):
    """A per-partition error code from the leader."""

    def __init__(self, error_code: int, what: str) -> None:
        super().__init__(f"{what}: {_error_name(error_code)}")
        self.error_code = error_code


def _error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


def _log_start_offset(partition: FollowerPartition) -> int:
    """The follower's log start offset for Fetch, when the partition tells it (-1 if not)."""
    value = getattr(partition, "log_start_offset", None)
    if value is None:
        value = getattr(getattr(partition, "log", None), "log_start_offset", None)
    return int(value) if isinstance(value, int) else -1


class ReplicaFetcher:
    """One leader's fetcher (Kafka's ReplicaFetcherThread): one task, one connection."""

    def __init__(self, node_id: int, leader_id: int, endpoints: Endpoints,
                 config: FetcherConfig, client: InterBrokerClient,
                 topic_stats: BrokerTopicStats | None = None) -> None:
        self.node_id = node_id
        self._topic_stats = topic_stats  # ReplicationBytesInPerSec (metrics)
        self.leader_id = leader_id
        self.config = config
        self._endpoints = endpoints
        self._client = client
        self._states: dict[TopicPartition, _PartitionState] = {}  # in fetch order
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader_id}, {len(self._states)} partitions)"

    # ---- partitions, from the manager -------------------------------------------------------

    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self._states)

    def add(self, tp: TopicPartition, initial: InitialFetchState) -> None:
        current = self._states.get(tp)
        # Re-adding with the same leader epoch keeps the state, failed or not (Kafka's
        # addPartitions): only a new epoch, from a new LeaderAndIsr, starts it afresh.
        if (current is not None and current.leader_epoch == initial.leader_epoch
                and current.partition is initial.partition):
            return
        self._states[tp] = _PartitionState(tp, initial)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> bool:
        removed = self._states.pop(tp, None) is not None
        if removed:
            self._wakeup.set()
        return removed

    def status(self) -> dict[TopicPartition, PartitionFetchStatus]:
        now = asyncio.get_running_loop().time()
        return {tp: s.status(now) for tp, s in self._states.items()}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.node_id}-from-{self.leader_id}")

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def stop(self) -> None:
        """Stops the task (its connection closes as it ends): at once, since a fetcher
        only changes a partition between awaits."""
        if self._task is not None:
            self._task.cancel()

    # ---- the loop (Kafka's doWork) ------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                self._wakeup.clear()  # before looking: an add from now on wakes the wait
                try:
                    worked = await self._do_work()
                except Exception:  # a bug here must not stop replication of the rest
                    log.exception("replica fetcher from broker %d failed; backing off",
                                  self.leader_id)
                    self._delay(list(self._states.values()))
                    worked = False
                if not worked:
                    await self._wait_for_work()
        finally:
            await self._client.close()

    async def _do_work(self) -> bool:
        now = asyncio.get_running_loop().time()
        truncating = [s for s in self._states.values() if s.ready(FetchState.TRUNCATING, now)]
        if truncating:
            await self._truncate(truncating)
            return True
        fetching = [s for s in self._states.values() if s.ready(FetchState.FETCHING, now)]
        if fetching:
            await self._fetch(fetching)
            return True
        return False

    async def _wait_for_work(self) -> None:
        """Until a partition is added or removed, or the first delay ends."""
        loop = asyncio.get_running_loop()
        delays = [s.delay_until for s in self._states.values()
                  if s.delay_until is not None and s.state is not FetchState.FAILED]
        timeout = max(0.0, min(delays) - loop.time()) if delays else None
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
        # comes as the wakeup does, and a stopped fetcher would then run on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()

    def _current(self, state: _PartitionState) -> bool:
        """Whether `state` is still this partition's, after an await."""
        return self._states.get(state.tp) is state and state.state is not FetchState.FAILED

    def _delay(self, states: Iterable[_PartitionState]) -> None:
        until = asyncio.get_running_loop().time() + self.config.fetch_backoff_ms / 1000
        for state in states:
            if self._current(state):
                state.delay_until = until

    def _fail(self, state: _PartitionState) -> None:
        state.state = FetchState.FAILED
        state.delay_until = None

    def _resume_fetching(self, state: _PartitionState) -> None:
        state.fetch_offset = state.partition.log_end_offset
        state.state = FetchState.FETCHING
        state.delay_until = None

    async def _send(self, request: Message | RequestBuilder) -> Message:
        """Sends to the leader at its current address (it may have moved or restarted)."""
        address = self._endpoints(self.leader_id)
        if address is None:
            raise DisconnectedError(f"no endpoint known for broker {self.leader_id}")
        if self._client.endpoints.get(self.leader_id) != address:
            self._client.update_endpoints({self.leader_id: address})
        return await self._client.send(self.leader_id, request,
                                       timeout_ms=self.config.socket_timeout_ms)

    # ---- truncation (KIP-101/279) ---------------------------------------------------------------

    async def _truncate(self, states: list[_PartitionState]) -> None:
        asked: dict[TopicPartition, tuple[_PartitionState, int, int]] = {}
        topics: dict[str, OffsetForLeaderTopic] = {}
        for state in states:
            latest = state.partition.latest_epoch
            if latest == UNDEFINED_EPOCH:  # emptied meanwhile: nothing to compare
                self._resume_fetching(state)
                continue
            asked[state.tp] = (state, latest, state.partition.log_end_offset)
            topic = topics.setdefault(state.tp[0], OffsetForLeaderTopic(topic=state.tp[0]))
            topic.partitions.append(OffsetForLeaderPartition(
                partition=state.tp[1], current_leader_epoch=state.leader_epoch,
                leader_epoch=latest))
        if not asked:
            return
        request = OffsetForLeaderEpochRequest(replica_id=self.node_id,
                                              topics=list(topics.values()))
        try:
            response = cast(OffsetForLeaderEpochResponse, await self._send(request))
        except DisconnectedError as e:
            log.info("OffsetForLeaderEpoch to broker %d failed, retrying in %d ms: %s",
                     self.leader_id, self.config.fetch_backoff_ms, e)
            self._delay(s for s, _, _ in asked.values())
            return
        except KafkaError as e:  # no version in common, or an answer we cannot read
            log.error("OffsetForLeaderEpoch to broker %d failed for %s: %s", self.leader_id,
                      ", ".join(s.name for s, _, _ in asked.values()), e)
            self._delay(s for s, _, _ in asked.values())
            return
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                entry = asked.get(tp)
                if entry is None or tp in answered:
                    continue
                answered.add(tp)
                state, latest, log_end = entry
                if not self._current(state):
                    continue  # removed or re-added while we waited: its answer is stale
                try:
                    self._truncate_partition(state, latest, log_end, p.error_code,
                                             p.leader_epoch, p.end_offset)
                except Exception as e:
                    self._partition_failed(state, "truncating", e)
        missing = [s for tp, (s, _, _) in asked.items() if tp not in answered]
        if missing:
            log.warning("broker %d left %s out of its OffsetForLeaderEpoch answer",
                        self.leader_id, ", ".join(s.name for s in missing))
            self._delay(missing)

    def _truncate_partition(self, state: _PartitionState, asked_epoch: int, log_end: int,
                            error: int, leader_epoch: int, end_offset: int) -> None:
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            self._fenced(state)
            return
        if error != ErrorCode.NONE:
            log.info("retrying OffsetForLeaderEpoch of %s: broker %d answered %s", state.name,
                     self.leader_id, _error_name(error))
            self._delay([state])
            return
        partition = state.partition
        offset, complete = offset_truncation_state(partition, state.fetch_offset,
                                                   leader_epoch, end_offset)
        if offset < partition.log_end_offset:
            log.info("truncating %s to %d (log end %d): the leader's epoch %d ends at %d, "
                     "ours asked was %d", state.name, offset, partition.log_end_offset,
                     leader_epoch, end_offset, asked_epoch)
        # Always: at the log end it still drops epochs that wrote nothing (a leadership
        # here that ended before its first append), so the next round asks the right one.
        partition.truncate_to(offset)
        if not complete and (partition.log_end_offset, partition.latest_epoch) == (
                log_end, asked_epoch):
            complete = True  # nothing changed: asking again would get the same answer
        if complete:
            self._resume_fetching(state)
        else:
            state.fetch_offset = partition.log_end_offset
            state.delay_until = None

    # ---- fetching ------------------------------------------------------------------------

    async def _fetch(self, states: list[_PartitionState]) -> None:
        offsets = {s.tp: s.fetch_offset for s in states}
        chosen: list[int] = []

        def build(version: int) -> Message:
            chosen.append(version)
            return self._fetch_request(states, version)

        # Topics without an id (none known yet) can only be named: Fetch v12 at most.
        by_name_only = any(s.partition.topic_id == ZERO_UUID for s in states)
        builder = RequestBuilder(ApiKey.FETCH, build,
                                 _LAST_NAME_VERSION if by_name_only else None)
        try:
            response = cast(FetchResponse, await self._send(builder))
        except DisconnectedError as e:
            log.info("Fetch from broker %d failed, retrying in %d ms: %s", self.leader_id,
                     self.config.fetch_backoff_ms, e)
            self._delay(states)
            return
        except KafkaError as e:
            log.error("Fetch from broker %d failed for %s: %s", self.leader_id,
                      ", ".join(s.name for s in states), e)
            self._delay(states)
            return
        if response.error_code != ErrorCode.NONE:
            log.warning("Fetch from broker %d failed: %s", self.leader_id,
                        _error_name(response.error_code))
            self._delay(states)
            return
        by_key: dict[tuple[Any, int], _PartitionState] = {}
        by_id = chosen[-1] > _LAST_NAME_VERSION
        for s in states:
            by_key[(s.partition.topic_id if by_id else s.tp[0], s.tp[1])] = s
        for topic in response.responses:
            key = topic.topic_id if by_id else topic.topic
            for data in topic.partitions:
                state = by_key.pop((key, data.partition_index), None)
                # As Kafka: only a state unchanged since the request takes the answer.
                if (state is None or not self._current(state)
                        or state.fetch_offset != offsets[state.tp]
                        or state.state is not FetchState.FETCHING):
                    continue
                await self._fetched(state, data)

    def _fetch_request(self, states: list[_PartitionState], version: int) -> FetchRequest:
        by_id = version > _LAST_NAME_VERSION
        topics: dict[Any, FetchTopic] = {}
        for s in states:
            key = s.partition.topic_id if by_id else s.tp[0]
            topic = topics.get(key)
            if topic is None:
                topic = topics[key] = (FetchTopic(topic_id=s.partition.topic_id) if by_id
                                       else FetchTopic(topic=s.tp[0]))
            topic.partitions.append(FetchPartition(
                partition=s.tp[1], current_leader_epoch=s.leader_epoch,
                fetch_offset=s.fetch_offset, log_start_offset=_log_start_offset(s.partition),
                partition_max_bytes=self.config.fetch_max_bytes))
        request = FetchRequest(
            max_wait_ms=self.config.fetch_wait_max_ms, min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_response_max_bytes, isolation_level=READ_UNCOMMITTED,
            session_id=0, session_epoch=-1, topics=list(topics.values()))  # no session
        if version > _LAST_REPLICA_ID_VERSION:
            request.replica_state = ReplicaState(replica_id=self.node_id, replica_epoch=-1)
        else:
            request.replica_id = self.node_id
        return request

    async def _fetched(self, state: _PartitionState, data: Any) -> None:
        error = data.error_code
        if error == ErrorCode.NONE:
            self._process_partition_data(state, data)
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(state)
        elif error == ErrorCode.FENCED_LEADER_EPOCH:
            self._fenced(state)
        elif error in _RETRIABLE:
            log.info("fetching %s from broker %d: %s; retrying in %d ms", state.name,
                     self.leader_id, _error_name(error), self.config.fetch_backoff_ms)
            self._delay([state])
        else:
            log.error("fetching %s at offset %d from broker %d: %s", state.name,
                      state.fetch_offset, self.leader_id, _error_name(error))
            self._delay([state])

    def _process_partition_data(self, state: _PartitionState, data: Any) -> None:
        """Kafka's ReplicaFetcherThread.processPartitionData: append, then follow the
        leader's high watermark and log start offset."""
        partition = state.partition
        try:
            if partition.log_end_offset != state.fetch_offset:
                # Only this fetcher writes the log while it follows: something else did.
                raise RuntimeError(f"the log end offset is {partition.log_end_offset}, "
                                   f"not the fetch offset {state.fetch_offset}")
            appended = self._append(state, data.records)
            if data.records and self._topic_stats is not None:
                self._topic_stats.replication_bytes_in += len(data.records)
            partition.update_follower_high_watermark(data.high_watermark,
                                                     data.log_start_offset)
        except (CorruptRecordError, InvalidRecordError) as e:
            # Kafka logs and retries: a transient state of the leader's log (a truncation)
            # can look like this, and one partition must not hold up the others.
            log.error("invalid records fetched for %s at offset %d from broker %d: %s",
                      state.name, state.fetch_offset, self.leader_id, e)
            state.fetch_offset = partition.log_end_offset
            self._delay([state])
            return
        except Exception as e:
            self._partition_failed(state, f"appending at offset {state.fetch_offset}", e)
            return
        state.fetch_offset = partition.log_end_offset
        state.lag = max(0, data.high_watermark - state.fetch_offset)
        if appended:  # to the back of the queue: every partition gets its share of bytes
            self._states[state.tp] = self._states.pop(state.tp)

    def _append(self, state: _PartitionState, records: Any) -> bool:
        """Appends the whole batches of `records` from the log end offset on."""
        if not records:
            return False
        partition = state.partition
        buf = memoryview(records)
        log_end = partition.log_end_offset
        start = end = -1
        first_base = -1
        batches: list[tuple[int, int]] = []  # (position, size) of the batches to append
        # A fetch may end with a partial batch (the leader cut at the byte limit): skipped.
        for pos, header in iter_batch_headers(buf, allow_partial=True):
            if header.last_offset < log_end:
                continue  # what we have already: the leader sends from its batch's start
            if start < 0:
                start, first_base = pos, header.base_offset
            batches.append((pos, header.size_in_bytes))
            end = pos + header.size_in_bytes
        if start < 0:
            return False
        if first_base < log_end:
            # Our log ends inside a batch of the leader's: a batch is appended whole, so
            # cut ours back to its start and take the leader's copy. (Kafka does this when
            # the log is empty and the leader's log start is inside a batch, after
            # DeleteRecords; a follower whose log ends inside a leader's batch diverged.)
            log.info("%s: the leader's batch at %d holds our log end %d: truncating to %d",
                     state.name, first_base, log_end, first_base)
            partition.truncate_to(first_base)
            if partition.log_end_offset != first_base:  # below our log start: start there
                partition.truncate_fully_and_start_at(first_base)
        try:
            partition.append_records_as_follower(buf[start:end])
        except RecordBatchTooLargeError:
            if len(batches) == 1:
                raise
            # More than a segment of ours in one response (segment.bytes differs from the
            # leader's): one batch at a time, each of which fits a segment.
            for pos, size in batches:
                partition.append_records_as_follower(buf[pos:pos + size])
        return True

    # ---- OFFSET_OUT_OF_RANGE (Kafka's handleOutOfRangeError) ------------------------------

    async def _handle_out_of_range(self, state: _PartitionState) -> None:
        try:
            leader_end = await self._list_offset(state, LATEST_TIMESTAMP)
            if not self._current(state):
                return
            partition = state.partition
            log_end = partition.log_end_offset
            if leader_end < log_end:
                # The leader has less than we do (an unclean election): cut back to its end.
                log.warning("%s: our log end %d is beyond broker %d's log end %d: "
                            "truncating to it", state.name, log_end, self.leader_id,
                            leader_end)
                partition.truncate_to(leader_end)
            else:
                leader_start = await self._list_offset(state, EARLIEST_TIMESTAMP)
                if not self._current(state):
                    return
                log_end = partition.log_end_offset
                if leader_start > log_end:
                    # The leader deleted what we would fetch next: start over at its start.
                    log.warning("%s: broker %d's log starts at %d, after our log end %d: "
                                "starting our log there", state.name, self.leader_id,
                                leader_start, log_end)
                    partition.truncate_fully_and_start_at(leader_start)
                else:
                    log.info("%s: fetch offset %d out of range of broker %d's log [%d, %d]; "
                             "retrying", state.name, state.fetch_offset, self.leader_id,
                             leader_start, leader_end)
            self._resume_fetching(state)
        except _PartitionError as e:
            if not self._current(state):
                return
            if e.error_code == ErrorCode.FENCED_LEADER_EPOCH:
                self._fenced(state)
            else:
                log.info("%s: cannot find broker %d's offsets: %s", state.name,
                         self.leader_id, e)
                self._delay([state])
        except DisconnectedError as e:
            log.info("%s: ListOffsets to broker %d failed: %s", state.name, self.leader_id, e)
            self._delay([state])
        except Exception as e:  # a storage error truncating, or an unreadable answer
            if not self._current(state):
                return
            if isinstance(e, OSError) or getattr(e, "error_code", None) == (
                    ErrorCode.KAFKA_STORAGE_ERROR):
                self._partition_failed(state, "truncating", e)
            else:
                log.error("%s: handling OFFSET_OUT_OF_RANGE from broker %d failed: %s",
                          state.name, self.leader_id, e)
                self._delay([state])

    async def _list_offset(self, state: _PartitionState, timestamp: int) -> int:
        topic, index = state.tp
        request = ListOffsetsRequest(
            replica_id=self.node_id, isolation_level=READ_UNCOMMITTED,
            topics=[ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(
                partition_index=index, current_leader_epoch=state.leader_epoch,
                timestamp=timestamp)])])
        response = cast(ListOffsetsResponse, await self._send(request))
        for t in response.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == index:
                    if p.error_code != ErrorCode.NONE:
                        raise _PartitionError(p.error_code, f"ListOffsets of {state.name}")
                    return p.offset
        raise _PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR,
                              f"ListOffsets answered nothing for {state.name}")

    # ---- failures ---------------------------------------------------------------------------

    def _fenced(self, state: _PartitionState) -> None:
        # Kafka's onPartitionFenced: our leader epoch is older than the leader's; wait for
        # the LeaderAndIsr that tells us the new one.
        log.info("%s: leader epoch %d is fenced by broker %d; waiting for a newer one",
                 state.name, state.leader_epoch, self.leader_id)
        self._fail(state)

    def _partition_failed(self, state: _PartitionState, doing: str, e: BaseException) -> None:
        # Kafka's markPartitionFailed: this partition stops, the broker and the other
        # partitions go on.
        log.error("replication of %s from broker %d stopped: %s failed: %s", state.name,
                  self.leader_id, doing, e, exc_info=not isinstance(e, KafkaError | OSError))
        self._fail(state)


class ReplicaFetcherManager:
    """The fetchers of one broker, one per leader it follows (Kafka's ReplicaFetcherManager).

    `endpoints(broker_id)` gives a leader's inter-broker (host, port), looked up before
    each request so that a leader that moved is found; `client_factory(client_id)` makes
    each fetcher's InterBrokerClient.
    """

    def __init__(self, node_id: int, endpoints: Endpoints,
                 config: FetcherConfig | None = None, *,
                 client_factory: ClientFactory | None = None,
                 security: InterBrokerSecurity | None = None,
                 topic_stats: BrokerTopicStats | None = None) -> None:
        self.node_id = node_id
        self.config = config or FetcherConfig()
        self.topic_stats = topic_stats  # the bytes fetched, for the metrics
        self.security = security  # the inter-broker listener's TLS and SASL
        self._endpoints = endpoints
        self._client_factory = client_factory or self._default_client
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._shut_down = False

    def _default_client(self, client_id: str) -> InterBrokerClient:
        return InterBrokerClient(client_id=client_id,
                                 request_timeout_ms=self.config.socket_timeout_ms,
                                 security=self.security)

    @property
    def fetchers(self) -> dict[int, ReplicaFetcher]:
        """Leader id -> its fetcher."""
        return dict(self._fetchers)

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The leader this broker fetches `tp` from, if it follows it."""
        return self._leaders.get(tp)

    def status(self) -> dict[TopicPartition, PartitionFetchStatus]:
        out: dict[TopicPartition, PartitionFetchStatus] = {}
        for fetcher in self._fetchers.values():
            out.update(fetcher.status())
        return out

    def partition_status(self, tp: TopicPartition) -> PartitionFetchStatus | None:
        leader = self._leaders.get(tp)
        return None if leader is None else self._fetchers[leader].status().get(tp)

    @property
    def failed_partitions(self) -> set[TopicPartition]:
        return {tp for tp, s in self.status().items() if s.state == FetchState.FAILED.value}

    def add_partitions(self, states: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Follows each partition from its leader (Kafka's addFetcherForPartitions): from
        the partition's log end offset, after truncation when it has leader epochs. A
        partition followed already keeps its progress if leader and epoch are the same,
        and starts over (with truncation) otherwise, moving fetchers if the leader moved.
        Call on the event loop."""
        if self._shut_down:
            # The broker is stopping: a LeaderAndIsr that arrives now (the controller does
            # not know yet) has nothing left to start; the next start follows as told then.
            log.debug("not following %d partitions: the fetchers are shut down", len(states))
            return
        for tp, initial in states.items():
            old = self._leaders.get(tp)
            if old is not None and old != initial.leader_id:
                self._remove_from(old, tp)
            fetcher = self._fetchers.get(initial.leader_id)
            if fetcher is None:
                client = self._client_factory(
                    f"{DEFAULT_CLIENT_ID}-{self.node_id}-fetcher-{initial.leader_id}")
                fetcher = ReplicaFetcher(self.node_id, initial.leader_id, self._endpoints,
                                         self.config, client, self.topic_stats)
                self._fetchers[initial.leader_id] = fetcher
                fetcher.start()
            fetcher.add(tp, initial)
            self._leaders[tp] = initial.leader_id

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stops following the partitions (Kafka's removeFetcherForPartitions); once this
        returns, no fetcher touches them again. A fetcher left without partitions stops."""
        for tp in tps:
            leader = self._leaders.pop(tp, None)
            if leader is not None:
                self._remove_from(leader, tp)

    def _remove_from(self, leader: int, tp: TopicPartition) -> None:
        self._leaders.pop(tp, None)
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:  # Kafka's shutdownIdleFetcherThreads
            del self._fetchers[leader]
            self._stop(fetcher)

    def _stop(self, fetcher: ReplicaFetcher) -> None:
        fetcher.stop()
        task = fetcher.task
        if task is not None and not task.done():
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        """Stops every fetcher and closes their connections."""
        self._shut_down = True
        for fetcher in list(self._fetchers.values()):
            self._stop(fetcher)
        self._fetchers.clear()
        self._leaders.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
