"""AdminManager: the admin APIs: topics, partitions, configs, log dirs, records deletion.

Topic changes go through the Controller (which keeps the metadata store and tells the
ReplicaManager what to lead); topic configs are validated against Kafka's topic config
table (odradek/storage/config.py) before anything is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import Controller, InvalidRequestError
from odradek.cluster.topics import InvalidTopicError, is_internal
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import create_topics_response, delete_topics_response
from odradek.protocol.primitives import ZERO_UUID
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext
from odradek.storage.config import TOPIC_CONFIGS, LogConfig

log = logging.getLogger(__name__)

# DescribeConfigs' config sources.
TOPIC_CONFIG_SOURCE = 1
STATIC_BROKER_CONFIG_SOURCE = 4
DEFAULT_CONFIG_SOURCE = 5


class TopicDeletionDisabledError(KafkaError):
    error_code = ErrorCode.TOPIC_DELETION_DISABLED


class AdminManager:
    def __init__(self, config: BrokerConfig, controller: Controller,
                 replica_manager: ReplicaManager) -> None:
        self.config = config
        self.controller = controller
        self.replica_manager = replica_manager

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
        }

    # ---- topic configs ----------------------------------------------------------------

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> LogConfig:
        """The topic's LogConfig from its overrides; InvalidConfigError names a bad key."""
        values = {k: v for k, v in configs.items() if v is not None}
        return LogConfig.from_properties(values, defaults=self.config.log_config)

    def topic_config_entries(self, overrides: Mapping[str, str]
                             ) -> list[tuple[str, str, int]]:
        """(name, value, source) of every topic config, as CreateTopics v5+ lists them."""
        effective = self.config.log_config.with_overrides(overrides).to_properties()
        explicit = self.config.properties
        entries = []
        for name, key in TOPIC_CONFIGS.items():
            if name in overrides:
                source = TOPIC_CONFIG_SOURCE
            elif any(s.name in explicit for s in key.synonyms):
                source = STATIC_BROKER_CONFIG_SOURCE
            else:
                source = DEFAULT_CONFIG_SOURCE
            entries.append((name, effective[name], source))
        return entries

    # ---- CreateTopics / DeleteTopics --------------------------------------------------

    def handle_create_topics(self, request: Request, context: RequestContext) -> Message:
        body = request.body
        version = request.api_version
        names = [t.name for t in body.topics]
        results = []
        for t in body.topics:
            result = create_topics_response.CreatableTopicResult(name=t.name)
            try:
                if names.count(t.name) > 1:
                    raise InvalidRequestError(f"topic {t.name!r} is named twice in the request")
                self._create_topic(t, body.validate_only, result, version)
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e)
                result.num_partitions = result.replication_factor = -1
                result.configs = None if version >= 5 else []
            results.append(result)
        return create_topics_response.CreateTopicsResponse(topics=results)

    def _create_topic(self, t: Any, validate_only: bool,
                      result: create_topics_response.CreatableTopicResult, version: int) -> None:
        partitions = t.num_partitions
        replication_factor = t.replication_factor
        assignments = None
        if t.assignments:
            if partitions != -1 or replication_factor != -1:
                raise InvalidRequestError("give either replica assignments or partitions and "
                                          "replication factor, not both")
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        else:
            if partitions == -1:
                partitions = self.config.num_partitions
            if replication_factor == -1:
                replication_factor = self.config.default_replication_factor
        configs: dict[str, str] = {}
        for c in t.configs:
            if c.name in configs:
                raise InvalidRequestError(f"config {c.name!r} is given twice")
            if c.value is not None:
                configs[c.name] = c.value
        self.validate_topic_configs(configs)
        controller = self.controller
        if validate_only:
            controller.check_new_topic(t.name, partitions, replication_factor, assignments)
            result.topic_id = ZERO_UUID
        else:
            topic = controller.create_topic(t.name, partitions, replication_factor, configs,
                                            assignments)
            result.topic_id = topic.topic_id
        if assignments:
            partitions = len(assignments)
            replication_factor = len(next(iter(assignments.values())))
        result.num_partitions = partitions
        result.replication_factor = replication_factor
        if version >= 5:
            result.configs = [
                create_topics_response.CreatableTopicConfigs(
                    name=name, value=value, read_only=False, config_source=source,
                    is_sensitive=False)
                for name, value, source in self.topic_config_entries(configs)
            ]

    def handle_delete_topics(self, request: Request, context: RequestContext) -> Message:
        body = request.body
        version = request.api_version
        wanted = ([(t.name, t.topic_id) for t in body.topics] if version >= 6
                  else [(n, ZERO_UUID) for n in body.topic_names])
        results = []
        for name, topic_id in wanted:
            result = delete_topics_response.DeletableTopicResult(name=name, topic_id=topic_id)
            try:
                if name is None:
                    topic = self.controller.topics_by_id.get(topic_id)
                    if topic is None:
                        result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                        result.error_message = f"no topic has the id {topic_id}"
                        results.append(result)
                        continue
                    name = result.name = topic.name
                if not self.config.delete_topic_enable:
                    raise TopicDeletionDisabledError("topic deletion is disabled "
                                                     "(delete.topic.enable=false)")
                if is_internal(name):
                    raise InvalidTopicError(f"the internal topic {name} cannot be deleted")
                deleted = self.controller.delete_topic(name)
                if version >= 6:
                    result.topic_id = deleted.topic_id
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e)
            results.append(result)
        return delete_topics_response.DeleteTopicsResponse(responses=results)
