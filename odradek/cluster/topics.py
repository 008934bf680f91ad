"""Topic names as Kafka allows them (Kafka's Topic.validate) and the internal topics."""

from __future__ import annotations

import re

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError

MAX_NAME_LENGTH = 249  # a partition directory name must still fit in 255 bytes
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")

GROUP_METADATA_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC})


class InvalidTopicError(KafkaError):
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicExistsError(KafkaError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long, longer than {MAX_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: it may contain only ASCII letters, digits, "
            "'.', '_' and '-'"
        )


def collision_key(name: str) -> str:
    """Names equal after this collide in metric names, so Kafka refuses the second one."""
    return name.replace(".", "_")
