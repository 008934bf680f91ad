"""RegistryState: every subject, version, schema id, config and mode, as the records of the
`_schemas` topic make them, in Confluent Schema Registry's formats.

The topic is the registry's only storage: a registry (re)starting reads it from the start
and `apply`s each record, and a write is a record produced to it and applied when read
back, so that every instance converges on the same state in the topic's order. Keys and
values are JSON, as Confluent's KafkaStore writes them:

  {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}
      {"subject":"s","version":1,"id":1,"schema":"...","deleted":false}
      (+ "schemaType" when not AVRO, "references" when any; null: permanently deleted)
  {"keytype":"CONFIG","subject":"s"|null,"magic":0}   {"compatibilityLevel":"FULL"} | null
  {"keytype":"MODE","subject":"s"|null,"magic":0}     {"mode":"READONLY"} | null
  {"keytype":"DELETE_SUBJECT","subject":"s","magic":0}  {"subject":"s","version":3}
  {"keytype":"CLEAR_SUBJECT","subject":"s","magic":0}   {"subject":"s"}
  {"keytype":"NOOP","magic":0}                          null

Pure logic: no I/O, no clock.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                        "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_COMPATIBILITY = "BACKWARD"  # Confluent's schema.compatibility.level default
DEFAULT_MODE = "READWRITE"


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another subject's version, by the name the schema uses."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(slots=True)
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """The version as GET /subjects/{s}/versions/{v} answers it."""
        body: dict[str, Any] = {"subject": self.subject, "version": self.version,
                                "id": self.id}
        if self.schema_type != "AVRO":  # Confluent leaves AVRO, the default, out
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [r.to_json() for r in self.references]
        body["schema"] = self.schema
        return body


@dataclass(slots=True)
class RegistryState:
    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    schemas_by_id: dict[int, SchemaVersion] = field(default_factory=dict)  # first seen
    configs: dict[str | None, str] = field(default_factory=dict)  # None: the global one
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    applied: int = 0  # records applied

    # ---- applying the topic's records ------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of _schemas. A record this registry cannot read is skipped (and
        logged): another registry's newer record type must not stop this one."""
        self.applied += 1
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value is not None else None
        except (ValueError, UnicodeDecodeError):
            log.warning("_schemas: a record that is not JSON skipped: key %r", key)
            return
        if not isinstance(k, dict):
            return
        keytype = k.get("keytype")
        try:
            if keytype == "SCHEMA":
                self._apply_schema(k, v)
            elif keytype == "CONFIG":
                self._apply_setting(self.configs, k, v, "compatibilityLevel")
            elif keytype == "MODE":
                self._apply_setting(self.modes, k, v, "mode")
            elif keytype == "DELETE_SUBJECT" and isinstance(v, dict):
                for version in self.subjects.get(k["subject"], {}).values():
                    if version.version <= int(v.get("version", 0)):
                        version.deleted = True
            elif keytype == "CLEAR_SUBJECT":
                versions = self.subjects.get(k["subject"], {})
                for number in [n for n, sv in versions.items() if sv.deleted]:
                    del versions[number]
                if not versions:
                    self.subjects.pop(k["subject"], None)
            # NOOP and unknown key types change nothing
        except (KeyError, TypeError, ValueError) as e:
            log.warning("_schemas: a %s record skipped: %s (key %r)", keytype, e, key)

    def _apply_schema(self, k: dict[str, Any], v: Any) -> None:
        subject, number = str(k["subject"]), int(k["version"])
        versions = self.subjects.setdefault(subject, {})
        if v is None:  # a tombstone: the version is gone for good
            versions.pop(number, None)
            if not versions:
                del self.subjects[subject]
            return
        version = SchemaVersion(
            subject, number, int(v["id"]), str(v["schema"]), v.get("schemaType") or "AVRO",
            tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                  for r in v.get("references") or ()),
            bool(v.get("deleted", False)))
        versions[number] = version
        self.schemas_by_id.setdefault(version.id, version)
        self.max_id = max(self.max_id, version.id)

    @staticmethod
    def _apply_setting(settings: dict[str | None, str], k: dict[str, Any], v: Any,
                       name: str) -> None:
        subject = k.get("subject")
        if v is None:
            settings.pop(subject, None)
        else:
            settings[subject] = str(v[name])

    # ---- reads -----------------------------------------------------------------------------

    def live_versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        return [self.subjects[subject][n] for n in sorted(self.subjects.get(subject, {}))
                if deleted or not self.subjects[subject][n].deleted]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.live_versions(s, deleted))

    def compatibility(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[SchemaVersion]:
        return [v for versions in self.subjects.values() for v in versions.values()
                if v.id == schema_id and (deleted or not v.deleted)]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({v.id for versions in self.subjects.values()
                       for v in versions.values() if not v.deleted
                       and any(r.subject == subject and r.version == version
                               for r in v.references)})


# ---- the records a write produces ----------------------------------------------------------


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def schema_record(version: SchemaVersion) -> tuple[bytes, bytes]:
    value: dict[str, Any] = {"subject": version.subject, "version": version.version,
                             "id": version.id}
    if version.schema_type != "AVRO":
        value["schemaType"] = version.schema_type
    if version.references:
        value["references"] = [r.to_json() for r in version.references]
    value["schema"] = version.schema
    value["deleted"] = version.deleted
    return (_json({"keytype": "SCHEMA", "subject": version.subject,
                   "version": version.version, "magic": 1}), _json(value))


def schema_tombstone(subject: str, version: int) -> tuple[bytes, None]:
    return _json({"keytype": "SCHEMA", "subject": subject, "version": version,
                  "magic": 1}), None


def config_record(subject: str | None, level: str | None) -> tuple[bytes, bytes | None]:
    return (_json({"keytype": "CONFIG", "subject": subject, "magic": 0}),
            None if level is None else _json({"compatibilityLevel": level}))


def mode_record(subject: str | None, mode: str | None) -> tuple[bytes, bytes | None]:
    return (_json({"keytype": "MODE", "subject": subject, "magic": 0}),
            None if mode is None else _json({"mode": mode}))


def delete_subject_record(subject: str, version: int) -> tuple[bytes, bytes]:
    return (_json({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0}),
            _json({"subject": subject, "version": version}))


def clear_subject_record(subject: str) -> tuple[bytes, bytes]:
    return (_json({"keytype": "CLEAR_SUBJECT", "subject": subject, "magic": 0}),
            _json({"subject": subject}))


NOOP_KEY = _json({"keytype": "NOOP", "magic": 0})
