"""PrimaryElection: which of several registries decides the writes, elected through the
broker's group coordinator, as Confluent's registries elect theirs.

Every registry joins one consumer group (`odradek-registry` by default) subscribed to the
one-partition `_schemas` topic: the group coordinator's rebalance gives that partition to
exactly one member, and that member is the primary. Its assignment is paused: the group is
an election, the reading is KafkaStore's. Each member's client id carries the URL others
reach it at, so any registry finds the primary's URL by describing the group (DescribeGroups
through the AdminClient). A primary that dies leaves the group when its session times out,
and the next rebalance elects another; a new primary reads _schemas to its end before it
decides a write (KafkaStore.catch_up), so the ids it gives continue the dead one's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

DEFAULT_GROUP = "odradek-registry"
CLIENT_ID_PREFIX = "odradek-registry "  # then the member's URL
URL_CACHE_S = 2.0  # how long a primary's URL found is trusted before asking again


class PrimaryElection:
    def __init__(self, client_config: Mapping[str, Any], topic: str, url: str, *,
                 group: str = DEFAULT_GROUP, session_timeout_ms: int = 10_000) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.url = url  # this registry's, as the others reach it
        self.group = group
        self.session_timeout_ms = session_timeout_ms
        self._primary = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._admin = AdminClient(self.client_config)
        self._found: tuple[float, str | None] = (0.0, None)
        self.changed = threading.Event()  # set whenever this member's role changes

    @property
    def is_primary(self) -> bool:
        return self._primary

    def start(self) -> None:
        self._consumer = Consumer({
            **self.client_config, "group.id": self.group,
            "client.id": CLIENT_ID_PREFIX + self.url, "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": max(100, self.session_timeout_ms // 5)})
        self._consumer.subscribe([self.topic], on_assign=self._assigned,
                                 on_revoke=self._revoked, on_lost=self._revoked)
        self._thread = threading.Thread(target=self._run, name="registry-election",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()  # leaves the group: the others elect at once
        self._primary = False

    def _run(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            try:
                self._consumer.consume(100, timeout=0.2)  # keeps the membership alive
            except KafkaException as e:
                log.warning("registry election: %s", e)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.pause(partitions)  # an election: nothing to read here
        primary = any(tp.partition == 0 for tp in partitions)
        if primary != self._primary:
            log.info("registry: %s is %s the primary", self.url,
                     "now" if primary else "not")
        self._primary = primary
        self._found = (0.0, None)
        self.changed.set()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._primary:
            log.info("registry: %s is no longer the primary", self.url)
        self._primary = False
        self._found = (0.0, None)
        self.changed.set()

    def forget_primary(self) -> None:
        """The primary's URL found could not be reached: ask the group again."""
        self._found = (0.0, None)

    def primary_url(self) -> str | None:
        """The primary's URL, None while there is none (during an election)."""
        if self._primary:
            return self.url
        found_at, url = self._found
        if url is not None and time.monotonic() - found_at < URL_CACHE_S:
            return url
        try:
            described = self._admin.describe_consumer_groups([self.group],
                                                             request_timeout=10)
            group = described[self.group].result(10)
        except KafkaException as e:
            log.info("registry: cannot describe the group %s: %s", self.group, e)
            return None
        url = None
        for member in group.members:
            assigned = member.assignment.topic_partitions if member.assignment else []
            if any(tp.topic == self.topic and tp.partition == 0 for tp in assigned) and (
                    member.client_id.startswith(CLIENT_ID_PREFIX)):
                url = member.client_id[len(CLIENT_ID_PREFIX):]
        self._found = (time.monotonic(), url)
        return url
