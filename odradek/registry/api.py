"""The registry's REST API: Confluent Schema Registry's (7.x), its paths, JSON shapes,
error codes and content types, so that confluent-kafka's SchemaRegistryClient and its
serializers, and any tool made for Confluent's registry, work unchanged.

Reads answer from the state the KafkaStore keeps; writes are decided on a state caught up
with the `_schemas` topic, one at a time, and answered once their record is read back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from odradek.registry.election import PrimaryElection
from odradek.registry.kafka_store import KafkaStore, StoreError
from odradek.registry.schemas import (
    SCHEMA_TYPES,
    InvalidSchemaError,
    ParsedSchema,
    incompatibilities,
    parse_schema,
)
from odradek.registry.state import (
    COMPATIBILITY_LEVELS,
    MODES,
    Reference,
    RegistryState,
    SchemaVersion,
    config_record,
    delete_subject_record,
    mode_record,
    schema_record,
    schema_tombstone,
)

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED = "X-Odradek-Forwarded"  # a write a secondary forwarded: never forwarded again
FORWARD_TIMEOUT_S = 30.0
ELECTION_WAIT_S = 15.0  # a write arriving during an election waits this long for it
MAX_BODY = 16 * 1024 * 1024  # a schema request's body (Confluent's default is larger)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RegistryError(Exception):
    """An answer in Confluent's error shape: {"error_code": 40401, "message": "..."}."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


def _unwrapped(handler: Handler) -> Any:
    """The route's own handler under aiohttp's partial wrappers (middlewares)."""
    while hasattr(handler, "func"):
        handler = handler.func
    return handler


def _unwrapped_route(request: web.Request) -> Handler:
    return request.match_info.handler


def _answer(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type=CONTENT_TYPE)


class RegistryApi:
    """The REST API over a KafkaStore. With an `election`, only the primary decides
    writes: the others forward them to it (Confluent's leader forwarding) and answer what
    it answered."""

    def __init__(self, store: KafkaStore, election: PrimaryElection | None = None) -> None:
        self.store = store
        self.election = election
        self._writes = asyncio.Lock()  # one write decided at a time
        self._parsed: dict[int, ParsedSchema] = {}  # by schema id
        self._session: aiohttp.ClientSession | None = None
        self._write_handlers = {self._register, self._delete_version, self._delete_subject,
                                self._put_config, self._delete_config, self._put_mode,
                                self._delete_mode}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=MAX_BODY)
        r = app.router
        r.add_get("/", self._root)
        r.add_get("/subjects", self._subjects)
        r.add_get("/subjects/{subject}/versions", self._versions)
        r.add_post("/subjects/{subject}/versions", self._register)
        r.add_get("/subjects/{subject}/versions/{version}", self._version)
        r.add_get("/subjects/{subject}/versions/{version}/schema", self._version_schema)
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", self._referenced_by)
        r.add_delete("/subjects/{subject}/versions/{version}", self._delete_version)
        r.add_post("/subjects/{subject}", self._lookup)
        r.add_delete("/subjects/{subject}", self._delete_subject)
        r.add_get("/schemas/types", self._types)
        r.add_get("/schemas/ids/{id}", self._schema_by_id)
        r.add_get("/schemas/ids/{id}/schema", self._raw_schema_by_id)
        r.add_get("/schemas/ids/{id}/subjects", self._subjects_of_id)
        r.add_get("/schemas/ids/{id}/versions", self._versions_of_id)
        r.add_get("/config", self._get_config)
        r.add_put("/config", self._put_config)
        r.add_delete("/config", self._delete_config)
        r.add_get("/config/{subject}", self._get_config)
        r.add_put("/config/{subject}", self._put_config)
        r.add_delete("/config/{subject}", self._delete_config)
        r.add_get("/mode", self._get_mode)
        r.add_put("/mode", self._put_mode)
        r.add_get("/mode/{subject}", self._get_mode)
        r.add_put("/mode/{subject}", self._put_mode)
        r.add_delete("/mode/{subject}", self._delete_mode)
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", self._compatible)
        r.add_post("/compatibility/subjects/{subject}/versions", self._compatible)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if (self.election is not None and not self.election.is_primary
                    and _unwrapped(handler) in self._write_handlers):
                return await self._forward(request)
            return await handler(request)
        except RegistryError as e:
            return _answer({"error_code": e.code, "message": e.message}, e.status)
        except StoreError as e:
            log.warning("registry: %s", e)
            return _answer({"error_code": 50002, "message": str(e)}, 500)
        except web.HTTPException as e:  # no such path or method, too large a body...
            return _answer({"error_code": e.status, "message": f"HTTP {e.status} {e.reason}"},
                           e.status)

    # ---- helpers ---------------------------------------------------------------------------

    def _read(self, reader: Callable[[RegistryState], Any]) -> Any:
        return self.store.read(reader)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        """A write, sent on to the primary; its answer, answered. During an election (a
        primary died or left), or while the primary found cannot be connected to (it died:
        the group has not noticed yet), it waits up to ELECTION_WAIT_S for the next one;
        a write the primary may have received is never sent twice."""
        assert self.election is not None
        if FORWARDED in request.headers:  # the primary it was sent to is no more
            raise RegistryError(500, 50004, "This registry is not the primary; try again")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ELECTION_WAIT_S
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", CONTENT_TYPE),
                   FORWARDED: "1"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S))
        while True:
            url = await asyncio.to_thread(self.election.primary_url)
            if url == self.election.url:  # elected meanwhile: ours to decide
                return await _unwrapped_route(request)(request)
            if url is not None:
                try:
                    async with self._session.request(request.method, url + request.path_qs,
                                                     data=body, headers=headers) as answer:
                        return web.Response(status=answer.status, body=await answer.read(),
                                            content_type=CONTENT_TYPE)
                except aiohttp.ClientConnectorError:  # never sent: safe to try again
                    self.election.forget_primary()
                except (aiohttp.ClientError, TimeoutError) as e:
                    raise RegistryError(500, 50003, f"Error while forwarding the request "
                                                    f"to the primary at {url}: {e}") from None
            if loop.time() >= deadline:
                raise RegistryError(500, 50004, "No primary registry could be reached (an "
                                                "election is under way); try again")
            await asyncio.sleep(0.25)

    async def _write(self, decide: Callable[[RegistryState], list[tuple[bytes, bytes | None]]]
                     ) -> None:
        """Decides a write on the state caught up with the topic, then writes its records."""
        async with self._writes:
            if self.election is not None and not self.election.is_primary:
                raise RegistryError(500, 50004, "This registry is no longer the primary; "
                                                "try again")
            await asyncio.to_thread(self.store.catch_up)
            records = self._read(decide)
            for key, value in records:
                await asyncio.to_thread(self.store.write, key, value)

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read() or b"{}")
        except (ValueError, UnicodeDecodeError) as e:
            raise RegistryError(400, 400, f"Unrecognized request body: {e}") from None
        if not isinstance(body, dict):
            raise RegistryError(422, 422, "the request body must be a JSON object")
        return body

    @staticmethod
    def _flag(request: web.Request, name: str) -> bool:
        return request.query.get(name, "false").lower() == "true"

    @staticmethod
    def _version_number(state: RegistryState, subject: str, raw: str,
                        deleted: bool = False) -> SchemaVersion:
        if subject not in state.subjects or not state.live_versions(subject, deleted):
            raise subject_not_found(subject)
        if raw in ("latest", "-1"):
            live = state.live_versions(subject, deleted)
            if not live:
                raise version_not_found(subject, raw)
            return live[-1]
        try:
            number = int(raw)
        except ValueError:
            number = 0
        if number < 1:
            raise RegistryError(422, 42202, f"The specified version '{raw}' is not a valid version "
                                "id. Allowed values are between [1, 2^31-1] and the string "
                                "\"latest\"")
        version = state.subjects[subject].get(number)
        if version is None or (version.deleted and not deleted):
            raise version_not_found(subject, number)
        return version

    def _parse(self, state: RegistryState, body: dict[str, Any],
               normalize: bool, validate_defaults: bool = True) -> ParsedSchema:
        schema = body.get("schema")
        if not isinstance(schema, str):
            raise RegistryError(422, 42201, "Invalid schema: the body has no schema string")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise RegistryError(422, 42201, f"Invalid schema: unknown schema type "
                                            f"{schema_type!r}")
        references = []
        for raw in body.get("references") or ():
            try:
                reference = Reference(str(raw["name"]), str(raw["subject"]), int(raw["version"]))
            except (KeyError, TypeError, ValueError):
                raise RegistryError(422, 42201, f"Invalid schema: bad reference {raw!r}"
                                    ) from None
            try:
                target = self._version_number(state, reference.subject,
                                              str(reference.version))
            except RegistryError:
                raise RegistryError(422, 42201, f"Invalid schema: reference {raw!r} names "
                                                "no registered version") from None
            references.append((reference, target))
        try:
            return parse_schema(schema_type, schema, references, normalize=normalize,
                                resolve=lambda r: self._version_number(
                                    state, r.subject, str(r.version)),
                                validate_defaults=validate_defaults)
        except InvalidSchemaError as e:
            raise RegistryError(422, 42201, f"Invalid schema {schema}, details: {e}"
                                ) from None

    def _parsed_version(self, state: RegistryState, version: SchemaVersion) -> ParsedSchema:
        """A stored version, parsed once: an id's schema and references never change."""
        parsed = self._parsed.get(version.id)
        if parsed is None:
            parsed = self._parsed[version.id] = self._parse(
                state, {"schema": version.schema, "schemaType": version.schema_type,
                        "references": [r.to_json() for r in version.references]},
                normalize=False, validate_defaults=False)
        return parsed

    def _schema_text(self, state: RegistryState, version: SchemaVersion,
                     request: web.Request) -> str:
        """The schema as stored; `?format=serialized` (what confluent-kafka's Protobuf
        serdes ask for) answers a Protobuf one as its base64 FileDescriptorProto."""
        if version.schema_type == "PROTOBUF" and request.query.get("format") == "serialized":
            return self._parsed_version(state, version).parsed.serialized()
        return version.schema

    @staticmethod
    def _same(parsed: ParsedSchema, other: ParsedSchema) -> bool:
        return (parsed.schema_type == other.schema_type and parsed.canonical == other.canonical
                and parsed.references == other.references)

    def _check(self, state: RegistryState, subject: str, parsed: ParsedSchema,
               against: list[SchemaVersion] | None = None) -> list[str]:
        level = state.compatibility(subject)
        existing = against if against is not None else state.live_versions(subject)
        return incompatibilities(level, parsed,
                                 [self._parsed_version(state, v) for v in existing])

    # ---- subjects and versions -------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.StreamResponse:
        return _answer({})

    async def _subjects(self, request: web.Request) -> web.StreamResponse:
        deleted = self._flag(request, "deleted")
        prefix = request.query.get("subjectPrefix", "")
        return _answer([s for s in self._read(lambda st: st.subject_names(deleted))
                        if s.startswith(prefix)])

    async def _versions(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        deleted = self._flag(request, "deleted")
        versions = self._read(lambda st: st.live_versions(subject, deleted))
        if not versions:
            raise subject_not_found(subject)
        return _answer([v.version for v in versions])

    async def _version(self, request: web.Request) -> web.StreamResponse:
        subject, raw = request.match_info["subject"], request.match_info["version"]
        deleted = self._flag(request, "deleted")

        def answer(state: RegistryState) -> dict[str, Any]:
            version = self._version_number(state, subject, raw, deleted)
            return {**version.to_json(), "schema": self._schema_text(state, version, request)}
        return _answer(self._read(answer))

    async def _version_schema(self, request: web.Request) -> web.StreamResponse:
        subject, raw = request.match_info["subject"], request.match_info["version"]
        version = self._read(lambda st: self._version_number(st, subject, raw))
        return web.Response(text=version.schema, content_type=CONTENT_TYPE)

    async def _referenced_by(self, request: web.Request) -> web.StreamResponse:
        subject, raw = request.match_info["subject"], request.match_info["version"]

        def ids(state: RegistryState) -> list[int]:
            version = self._version_number(state, subject, raw)
            return state.referenced_by(subject, version.version)
        return _answer(self._read(ids))

    async def _register(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        body = await self._body(request)
        normalize = self._flag(request, "normalize")
        found: list[int] = []

        def decide(state: RegistryState) -> list[tuple[bytes, bytes | None]]:
            if state.mode(subject) == "READONLY":
                raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
            parsed = self._parse(state, body, normalize)
            live = state.live_versions(subject)
            for version in live:  # registered already: its id, no new version
                if self._same(parsed, self._parsed_version(state, version)):
                    found.append(version.id)
                    return []
            problems = self._check(state, subject, parsed, live)
            if problems:
                raise RegistryError(409, 409, "Schema being registered is incompatible with "
                                    f"an earlier schema for subject \"{subject}\", details: "
                                    f"[{', '.join(problems)}]")
            schema_id = next((v.id for v in state.schemas_by_id.values()
                              if self._same(parsed, self._parsed_version(state, v))),
                             state.max_id + 1)
            number = max(state.subjects.get(subject, {0: None}), default=0) + 1
            found.append(schema_id)
            return [schema_record(SchemaVersion(
                subject, number, schema_id, parsed.text, parsed.schema_type,
                parsed.references))]
        await self._write(decide)
        return _answer({"id": found[0]})

    async def _lookup(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        body = await self._body(request)
        normalize = self._flag(request, "normalize")
        deleted = self._flag(request, "deleted")

        def find(state: RegistryState) -> SchemaVersion:
            versions = state.live_versions(subject, deleted)
            if not versions:
                raise subject_not_found(subject)
            parsed = self._parse(state, body, normalize)
            for version in reversed(versions):
                if self._same(parsed, self._parsed_version(state, version)):
                    return version
            raise schema_not_found()
        return _answer(self._read(find).to_json())

    async def _delete_version(self, request: web.Request) -> web.StreamResponse:
        subject, raw = request.match_info["subject"], request.match_info["version"]
        permanent = self._flag(request, "permanent")
        done: list[int] = []

        def decide(state: RegistryState) -> list[tuple[bytes, bytes | None]]:
            version = self._version_number(state, subject, raw, deleted=permanent)
            if state.referenced_by(subject, version.version):
                raise RegistryError(422, 42206, f"One or more references exist to the schema "
                                    f"{{subject={subject},version={version.version}}}.")
            done.append(version.version)
            if permanent:
                if not version.deleted:
                    raise RegistryError(404, 40407, f"Subject '{subject}' Version "
                                        f"{version.version} was not deleted first before "
                                        "being permanently deleted")
                return [schema_tombstone(subject, version.version)]
            gone = SchemaVersion(version.subject, version.version, version.id, version.schema,
                                 version.schema_type, version.references, deleted=True)
            return [schema_record(gone)]
        await self._write(decide)
        return _answer(done[0])

    async def _delete_subject(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        permanent = self._flag(request, "permanent")
        done: list[int] = []

        def decide(state: RegistryState) -> list[tuple[bytes, bytes | None]]:
            every = state.live_versions(subject, deleted=True)
            if not every:
                raise subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            for version in live if not permanent else every:
                if state.referenced_by(subject, version.version):
                    raise RegistryError(422, 42206, f"One or more references exist to the "
                                        f"schema {{subject={subject},version="
                                        f"{version.version}}}.")
            if permanent:
                if live:
                    raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted "
                                        "first before being permanently deleted")
                done.extend(v.version for v in every)
                return [schema_tombstone(subject, v.version) for v in every]
            done.extend(v.version for v in live)
            return [delete_subject_record(subject, every[-1].version)]
        await self._write(decide)
        return _answer(done)

    # ---- schemas by id ---------------------------------------------------------------------

    def _by_id(self, state: RegistryState, raw: str, subject: str | None) -> SchemaVersion:
        try:
            schema_id = int(raw)
        except ValueError:
            raise schema_not_found(f"Schema {raw} not found") from None
        if subject:
            for version in state.live_versions(subject, deleted=True):
                if version.id == schema_id:
                    return version
        version = state.schemas_by_id.get(schema_id)
        if version is None:
            raise schema_not_found(f"Schema {schema_id} not found")
        return version

    async def _schema_by_id(self, request: web.Request) -> web.StreamResponse:
        def answer(state: RegistryState) -> dict[str, Any]:
            version = self._by_id(state, request.match_info["id"], request.query.get("subject"))
            body: dict[str, Any] = {}
            if version.schema_type != "AVRO":
                body["schemaType"] = version.schema_type
            if version.references:
                body["references"] = [r.to_json() for r in version.references]
            body["schema"] = self._schema_text(state, version, request)
            return body
        return _answer(self._read(answer))

    async def _raw_schema_by_id(self, request: web.Request) -> web.StreamResponse:
        version = self._read(lambda st: self._by_id(st, request.match_info["id"],
                                                    request.query.get("subject")))
        return web.Response(text=version.schema, content_type=CONTENT_TYPE)

    async def _subjects_of_id(self, request: web.Request) -> web.StreamResponse:
        deleted = self._flag(request, "deleted")

        def subjects(state: RegistryState) -> list[str]:
            version = self._by_id(state, request.match_info["id"], None)
            return sorted({v.subject for v in state.versions_of_id(version.id, deleted)})
        return _answer(self._read(subjects))

    async def _versions_of_id(self, request: web.Request) -> web.StreamResponse:
        deleted = self._flag(request, "deleted")

        def versions(state: RegistryState) -> list[dict[str, Any]]:
            version = self._by_id(state, request.match_info["id"], None)
            return [{"subject": v.subject, "version": v.version}
                    for v in sorted(state.versions_of_id(version.id, deleted),
                                    key=lambda v: (v.subject, v.version))]
        return _answer(self._read(versions))

    async def _types(self, request: web.Request) -> web.StreamResponse:
        return _answer(sorted(SCHEMA_TYPES))

    # ---- config and mode -------------------------------------------------------------------

    async def _get_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")

        def level(state: RegistryState) -> str:
            if subject is not None and subject not in state.configs:
                if self._flag(request, "defaultToGlobal"):
                    return state.compatibility(None)
                raise RegistryError(404, 40408, f"Subject '{subject}' does not have "
                                    "subject-level compatibility configured")
            return state.compatibility(subject)
        return _answer({"compatibilityLevel": self._read(level)})

    async def _put_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        body = await self._body(request)
        level = str(body.get("compatibility", "")).upper()
        if level not in COMPATIBILITY_LEVELS:
            raise RegistryError(422, 42203, "Invalid compatibility level. Valid values are "
                                "none, backward, forward, full, backward_transitive, "
                                "forward_transitive, and full_transitive")
        await self._write(lambda state: [config_record(subject, level)])
        return _answer({"compatibility": level})

    async def _delete_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")  # None: the global level
        previous: list[str] = []

        def decide(state: RegistryState) -> list[tuple[bytes, bytes | None]]:
            previous.append(state.compatibility(subject))
            if subject not in state.configs:
                if subject is not None:
                    raise subject_not_found(subject)
                return []  # the global level is the default already
            return [config_record(subject, None)]
        await self._write(decide)
        return _answer({"compatibilityLevel": previous[0]})

    async def _get_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        return _answer({"mode": self._read(lambda st: st.mode(subject))})

    async def _put_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        mode = str((await self._body(request)).get("mode", "")).upper()
        if mode not in MODES:
            raise RegistryError(422, 42204, "Invalid mode. Valid values are READWRITE, "
                                            "READONLY and IMPORT.")
        await self._write(lambda state: [mode_record(subject, mode)])
        return _answer({"mode": mode})

    async def _delete_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]

        def decide(state: RegistryState) -> list[tuple[bytes, bytes | None]]:
            if subject not in state.modes:
                raise subject_not_found(subject)
            previous.append(state.mode(subject))
            return [mode_record(subject, None)]
        previous: list[str] = []
        await self._write(decide)
        return _answer({"mode": previous[0]})

    # ---- compatibility ---------------------------------------------------------------------

    async def _compatible(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        raw = request.match_info.get("version")
        body = await self._body(request)
        verbose = self._flag(request, "verbose")

        def check(state: RegistryState) -> list[str]:
            parsed = self._parse(state, body, self._flag(request, "normalize"))
            if raw is None:  # as registering would check it: the level says against which
                against = state.live_versions(subject)
            else:
                against = [self._version_number(state, subject, raw)]
            return self._check(state, subject, parsed, against)
        problems = self._read(check)
        answer: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            answer["messages"] = problems
        return _answer(answer)
