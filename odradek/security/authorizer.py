"""AclAuthorizer: Kafka's ACL authorizer over an in-memory cache of every ACL.

The decision, as Kafka's AclAuthorizer.authorizeAction (and KRaft's StandardAuthorizer,
which agrees) makes it for a principal, a client host, an operation and a resource:

1. a super user (super.users, semicolon-separated principals) may do anything;
2. the ACLs that apply to the resource are those on its LITERAL name, on the LITERAL
   wildcard "*" of its type, and on every PREFIXED pattern its name starts with; if there
   is none at all (for anyone), allow.everyone.if.no.acl.found decides (default: deny);
3. a DENY for the principal (or User:*), from the host (or "*"), for the operation (or
   ALL) denies, whatever ALLOWs there are;
4. else an ALLOW for the principal (or User:*), from the host (or "*"), for the operation
   (or ALL) allows. An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and an
   ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS. Denies imply nothing: a DENY of READ does
   not deny DESCRIBE (only a DENY of ALL, or of the operation itself, denies it);
5. else deny.

authorize() runs on every request, on the event loop: it costs a few dict lookups (the
literal name, the wildcard, and one per distinct length of the PREFIXED patterns of that
resource type), each resource's ACLs being indexed by principal. Nothing scans every ACL.

Thread safety: apply() (the store's change listener) may be called from any thread, such
as kazoo's; it updates the cache under a lock, and readers see each resource's ACLs
replaced whole. Pass `authorizer.apply` to the store's start() as it is.

Every decision is logged to "kafka.authorizer.logger" in Kafka's words (those of its
StandardAuthorizer, which names the rule that decided; the ZooKeeper-mode AclAuthorizer
wrote "Operation = Read" and no rule): denied at INFO, allowed at DEBUG, and both at TRACE
(level 5) when the caller asked not to log them (authorized-operations bitfields,
filtering a list of resources). Nothing is formatted when the level is off.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.protocol.api_keys import API_SPECS
from odradek.security.acl import (
    ANY_FILTER,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclChanges,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
    supported_operations,
)
from odradek.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)
authorizer_log = logging.getLogger("kafka.authorizer.logger")

TRACE = 5  # log4j's TRACE, below DEBUG
logging.addLevelName(TRACE, "TRACE")

SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG = "allow.everyone.if.no.acl.found"

_LITERAL, _PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_ALL = AclOperation.ALL

# The ALLOW operations that grant an operation (AclAuthorizer.authorizeAction's allowOps).
_GRANTED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, _ALL}) for op in AclOperation
}
_GRANTED_BY[AclOperation.DESCRIBE] = frozenset({
    AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
    AclOperation.ALTER, _ALL})
_GRANTED_BY[AclOperation.DESCRIBE_CONFIGS] = frozenset({
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, _ALL})


@dataclass(frozen=True, slots=True)
class Action:
    """One authorization question of a batch (Kafka's Action, the pattern LITERAL)."""

    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    resource_reference_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True


# ---- the cache --------------------------------------------------------------------------------

_Key = tuple[int, str, int]  # (resource type, name, pattern type): cheaper than a pattern
# (principal, host, operation, permission, resource type, pattern type): Kafka's ResourceTypeKey
_TypeKey = tuple[str, str, int, int, int, int]


class _ResourceAcls:
    """One resource pattern's ACLs, by principal: a check looks at its principal's and
    User:*'s entries only."""

    __slots__ = ("by_principal", "pattern")

    def __init__(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        self.pattern = pattern
        by_principal: dict[str, list[AccessControlEntry]] = {}
        for e in entries:
            by_principal.setdefault(e.principal, []).append(e)
        self.by_principal = {p: tuple(es) for p, es in by_principal.items()}


class _Cache:
    __slots__ = ("acls", "index", "names", "prefix_counts", "prefix_lengths")

    def __init__(self) -> None:
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self.index: dict[_Key, _ResourceAcls] = {}
        # Per resource type: how many PREFIXED patterns have each name length, and those
        # lengths in order (replaced whole, so a reader's tuple never changes under it).
        self.prefix_counts: dict[int, Counter[int]] = {}
        self.prefix_lengths: dict[int, tuple[int, ...]] = {}
        # authorizeByResourceType's index: the names with an ACL of each kind.
        self.names: dict[_TypeKey, set[str]] = {}

    def update(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        old = self.acls.get(pattern, frozenset())
        if old == entries:
            return
        rt, pt, name = int(pattern.resource_type), int(pattern.pattern_type), pattern.name
        for e in old - entries:
            key = (e.principal, e.host, int(e.operation), int(e.permission_type), rt, pt)
            names = self.names.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.names[key]
        for e in entries - old:
            key = (e.principal, e.host, int(e.operation), int(e.permission_type), rt, pt)
            self.names.setdefault(key, set()).add(name)
        key3 = (rt, name, pt)
        if entries:
            self.acls[pattern] = entries
            self.index[key3] = _ResourceAcls(pattern, entries)
        else:
            self.acls.pop(pattern, None)
            self.index.pop(key3, None)
        if pattern.pattern_type == _PREFIXED and bool(old) != bool(entries):
            counts = self.prefix_counts.setdefault(rt, Counter())
            counts[len(name)] += 1 if entries else -1
            if counts[len(name)] <= 0:
                del counts[len(name)]
            self.prefix_lengths[rt] = tuple(sorted(counts))


@functools.lru_cache(maxsize=4096)
def _request_hosts(host: str) -> tuple[str, ...]:
    """The host as given, and as Java's InetAddress.getHostAddress writes it when that
    differs ("::1" is "0:0:0:0:0:0:0:1", "::ffff:10.0.0.1" is "10.0.0.1"): ACLs copied
    from Kafka name IPv6 hosts in Java's form, ours may use either."""
    if ":" not in host:
        return (host,)
    address, _, scope = host.partition("%")
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return (host,)
    if ip.ipv4_mapped is not None:
        java = str(ip.ipv4_mapped)
    else:
        java = ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))
        if scope:
            java = f"{java}%{scope}"
    return (host,) if java == host else (host, java)


def _request_name(request: int | str | None) -> str:
    if request is None:
        return "UNKNOWN"
    if isinstance(request, str):
        return request
    spec = API_SPECS.get(request)
    return spec.name if spec is not None else str(request)


class _Rule:
    """Why a decision was made, written as Kafka's StandardAuthorizer writes its rules."""

    __slots__ = ("entry", "name", "pattern")

    def __init__(self, name: str, pattern: ResourcePattern | None = None,
                 entry: AccessControlEntry | None = None) -> None:
        self.name, self.pattern, self.entry = name, pattern, entry

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        if p is None or e is None:
            return self.name
        return (f"MatchingAcl(acl=StandardAcl(resourceType={p.resource_type.name}, "
                f"resourceName={p.name}, patternType={p.pattern_type.name}, "
                f"principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permissionType={e.permission_type.name}))")


_SUPER_USER = _Rule("SuperUser")
_DEFAULT_ALLOW = _Rule("DefaultAllow")
_DEFAULT_DENY = _Rule("DefaultDeny")


class AclAuthorizer:
    """Kafka's AclAuthorizer over a cache that an AclStore keeps current (apply())."""

    def __init__(self, *, super_users: Iterable[KafkaPrincipal | str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(str(p) for p in super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache = _Cache()
        self._lock = threading.Lock()

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> AclAuthorizer:
        """From broker configs: super.users ("User:admin;User:kafka") and
        allow.everyone.if.no.acl.found ("true"/"false"), trimmed as Kafka trims them."""
        return cls(super_users=parse_super_users(str(configs.get(SUPER_USERS_CONFIG) or "")),
                   allow_everyone_if_no_acl_found=_parse_bool(
                       configs.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG, False),
                       ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG))

    # ---- the cache ------------------------------------------------------------------------

    def apply(self, changes: AclChanges) -> None:
        """An AclStore's listener: thread-safe, never blocks on I/O."""
        if changes.full:
            cache = _Cache()  # built aside, then swapped in: readers never see it half-made
            with self._lock:
                for pattern, entries in changes.acls.items():
                    cache.update(pattern, frozenset(entries))
                self._cache = cache
            log.info("ACL cache loaded: %d ACLs on %d resources", self.acl_count,
                     len(cache.acls))
            return
        with self._lock:
            for pattern, entries in changes.acls.items():
                self._cache.update(pattern, frozenset(entries))
                log.debug("ACLs of %s now %s", pattern, sorted(map(str, entries)))

    @property
    def acl_count(self) -> int:
        return sum(len(entries) for entries in list(self._cache.acls.values()))

    def acls(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """The ACLs a DescribeAcls filter matches (Kafka's Authorizer.acls). A filter that
        names its resource type and name is answered from the index; others scan."""
        cache = self._cache
        with self._lock:
            candidates = [(p, cache.acls[p]) for p in self._candidates(cache, acl_filter)
                          if p in cache.acls]
        pattern_filter, entry_filter = acl_filter.pattern_filter, acl_filter.entry_filter
        return [AclBinding(pattern, entry)
                for pattern, entries in candidates if pattern_filter.matches(pattern)
                for entry in entries if entry_filter.matches(entry)]

    @staticmethod
    def _candidates(cache: _Cache, acl_filter: AclBindingFilter) -> Iterable[ResourcePattern]:
        pf = acl_filter.pattern_filter
        rt, name, pt = pf.resource_type, pf.name, pf.pattern_type
        if rt in (ResourceType.ANY, ResourceType.UNKNOWN) or name is None:
            return list(cache.acls)
        if pt.is_specific:
            return [ResourcePattern(rt, name, pt)]
        if pt == PatternType.ANY:
            return [ResourcePattern(rt, name, _LITERAL), ResourcePattern(rt, name, _PREFIXED)]
        if pt == PatternType.MATCH:
            lengths = cache.prefix_lengths.get(int(rt), ())
            return [ResourcePattern(rt, name, _LITERAL),
                    ResourcePattern(rt, WILDCARD_RESOURCE, _LITERAL),
                    *(ResourcePattern(rt, name[:n], _PREFIXED) for n in lengths
                      if n <= len(name))]
        return []  # UNKNOWN pattern type: matches nothing

    # ---- decisions -------------------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, resource_name: str, *,
                  request: int | str | None = None, ref_count: int = 1,
                  log_if_allowed: bool = True, log_if_denied: bool = True) -> bool:
        """May `principal`, connected from `host` (the client's IP address), do `operation`
        on the resource? `request` (an API key, or its name) and `ref_count` (how many
        times the request names the resource) are only logged."""
        principal_name = str(principal)
        allowed, rule = self._decide(principal_name, _request_hosts(host), operation,
                                     resource_type, resource_name)
        self._log(allowed, rule, principal_name, host, operation, resource_type,
                  _LITERAL, resource_name, request, ref_count, log_if_allowed, log_if_denied)
        return allowed

    def authorize_actions(self, principal: KafkaPrincipal, host: str,
                          actions: Sequence[Action], *,
                          request: int | str | None = None) -> list[bool]:
        """Kafka's Authorizer.authorize: one answer per action, in order."""
        return [self.authorize(principal, host, a.operation, a.resource_type, a.resource_name,
                               request=request, ref_count=a.resource_reference_count,
                               log_if_allowed=a.log_if_allowed, log_if_denied=a.log_if_denied)
                for a in actions]

    def filter_authorized(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                          resource_type: ResourceType, names: Iterable[str], *,
                          request: int | str | None = None, log_if_allowed: bool = True,
                          log_if_denied: bool = True) -> set[str]:
        """The names among `names` that `operation` is allowed on, each decided (and logged)
        once with the number of times it appears (Kafka's AuthHelper.filterByAuthorized)."""
        counts = Counter(names)
        return {name for name, count in counts.items()
                if self.authorize(principal, host, operation, resource_type, name,
                                  request=request, ref_count=count,
                                  log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)}

    def authorized_operations(self, principal: KafkaPrincipal, host: str,
                              resource_type: ResourceType, resource_name: str, *,
                              request: int | str | None = None) -> int:
        """KIP-430's bitfield (Metadata, DescribeCluster, DescribeGroups): bit `op` set for
        each of the type's supported operations that is allowed. Logged at TRACE only."""
        principal_name = str(principal)
        hosts = _request_hosts(host)
        matching = self._matching(self._cache, resource_type, resource_name)
        bits = 0
        for op in supported_operations(resource_type):
            allowed, rule = self._decide(principal_name, hosts, op, resource_type,
                                         resource_name, matching)
            self._log(allowed, rule, principal_name, host, op, resource_type, _LITERAL,
                      resource_name, request, 1, False, False)
            if allowed:
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str,
                                   operation: AclOperation, resource_type: ResourceType, *,
                                   request: int | str | None = None) -> bool:
        """KIP-679: may the principal do `operation` on at least one resource of the type
        (InitProducerId without IDEMPOTENT_WRITE on the cluster: WRITE on any topic)?

        Kafka's AclAuthorizer.authorizeByResourceType: ACLs of the operation itself or ALL
        only (no implied operations). A wildcard ("*") LITERAL DENY denies; then
        allow.everyone.if.no.acl.found allows; without any DENY, any ALLOW allows;
        otherwise an ALLOW counts unless a DENY dominates it: a LITERAL DENY of the same
        name, or a PREFIXED DENY that is a prefix of its name."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError("Must specify a non-filter resource type for "
                             "authorizeByResourceType" if resource_type == ResourceType.ANY
                             else "Unknown resource type")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError("Must specify a non-filter operation type for "
                             "authorizeByResourceType" if operation == AclOperation.ANY
                             else "Unknown operation type")
        principal_name = str(principal)
        allowed, rule = self._decide_by_resource_type(principal_name, _request_hosts(host),
                                                      operation, resource_type)
        self._log(allowed, rule, principal_name, host, operation, resource_type,
                  PatternType.UNKNOWN, "NONE", request, 0, True, True)
        return allowed

    # ---- internals --------------------------------------------------------------------------

    def _decide(self, principal: str, hosts: tuple[str, ...], operation: AclOperation,
                resource_type: ResourceType, resource_name: str,
                matching: list[_ResourceAcls] | None = None) -> tuple[bool, _Rule]:
        if principal in self.super_users:
            return True, _SUPER_USER
        if matching is None:
            matching = self._matching(self._cache, resource_type, resource_name)
        if not matching:  # no ACL for anyone on this resource
            if self.allow_everyone_if_no_acl_found:
                return True, _DEFAULT_ALLOW
            return False, _DEFAULT_DENY
        principals = (principal,) if principal == WILDCARD_PRINCIPAL else (
            principal, WILDCARD_PRINCIPAL)
        for acls in matching:
            for p in principals:
                for e in acls.by_principal.get(p, ()):
                    if (e.permission_type == _DENY
                            and (e.operation == operation or e.operation == _ALL)
                            and (e.host == WILDCARD_HOST or e.host in hosts)):
                        return False, _Rule("", acls.pattern, e)
        granted_by = _GRANTED_BY[operation]
        for acls in matching:
            for p in principals:
                for e in acls.by_principal.get(p, ()):
                    if (e.permission_type == _ALLOW and e.operation in granted_by
                            and (e.host == WILDCARD_HOST or e.host in hosts)):
                        return True, _Rule("", acls.pattern, e)
        return False, _DEFAULT_DENY

    @staticmethod
    def _matching(cache: _Cache, resource_type: ResourceType,
                  resource_name: str) -> list[_ResourceAcls]:
        """The ACL sets that apply to a resource: its literal name, the wildcard, and the
        prefixes of its name that have PREFIXED ACLs (one lookup per length in use)."""
        rt = int(resource_type)
        index = cache.index
        found = []
        literal = index.get((rt, resource_name, _LITERAL))
        if literal is not None:
            found.append(literal)
        if resource_name != WILDCARD_RESOURCE:
            wildcard = index.get((rt, WILDCARD_RESOURCE, _LITERAL))
            if wildcard is not None:
                found.append(wildcard)
        for n in cache.prefix_lengths.get(rt, ()):
            if n > len(resource_name):
                break
            prefixed = index.get((rt, resource_name[:n], _PREFIXED))
            if prefixed is not None:
                found.append(prefixed)
        return found

    def _decide_by_resource_type(self, principal: str, hosts: tuple[str, ...],
                                 operation: AclOperation,
                                 resource_type: ResourceType) -> tuple[bool, _Rule]:
        if principal in self.super_users:
            return True, _SUPER_USER
        cache = self._cache

        def matching(permission: AclPermissionType, pattern: PatternType) -> list[set[str]]:
            found = []
            for p in {principal, WILDCARD_PRINCIPAL}:
                for h in {*hosts, WILDCARD_HOST}:
                    for o in {operation, _ALL}:
                        names = cache.names.get((p, h, int(o), int(permission),
                                                 int(resource_type), int(pattern)))
                        if names:
                            found.append(names)
            return found

        deny_literals = matching(_DENY, _LITERAL)
        if any(WILDCARD_RESOURCE in names for names in deny_literals):
            return False, _Rule("DenyOnWildcardResource")
        if self.allow_everyone_if_no_acl_found:
            return True, _DEFAULT_ALLOW
        deny_prefixes = matching(_DENY, _PREFIXED)
        allow_literals = matching(_ALLOW, _LITERAL)
        allow_prefixes = matching(_ALLOW, _PREFIXED)
        if not deny_literals and not deny_prefixes:
            if allow_literals or allow_prefixes:
                return True, _Rule("AllowOnSomeResource")
            return False, _DEFAULT_DENY

        # A copy of each set: a writer may change them meanwhile (under its lock).
        denied_literal = set().union(*deny_literals)
        denied_prefix = set().union(*deny_prefixes)

        def dominated(name: str) -> bool:  # a PREFIXED DENY that is a prefix of `name`
            return any(name[:n] in denied_prefix for n in range(1, len(name) + 1))

        for names in allow_prefixes:
            if any(not dominated(prefix) for prefix in tuple(names)):
                return True, _Rule("AllowOnSomeResource")
        for names in allow_literals:
            for name in tuple(names):
                if name == WILDCARD_RESOURCE or (name not in denied_literal
                                                 and not dominated(name)):
                    return True, _Rule("AllowOnSomeResource")
        return False, _DEFAULT_DENY

    def _log(self, allowed: bool, rule: _Rule, principal: str, host: str,
             operation: AclOperation, resource_type: ResourceType, pattern_type: PatternType,
             resource_name: str, request: int | str | None, ref_count: int,
             log_if_allowed: bool, log_if_denied: bool) -> None:
        if allowed:
            level = logging.DEBUG if log_if_allowed else TRACE
        else:
            level = logging.INFO if log_if_denied else TRACE
        if not authorizer_log.isEnabledFor(level):
            return
        authorizer_log.log(
            level, "Principal = %s is %s operation = %s from host = %s on resource = %s:%s:%s "
            "for request = %s with resourceRefCount = %d based on rule %s",
            principal, "Allowed" if allowed else "Denied", operation.name, host,
            resource_type.security_name, pattern_type.name, resource_name,
            _request_name(request), ref_count, rule)


def parse_super_users(value: str) -> frozenset[KafkaPrincipal]:
    """super.users: principals separated by semicolons, each trimmed. As Java's split,
    trailing empty entries are dropped; an empty entry elsewhere is an error."""
    if not value.strip():
        return frozenset()
    parts = value.split(";")
    while parts and not parts[-1]:
        parts.pop()
    try:
        return frozenset(parse_principal(p.strip()) for p in parts)
    except ValueError as e:
        raise ValueError(f"{SUPER_USERS_CONFIG}: {e}") from None


def _parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name}: expected true or false, got {value!r}")
    return text == "true"
