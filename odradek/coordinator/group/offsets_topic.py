"""__consumer_offsets as Kafka writes it: which partition holds a group, and the records.

Every record has a key and a value, each an int16 version followed by the struct of
Kafka's own schema (OffsetCommitKey.json, GroupMetadataKey.json, ...), so Kafka's tools
(kafka-console-consumer's offsets formatters, kafka-dump-log --offsets-decoder) read
what Odradek writes and Odradek loads what Kafka wrote:

- key version 0 or 1: OffsetCommitKey (group, topic, partition); Kafka 4.0 writes 1.
  Value: OffsetCommitValue v3 (v1 when the commit carries an expire timestamp, as Kafka
  writes it for OffsetCommit v2-v4 with a retention time).
- key version 2: GroupMetadataKey (group). Value: GroupMetadataValue v3.
- a null value is a tombstone: the offset or the group is gone (compaction removes it).
- key versions 3 and up are the records of Kafka's newer group types (KIP-848 consumer
  groups, share groups); they are skipped when loading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from odradek.protocol.exceptions import DecodeError
from odradek.protocol.messages.group_metadata_key import GroupMetadataKey
from odradek.protocol.messages.group_metadata_value import GroupMetadataValue
from odradek.protocol.messages.offset_commit_key import OffsetCommitKey
from odradek.protocol.messages.offset_commit_value import OffsetCommitValue
from odradek.protocol.primitives import INT16

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1  # the only version with expireTimestamp
GROUP_METADATA_VALUE_VERSION = 3

_M = TypeVar("_M", OffsetCommitKey, GroupMetadataKey, OffsetCommitValue, GroupMetadataValue)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as an int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The __consumer_offsets partition of a group: Kafka's
    Utils.abs(groupId.hashCode) % partitions, where abs(Integer.MIN_VALUE) is 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


# ---- writing ------------------------------------------------------------------------------


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(INT16.pack(OFFSET_COMMIT_KEY_VERSION))
    OffsetCommitKey(group=group, topic=topic, partition=partition).encode_into(
        out, OFFSET_COMMIT_KEY_VERSION)
    return bytes(out)


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int | None = None) -> bytes:
    if expire_timestamp is None:
        version = OFFSET_COMMIT_VALUE_VERSION
        value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                                  commit_timestamp=commit_timestamp)
    else:  # v1 has no leader epoch: Kafka drops it there too
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
        value = OffsetCommitValue(offset=offset, metadata=metadata,
                                  commit_timestamp=commit_timestamp,
                                  expire_timestamp=expire_timestamp)
    out = bytearray(INT16.pack(version))
    value.encode_into(out, version)
    return bytes(out)


def group_metadata_key(group: str) -> bytes:
    out = bytearray(INT16.pack(GROUP_METADATA_KEY_VERSION))
    GroupMetadataKey(group=group).encode_into(out, GROUP_METADATA_KEY_VERSION)
    return bytes(out)


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = bytearray(INT16.pack(GROUP_METADATA_VALUE_VERSION))
    value.encode_into(out, GROUP_METADATA_VALUE_VERSION)
    return bytes(out)


# ---- reading ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A record of another kind of group (key version 3 and up): not the classic
    protocol's business."""

    version: int


def read_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | OtherKey:
    """Raises DecodeError for a key that does not parse."""
    version = _version(key, "key")
    if version in (0, 1):
        return _decode(OffsetCommitKey, key, version)
    if version == GROUP_METADATA_KEY_VERSION:
        return _decode(GroupMetadataKey, key, version)
    return OtherKey(version)


def read_offset_commit_value(value: bytes) -> OffsetCommitValue:
    return _decode(OffsetCommitValue, value, _version(value, "offset commit value"))


def read_group_metadata_value(value: bytes) -> GroupMetadataValue:
    return _decode(GroupMetadataValue, value, _version(value, "group metadata value"))


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version")
    (version,) = INT16.unpack_from(data, 0)
    return int(version)


def _decode(cls: type[_M], data: bytes, version: int) -> _M:
    if version < cls.MIN_VERSION:
        raise DecodeError(f"{cls.NAME} has no version {version}")
    # Newer versions only add tagged fields (KIP-915): read them as the newest we know.
    message, _ = cls.decode_from(data, 2, min(version, cls.MAX_VERSION))
    return message
