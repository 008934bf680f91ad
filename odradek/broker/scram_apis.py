"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM users kept in
the metadata store's user configs in Kafka's format (/config/users/<user> on ZooKeeper), so
Kafka's `kafka-configs.sh --entity-type users` and AdminClients manage them. The answers
and their errors are Kafka's (ZkAdminManager); a client sends the salted password, never
the password."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from odradek.broker.auth_helper import ALLOW_ALL, AclOperation, AuthHelper
from odradek.cluster.metadata import MetadataStore, merge_config
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_user_scram_credentials_response as alter_response,
)
from odradek.protocol.messages import (
    describe_user_scram_credentials_response as describe_response,
)
from odradek.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
)
from odradek.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
)
from odradek.security.credential_cache import CredentialCache
from odradek.server.network import RequestContext

log = logging.getLogger(__name__)

# Kafka's ScramMechanism types on the wire.
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TYPES = {name: code for code, name in MECHANISMS.items()}

Error = tuple[int, str]


class ScramApis:
    def __init__(self, store: MetadataStore, cache: CredentialCache) -> None:
        self.store = store
        self.cache = cache
        self.auth: AuthHelper = ALLOW_ALL  # DESCRIBE, ALTER on the cluster

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter,
        }

    async def handle_describe(self, request: Request, context: RequestContext) -> Message:
        body = cast(DescribeUserScramCredentialsRequest, request.body)
        if not self.auth.authorize_cluster(context, AclOperation.DESCRIBE):
            # Kafka answers the error at the top and for each user asked for. librdkafka
            # 2.x corrupts its memory on any top-level error of this response (a segfault
            # or an abort in the client): users asked for by name get the error on their
            # own results only, which every client reads; asking for all of them gets
            # Kafka's answer.
            denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            message = "Cluster authorization failed."
            if not body.users:
                return describe_response.DescribeUserScramCredentialsResponse(
                    error_code=denied, error_message=message)
            return describe_response.DescribeUserScramCredentialsResponse(results=[
                describe_response.DescribeUserScramCredentialsResult(
                    user=u.name, error_code=denied, error_message=message)
                for u in body.users])
        stored = await asyncio.to_thread(self.store.user_configs)
        infos = {user: _credential_infos(configs) for user, configs in stored.items()}
        infos = {user: found for user, found in infos.items() if found}
        if not body.users:  # null or empty: every user with a credential
            return describe_response.DescribeUserScramCredentialsResponse(results=[
                describe_response.DescribeUserScramCredentialsResult(
                    user=user, credential_infos=found)
                for user, found in sorted(infos.items())])
        counts = Counter(u.name for u in body.users)
        results = []
        for user in dict.fromkeys(u.name for u in body.users):
            result = describe_response.DescribeUserScramCredentialsResult(user=user)
            if counts[user] > 1:
                result.error_code = ErrorCode.DUPLICATE_RESOURCE
                result.error_message = ("Cannot describe SCRAM credentials for the same user "
                                        f"twice in a single request: {user}")
            elif user not in infos:
                result.error_code = ErrorCode.RESOURCE_NOT_FOUND
                result.error_message = ("Attempt to describe nonexistent SCRAM credential for "
                                        f"user {user}")
            else:
                result.credential_infos = infos[user]
            results.append(result)
        return describe_response.DescribeUserScramCredentialsResponse(results=results)

    async def handle_alter(self, request: Request, context: RequestContext) -> Message:
        # SCRAM's hashing loads with the first request that needs it.
        from odradek.security.sasl.scram import (
            MAX_ITERATIONS,
            MIN_ITERATIONS,
            credential_from_salted_password,
            format_credential,
        )

        body = cast(AlterUserScramCredentialsRequest, request.body)
        if not self.auth.authorize_cluster(context, AclOperation.ALTER):
            return alter_response.AlterUserScramCredentialsResponse(results=[
                alter_response.AlterUserScramCredentialsResult(
                    user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message="Cluster authorization failed.")
                for user in dict.fromkeys([d.name for d in body.deletions]
                                          + [u.name for u in body.upsertions])])
        stored = await asyncio.to_thread(self.store.user_configs)
        pairs = Counter([(d.name, d.mechanism) for d in body.deletions]
                        + [(u.name, u.mechanism) for u in body.upsertions])
        errors: dict[str, Error] = {}  # the first error of each user fails all its changes
        changes: dict[str, dict[str, str | None]] = {}

        def fail(user: str, error: Error) -> None:
            errors.setdefault(user, error)

        for deletion in body.deletions:
            user, mechanism = deletion.name, MECHANISMS.get(deletion.mechanism)
            problem = _common_problem(user, deletion.mechanism, pairs)
            if problem is None and mechanism not in stored.get(user, {}):
                problem = (ErrorCode.RESOURCE_NOT_FOUND,
                           "Attempt to delete a user credential that does not exist")
            if problem is not None:
                fail(user, problem)
            else:
                assert mechanism is not None
                changes.setdefault(user, {})[mechanism] = None
        for upsertion in body.upsertions:
            user, mechanism = upsertion.name, MECHANISMS.get(upsertion.mechanism)
            problem = _common_problem(user, upsertion.mechanism, pairs)
            if problem is None and upsertion.iterations < MIN_ITERATIONS:
                problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif problem is None and upsertion.iterations > MAX_ITERATIONS:
                problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            if problem is not None:
                fail(user, problem)
                continue
            assert mechanism is not None
            credential = credential_from_salted_password(
                mechanism, bytes(upsertion.salted_password), bytes(upsertion.salt),
                upsertion.iterations)
            changes.setdefault(user, {})[mechanism] = format_credential(credential)
        for user in errors:
            changes.pop(user, None)
        if changes:
            try:
                await asyncio.to_thread(self.store.alter_user_configs, changes)
            except Exception as e:
                log.exception("storing SCRAM credentials failed")
                for user in changes:
                    fail(user, (ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store them: {e}"))
            else:
                for user, updates in changes.items():
                    self.cache.update_user(user, merge_config(stored.get(user, {}), updates))
        users = dict.fromkeys([d.name for d in body.deletions]
                              + [u.name for u in body.upsertions])
        return alter_response.AlterUserScramCredentialsResponse(results=[
            alter_response.AlterUserScramCredentialsResult(
                user=user, error_code=errors.get(user, (0, ""))[0],
                error_message=errors[user][1] if user in errors else None)
            for user in users])


def _common_problem(user: str, mechanism: int, pairs: Counter[tuple[str, int]]
                    ) -> Error | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if pairs[(user, mechanism)] > 1:
        return (ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request")
    return None


def _credential_infos(configs: dict[str, str]) -> list[describe_response.CredentialInfo]:
    from odradek.security.sasl.scram import parse_credential

    infos = []
    for mechanism, code in MECHANISM_TYPES.items():
        if mechanism in configs:
            try:
                iterations = parse_credential(configs[mechanism]).iterations
            except ValueError:
                continue
            infos.append(describe_response.CredentialInfo(mechanism=code,
                                                          iterations=iterations))
    return infos
