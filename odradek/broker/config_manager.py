"""ConfigManager: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs of topics and brokers.

A topic's configs are its overrides, kept by the Controller in the metadata store; every
other topic config takes the broker's topic default (log.retention.ms, ...), or Kafka's
default where no broker setting supplies one (remote.storage.enable, ...). A broker's
configs have three layers (BrokerConfig): server.properties, dynamic cluster-wide
defaults (resource name "") and dynamic per-broker values (resource name: its node id).
The dynamic layers live in the metadata store, are applied at once (the listener set in
`on_broker_config_change` gets the new BrokerConfig) and are loaded again at start-up
(`load_dynamic_broker_configs`).

Errors are Kafka 4.0's (its ConfigAdminManager, ConfigHelper and the controller's
ConfigurationControlManager): a resource named twice, a config named twice in one resource,
a null value or a broker resource naming another broker is INVALID_REQUEST; a broker change
Kafka's DynamicBrokerConfig refuses (not dynamic, a bad value) is INVALID_REQUEST too; a
topic config that is unknown or invalid is INVALID_CONFIG, as is APPEND or SUBTRACT on a
config that is not a list; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
remote.storage.enable=true is INVALID_CONFIG too ("tiered storage is not supported"), as
Kafka answers it when the broker has no remote log storage system enabled.

Every config name Kafka 3.9 accepts is accepted (server/config.py, storage/config.py): one
that has no effect here logs a warning saying why when a topic is created or altered with it,
or when a broker config is updated with it; the broker's own settings that would pretend to a
security Odradek lacks (an authorizer, client certificates, ...) are refused with a message
saying so (INVALID_REQUEST), as are dynamic passwords (Odradek does not encrypt its metadata
store) and the security configs Kafka updates only per listener.

Authorization is Kafka 3.9's (KafkaApis, ConfigHelper, ConfigAdminManager): DescribeConfigs
needs DESCRIBE_CONFIGS, the alters ALTER_CONFIGS, on the topic (else
TOPIC_AUTHORIZATION_FAILED) or on the cluster for BROKER and BROKER_LOGGER resources (else
CLUSTER_AUTHORIZATION_FAILED). As in Kafka, an alter's duplicate and null checks, and a
broker change's whole validation, come before the question; a topic's values after it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from enum import IntEnum
from typing import Any, cast

from odradek.broker.auth_helper import ALLOW_ALL, AclOperation, AuthHelper
from odradek.broker.auth_helper import ResourceType as AclResourceType
from odradek.cluster.controller import Controller, InvalidRequestError, UnknownTopicError
from odradek.cluster.metadata import MetadataStore
from odradek.cluster.topics import validate_topic_name
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_configs_request,
    alter_configs_response,
    describe_configs_request,
    describe_configs_response,
    incremental_alter_configs_request,
    incremental_alter_configs_response,
)
from odradek.security.acl import ClusterAuthorizationError
from odradek.security.password_encoder import PasswordEncoder, PasswordEncoderError
from odradek.server.config import (
    LIST_CONFIG_TYPE,
    PASSWORD_CONFIG_TYPE,
    BrokerConfig,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    broker_key,
    ignored_settings,
)
from odradek.server.network import RequestContext
from odradek.storage.config import TOPIC_CONFIGS, ConfigType, LogConfig
from odradek.storage.errors import InvalidConfigError

log = logging.getLogger(__name__)

# Dynamic broker configs in the metadata store's flat map, as "<entity>/<name>": the entity
# is "<default>" for the cluster-wide layer (Kafka's name for it, /config/brokers/<default>)
# or a node id.
CLUSTER_DEFAULT_ENTITY = "<default>"
_INTEGER = re.compile(r"[+-]?\d+")  # what Java's Integer.parseInt takes


class ResourceType(IntEnum):
    """ConfigResource types (DescribeConfigs, AlterConfigs)."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16  # KIP-714: not served here; authorized as Kafka does


# The ConfigResource types Kafka authorizes on the CLUSTER resource (the others: TOPIC).
_CLUSTER_RESOURCES = frozenset({ResourceType.BROKER, ResourceType.BROKER_LOGGER,
                                ResourceType.CLIENT_METRICS})


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_OPERATIONS = frozenset(op.value for op in AlterConfigOp)


class InvalidConfigurationError(KafkaError):
    """Kafka's InvalidConfigurationException: INVALID_CONFIG about no one setting's value
    (storage's InvalidConfigError names the setting whose value is refused)."""

    error_code = ErrorCode.INVALID_CONFIG


class TopicAuthorizationError(KafkaError):
    error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


BrokerConfigListener = Callable[[BrokerConfig], None]
# Checks what a new BrokerConfig asks of running parts (a TLS listener's new keystore) and
# returns what puts it in force, or None when it asks nothing; raises InvalidConfigError.
BrokerReconfiguration = Callable[[BrokerConfig], Callable[[], None] | None]


class ConfigManager:
    def __init__(self, config: BrokerConfig, controller: Controller) -> None:
        self.config = config  # the one in force, dynamic layers included
        self.controller = controller
        self.on_broker_config_change: BrokerConfigListener | None = None
        self.prepare_reconfiguration: BrokerReconfiguration | None = None
        self.auth: AuthHelper = ALLOW_ALL  # the broker sets its own once built
        # One resource's change at a time: each reads what the one before it stored.
        self._altering = asyncio.Lock()

    @property
    def store(self) -> MetadataStore:
        return self.controller.store

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
        }

    # ---- topic configs ----------------------------------------------------------------

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> LogConfig:
        """The topic's LogConfig from its overrides (CreateTopics, AlterConfigs); an
        InvalidConfigError names a bad key. Logs a warning for each override that is
        accepted and has no effect here."""
        config = self._topic_log_config(configs)
        for name, raw in configs.items():
            key = TOPIC_CONFIGS[name]
            reason = None if raw is None else key.ignored(getattr(config, key.attr))
            if reason:
                log.warning("topic config %s=%s is accepted and has no effect: %s",
                            name, raw, reason)
        return config

    def _topic_log_config(self, configs: Mapping[str, str | None]) -> LogConfig:
        values = {k: v for k, v in configs.items() if v is not None}
        return LogConfig.from_properties(values, defaults=self.config.log_config)

    def topic_config_entries(self, overrides: Mapping[str, str],
                             names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """Every topic config (or those of `names`) of a topic with these overrides, as
        DescribeConfigs and CreateTopics v5+ list them: the value in force, where it comes
        from, and its synonyms (the override, then the broker settings that supply the
        default, highest precedence first). A config that no broker setting supplies comes
        from the topic (TOPIC_CONFIG) or is Kafka's default (DEFAULT_CONFIG, no synonyms)."""
        wanted = None if names is None else set(names)
        keys = [k for k in TOPIC_CONFIGS.values() if wanted is None or k.name in wanted]
        effective = self._topic_log_config(overrides)
        broker = {e.name: e for e in self.config.describe(k.synonyms[0].name for k in keys
                                                          if k.synonyms)}
        entries = []
        for key in keys:
            value = key.format(getattr(effective, key.attr))
            synonyms: list[ConfigSynonym] = []
            if key.name in overrides:
                synonyms.append(ConfigSynonym(key.name, value, ConfigSource.TOPIC_CONFIG))
            if key.synonyms:
                synonyms += broker[key.synonyms[0].name].synonyms
            entries.append(ConfigEntry(
                name=key.name, value=value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False, is_sensitive=False, config_type=int(key.type),
                documentation=key.doc, synonyms=tuple(synonyms),
            ))
        return entries

    # ---- DescribeConfigs --------------------------------------------------------------

    def handle_describe_configs(self, request: Request, context: RequestContext) -> Message:
        """As Kafka's ConfigHelper: DESCRIBE_CONFIGS on the topic, or on the cluster for the
        broker resources, decided first; the refused resources are answered after the
        others (TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED, no configs)."""
        body = cast(describe_configs_request.DescribeConfigsRequest, request.body)
        allowed, refused = [], []
        for resource in body.resources:
            code = self._authorize(context, AclOperation.DESCRIBE_CONFIGS,
                                   resource.resource_type, resource.resource_name)
            if code == ErrorCode.NONE:
                allowed.append(resource)
            else:
                refused.append((resource, code))
        results = []
        for resource in allowed:
            result = describe_configs_response.DescribeConfigsResult(
                resource_type=resource.resource_type, resource_name=resource.resource_name,
                error_message=None)
            names = resource.configuration_keys or None  # null or empty: all of them
            try:
                entries = self._describe(resource.resource_type, resource.resource_name, names)
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e) or None
                results.append(result)
                continue
            if entries is None:  # Kafka answers an unknown topic without a message
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                result.configs = [_describe_entry(e, body.include_synonyms,
                                                  body.include_documentation,
                                                  request.api_version) for e in entries]
            results.append(result)
        results += [describe_configs_response.DescribeConfigsResult(
            error_code=code, error_message=ErrorCode(code).message, configs=[],
            resource_type=resource.resource_type, resource_name=resource.resource_name)
            for resource, code in refused]
        return describe_configs_response.DescribeConfigsResponse(results=results)

    def _authorize(self, context: RequestContext, operation: AclOperation,
                   resource_type: int, name: str) -> int:
        """NONE when `operation` is allowed on a config resource, else the error Kafka
        answers for it. A resource type Kafka does not know (it refuses the whole request
        for it) is let through, to be answered INVALID_REQUEST on its own."""
        if resource_type == ResourceType.TOPIC:
            if self.auth.authorize(context, operation, AclResourceType.TOPIC, name):
                return ErrorCode.NONE
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if resource_type in _CLUSTER_RESOURCES:
            if self.auth.authorize_cluster(context, operation):
                return ErrorCode.NONE
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return ErrorCode.NONE

    def _describe(self, resource_type: int, name: str, names: list[str] | None
                  ) -> list[ConfigEntry] | None:
        if resource_type == ResourceType.TOPIC:
            validate_topic_name(name)
            topic = self.controller.topics.get(name)
            if topic is None:
                return None
            return self.topic_config_entries(topic.configs, names)
        if resource_type == ResourceType.BROKER:
            if name == "":
                # Kafka lists the cluster-wide defaults with only their dynamic default
                # synonyms (ConfigHelper.createBrokerConfigEntry, perBrokerConfig=false).
                return [replace(e, synonyms=tuple(
                    s for s in e.synonyms
                    if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
                    for e in self.config.describe(names, cluster_default=True)]
            if self._broker_id(name, "Broker") != self.config.node_id:
                raise InvalidRequestError(f"Unexpected broker id, expected "
                                          f"{self.config.node_id} or empty string, but "
                                          f"received {name}")
            return self.config.describe(names)
        raise InvalidRequestError(f"Unsupported resource type: {_type_name(resource_type)}")

    @staticmethod
    def _broker_id(name: str, what: str) -> int:
        if not _INTEGER.fullmatch(name):
            raise InvalidRequestError(f"{what} id must be an integer, but it is: {name}")
        return int(name)

    # ---- AlterConfigs and IncrementalAlterConfigs -------------------------------------

    async def handle_alter_configs(self, request: Request, context: RequestContext) -> Message:
        """Legacy AlterConfigs: each resource's overrides become exactly those given."""
        body = cast(alter_configs_request.AlterConfigsRequest, request.body)
        errors = await self._alter_all(body.resources, body.validate_only, context,
                                       incremental=False)
        return alter_configs_response.AlterConfigsResponse(responses=[
            alter_configs_response.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name)
            for r, (code, message) in zip(body.resources, errors, strict=True)
        ])

    async def handle_incremental_alter_configs(self, request: Request, context: RequestContext
                                               ) -> Message:
        body = cast(incremental_alter_configs_request.IncrementalAlterConfigsRequest, request.body)
        errors = await self._alter_all(body.resources, body.validate_only, context,
                                       incremental=True)
        return incremental_alter_configs_response.IncrementalAlterConfigsResponse(responses=[
            incremental_alter_configs_response.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name)
            for r, (code, message) in zip(body.resources, errors, strict=True)
        ])

    async def _alter_all(self, resources: list[Any], validate_only: bool,
                         context: RequestContext, *, incremental: bool
                         ) -> list[tuple[int, str | None]]:
        ids = [(r.resource_type, r.resource_name) for r in resources]
        errors: list[tuple[int, str | None]] = []
        for r, rid in zip(resources, ids, strict=True):
            try:
                if ids.count(rid) > 1:
                    raise InvalidRequestError("Each resource must appear at most once.")
                async with self._altering:
                    await self._alter(r, validate_only, incremental, context)
            except KafkaError as e:
                log.info("cannot alter the configs of %s %r: %s", _type_name(r.resource_type),
                         r.resource_name, str(e) or ErrorCode(e.error_code).name)
                errors.append((int(e.error_code), str(e) or None))
                continue
            errors.append((ErrorCode.NONE, None))
        return errors

    async def _alter(self, resource: Any, validate_only: bool, incremental: bool,
                     context: RequestContext) -> None:
        """One resource's change. As Kafka 3.9 (ConfigAdminManager.preprocess, then
        KafkaApis): the checks of the request's shape, and a broker change's validation,
        come before ALTER_CONFIGS is asked for; a topic's values are checked after it."""
        configs = resource.configs
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise InvalidRequestError("Error due to duplicate config keys")
        nulls = [c.name for c in configs if c.value is None and not (
            incremental and c.config_operation == AlterConfigOp.DELETE)]
        if nulls:
            raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))
        kind, name = resource.resource_type, resource.resource_name
        if kind == ResourceType.TOPIC:
            if not self.auth.authorize(context, AclOperation.ALTER_CONFIGS,
                                       AclResourceType.TOPIC, name):
                raise TopicAuthorizationError()  # without a message, as Kafka
            _check_operations(configs, incremental)
            await self._alter_topic(name, configs, validate_only, incremental)
            return
        _check_operations(configs, incremental)
        if kind == ResourceType.BROKER:
            await self._alter_broker(name, configs, validate_only, incremental, context)
        elif (kind == ResourceType.BROKER_LOGGER and incremental
              and not self.auth.authorize_cluster(context, AclOperation.ALTER_CONFIGS)):
            # Kafka's RuntimeLoggerManager asks before anything else.
            raise ClusterAuthorizationError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message)
        else:
            raise InvalidRequestError(f"Unknown resource type {kind}")

    async def _alter_topic(self, name: str, configs: list[Any], validate_only: bool,
                           incremental: bool) -> None:
        validate_topic_name(name)
        topic = self.controller.topics.get(name)
        current = dict(topic.configs) if topic is not None else {}
        if incremental:
            overrides = _apply_ops(current, configs, _topic_list_default)
        else:
            overrides = {c.name: c.value for c in configs}
        # As Kafka's controller: the values are checked first (InvalidConfigError is
        # INVALID_CONFIG), then that the topic exists.
        self.validate_topic_configs(overrides)
        if topic is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        if validate_only or overrides == current:
            return
        await self.controller.alter_topic_configs(name, overrides)
        log.info("topic %s: configs now %s", name, overrides)

    async def _alter_broker(self, name: str, configs: list[Any], validate_only: bool,
                            incremental: bool, context: RequestContext) -> None:
        cluster_default = name == ""
        if not cluster_default and self._broker_id(name, "Node") != self.config.node_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self.config.node_id}, "
                                      f"but received {name}")
        config = self.config
        current = dict(config.dynamic_defaults if cluster_default else config.dynamic)
        if incremental:
            layer = _apply_ops(current, configs, _broker_list_default)
        else:
            layer = {c.name: c.value for c in configs}
        updates: dict[str, str | None] = {k: None for k in current if k not in layer}
        updates.update((k, v) for k, v in layer.items() if current.get(k) != v)
        try:
            new = config.with_dynamic(updates, cluster_default=cluster_default)
        except InvalidConfigError as e:
            # Kafka answers INVALID_REQUEST whenever DynamicBrokerConfig refuses a change
            # (KAFKA-13609), whether the config is static, unknown or its value bad.
            raise InvalidRequestError(str(e)) from None
        if not self.auth.authorize_cluster(context, AclOperation.ALTER_CONFIGS):
            raise ClusterAuthorizationError()  # without a message, as Kafka
        # A keystore given again, its file replaced in place, is reloaded even though no
        # value changed (Kafka's reloadUpdatedFilesWithoutConfigChange); files are read
        # only for an authorized client.
        reconfigure = None
        if self.prepare_reconfiguration is not None:
            try:
                reconfigure = await asyncio.to_thread(self.prepare_reconfiguration, new)
            except InvalidConfigError as e:
                raise InvalidRequestError(str(e)) from None
        if validate_only:
            return
        if not updates:
            if reconfigure is not None:
                reconfigure()
            return
        # The store's read and write (ZooKeeper round trips, or the metadata file's
        # write) in a worker thread: the event loop serves other clients meanwhile.
        await asyncio.to_thread(self._store_broker_layers, new)
        self.config = new
        log.info("broker %s: dynamic configs %s now %s", self.config.node_id,
                 "cluster-wide" if cluster_default else "of this broker", layer)
        for warning in ignored_settings(updates):
            log.warning("broker %s%s: %s", self.config.node_id,
                        " (cluster-wide default)" if cluster_default else "", warning)
        if reconfigure is not None:
            reconfigure()
        if self.on_broker_config_change is not None:
            self.on_broker_config_change(new)

    def _store_broker_layers(self, config: BrokerConfig) -> None:
        stored = {k: v for k, v in self.store.broker_configs().items()
                  if _entity(k) not in (CLUSTER_DEFAULT_ENTITY, str(config.node_id))}
        encoder = password_encoder(config)
        for entity, layer in ((CLUSTER_DEFAULT_ENTITY, config.dynamic_defaults),
                              (str(config.node_id), config.dynamic)):
            for k, v in layer.items():
                if _is_password(k):  # with_dynamic let it through: there is an encoder
                    assert encoder is not None
                    v = encoder.encode(v)
                stored[f"{entity}/{k}"] = v
        self.store.set_broker_configs(stored)


def password_encoder(config: BrokerConfig, *, old: bool = False) -> PasswordEncoder | None:
    """The encoder of the broker's password.encoder.secret (or .old.secret); None without."""
    secret = config.get("password.encoder.old.secret" if old else "password.encoder.secret")
    if secret is None:
        return None
    return PasswordEncoder(str(secret), config.get("password.encoder.keyfactory.algorithm"),
                           config.get("password.encoder.cipher.algorithm"),
                           config.get("password.encoder.key.length"),
                           config.get("password.encoder.iterations"))


def _is_password(name: str) -> bool:
    try:
        return broker_key(name).config_type == PASSWORD_CONFIG_TYPE
    except InvalidConfigError:  # a stored name no longer known: load_dynamic skips it
        return False


def _decode_passwords(config: BrokerConfig, store: MetadataStore,
                      stored: dict[str, str]) -> dict[str, str]:
    """The stored dynamic configs with their passwords decoded (Kafka's
    fromPersistentProps): one the secret cannot decode is left out with an error logged.
    Passwords password.encoder.old.secret decodes are stored again under the new secret
    (Kafka's maybeReEncodePasswords)."""
    encoder, old = password_encoder(config), password_encoder(config, old=True)
    decoded, reencoded = dict(stored), {}
    for name, value in stored.items():
        entity, _, key = name.partition("/")
        if entity != str(config.node_id) or not _is_password(key):
            continue
        plain = None
        for candidate in (old, encoder):
            if candidate is None:
                continue
            try:
                plain = candidate.decode(value)
            except PasswordEncoderError:
                continue
            if candidate is old and encoder is not None:
                reencoded[name] = encoder.encode(plain)
            break
        if plain is None:
            log.error("Dynamic password config %s could not be decoded, ignoring.%s", name,
                      "" if encoder else " (password.encoder.secret is not set)")
            del decoded[name]
        else:
            decoded[name] = plain
    if reencoded:
        store.set_broker_configs({**stored, **reencoded})
        log.info("dynamic password configs %s encoded again with the new "
                 "password.encoder.secret", sorted(reencoded))
    return decoded


def load_dynamic_broker_configs(config: BrokerConfig, store: MetadataStore) -> BrokerConfig:
    """`config` with the dynamic broker configs kept in the metadata store applied, at
    start-up. One that no longer applies (e.g. after an upgrade) is skipped with a warning
    rather than keeping the broker down, as Kafka does."""
    stored = _decode_passwords(config, store, store.broker_configs())
    for entity, cluster_default in ((CLUSTER_DEFAULT_ENTITY, True),
                                    (str(config.node_id), False)):
        layer = {k.split("/", 1)[1]: v for k, v in stored.items() if _entity(k) == entity}
        while layer:
            try:
                config = config.with_dynamic(layer, cluster_default=cluster_default)
            except InvalidConfigError as e:
                log.warning("ignoring the stored dynamic broker config %s: %s", e.key, e)
                if layer.pop(e.key, None) is None:  # a rule spanning layers: drop them all
                    log.warning("ignoring the stored dynamic broker configs %s", layer)
                    layer = {}
                continue
            log.info("dynamic broker configs (%s): %s",
                     "cluster-wide" if cluster_default else f"broker {entity}", layer)
            for warning in ignored_settings(layer):
                log.warning("stored dynamic broker config %s", warning)
            break
    return config


def _check_operations(configs: list[Any], incremental: bool) -> None:
    if incremental:
        for c in configs:
            if c.config_operation not in _OPERATIONS:
                raise InvalidRequestError(f"Unknown operations type {c.config_operation}")


def _entity(key: str) -> str:
    return key.split("/", 1)[0]


def _apply_ops(current: Mapping[str, str], configs: list[Any],
               list_default: Callable[[str, AlterConfigOp], str | None]) -> dict[str, str]:
    """IncrementalAlterConfigs' operations applied to a resource's explicit configs.
    APPEND and SUBTRACT work on the items of a list config, starting from its default
    when the resource does not set it."""
    result = dict(current)
    for c in configs:
        op = AlterConfigOp(c.config_operation)
        if op is AlterConfigOp.SET:
            result[c.name] = c.value
        elif op is AlterConfigOp.DELETE:
            result.pop(c.name, None)
        else:
            old = result.get(c.name)
            if old is None:
                old = list_default(c.name, op)
            items = [item for item in (old or "").split(",") if item]
            for item in c.value.split(","):
                if op is AlterConfigOp.APPEND and item not in items:
                    items.append(item)
                elif op is AlterConfigOp.SUBTRACT and item in items:
                    items.remove(item)
            result[c.name] = ",".join(items)
    return result


def _topic_list_default(name: str, op: AlterConfigOp) -> str | None:
    """The value a topic's list config starts from when the topic does not set it: the
    topic config's own default, not the broker's (as Kafka's controller does)."""
    key = TOPIC_CONFIGS.get(name)
    if key is None or key.type is not ConfigType.LIST:
        raise InvalidConfigurationError(f"Can't {op.name} to key {name} because its type is "
                                        "not LIST.")
    return key.format(key.default)


def _broker_list_default(name: str, op: AlterConfigOp) -> str | None:
    try:
        key = broker_key(name)
    except InvalidConfigError:
        raise InvalidConfigurationError(f"Unknown config name: {name}") from None
    if key.config_type != LIST_CONFIG_TYPE:
        raise InvalidConfigurationError(f"Config value {op.name.lower()} is not allowed for "
                                        f"config key: {name}")
    return None if key.default is None else key.format(key.default)


def _describe_entry(entry: ConfigEntry, include_synonyms: bool, include_documentation: bool,
                    version: int) -> describe_configs_response.DescribeConfigsResourceResult:
    return describe_configs_response.DescribeConfigsResourceResult(
        name=entry.name, value=entry.value, read_only=entry.read_only,
        config_source=int(entry.source), is_sensitive=entry.is_sensitive,
        synonyms=[describe_configs_response.DescribeConfigsSynonym(
            name=s.name, value=s.value, source=int(s.source)) for s in entry.synonyms]
        if include_synonyms else [],
        config_type=entry.config_type,
        documentation=entry.documentation if include_documentation else None,
        # v0's only word on where a value comes from (v1 on: config_source).
        is_default=version == 0 and entry.source == ConfigSource.DEFAULT_CONFIG,
    )


def _type_name(resource_type: int) -> str:
    try:
        return ResourceType(resource_type).name
    except ValueError:
        return str(resource_type)
