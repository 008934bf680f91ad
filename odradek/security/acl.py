"""ACLs as Kafka models them: resource patterns, access control entries, bindings and the
filters that DescribeAcls and DeleteAcls match them with (org.apache.kafka.common.acl and
org.apache.kafka.common.resource).

The enums carry Kafka's wire codes (the CreateAcls/DescribeAcls/DeleteAcls int8 fields)
and Kafka's two spellings: the enum name (TOPIC, READ) and the Pascal-case name its
ZooKeeper store and logs use (Topic, Read, TransactionalId), as SecurityUtils converts
them. A filter matches as Kafka's does, MATCH and ANY included; `validate_acl_binding` is
what a CreateAcls may create. Pure data: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Self

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.security.principal import KafkaPrincipal

WILDCARD_RESOURCE = "*"  # ResourcePattern.WILDCARD_RESOURCE: a LITERAL name matching all
WILDCARD_HOST = "*"  # AclEntry.WILDCARD_HOST
WILDCARD_PRINCIPAL = "User:*"  # AclEntry.WILDCARD_PRINCIPAL_STRING
CLUSTER_NAME = "kafka-cluster"  # Resource.CLUSTER_NAME: the one CLUSTER resource


class InvalidRequestError(KafkaError):
    error_code = ErrorCode.INVALID_REQUEST


class SecurityDisabledError(KafkaError):
    error_code = ErrorCode.SECURITY_DISABLED


class ClusterAuthorizationError(KafkaError):
    error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _pascal(name: str) -> str:
    """SecurityUtils.toPascalCase: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(IntEnum):
    """Kafka's ACL enums: a code on the wire, a name, and a Pascal-case name in ZooKeeper."""

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The value with this wire code; UNKNOWN for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)  # UNKNOWN is 0 in each of Kafka's four enums

    @classmethod
    def from_string(cls, text: str) -> Self:
        """Kafka's fromString: the enum name in any case ("read", "READ"); else UNKNOWN."""
        try:
            return cls[text.upper()]
        except KeyError:
            return cls(0)

    @classmethod
    def from_security_name(cls, text: str) -> Self:
        """SecurityUtils.resourceType/operation/permissionType: the Pascal-case name
        ("TransactionalId"), or that name upper-cased ("TRANSACTIONALID"); else UNKNOWN.
        Note that "TRANSACTIONAL_ID" is not one of them, as in Kafka."""
        names = _SECURITY_NAMES[cls]
        return names.get(text) or names.get(text.upper()) or cls(0)  # type: ignore[return-value]

    @property
    def security_name(self) -> str:
        """SecurityUtils.resourceTypeName/operationName/permissionTypeName: "Topic"."""
        return _pascal(self.name)

    @property
    def is_unknown(self) -> bool:
        return self.value == 0


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, the name taken literally
    MATCH = 2  # filters only: every pattern that would match a resource of that name
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def from_string(cls, text: str) -> Self:
        """PatternType.fromString is case-sensitive: "LITERAL", not "literal"."""
        return cls.__members__.get(text, cls(0))

    @property
    def is_specific(self) -> bool:
        """A pattern type an ACL can have (not a filter's ANY or MATCH)."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


_SECURITY_NAMES: dict[type[_KafkaEnum], dict[str, _KafkaEnum]] = {
    cls: {k: v for member in cls for k, v in ((member.security_name, member),
                                              (member.security_name.upper(), member))}
    for cls in (ResourceType, PatternType, AclOperation, AclPermissionType)
}

# The concrete types and operations (AclEntry.RESOURCE_TYPES, AclEntry.ACL_OPERATIONS).
RESOURCE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN,
                                                            ResourceType.ANY))
ACL_OPERATIONS = tuple(o for o in AclOperation if o not in (AclOperation.UNKNOWN,
                                                            AclOperation.ANY))


def supported_operations(resource_type: ResourceType) -> tuple[AclOperation, ...]:
    """AclEntry.supportedOperations: what the authorized-operations bitfields of
    Metadata, DescribeCluster and DescribeGroups (KIP-430) may hold for a type."""
    try:
        return _SUPPORTED_OPERATIONS[resource_type]
    except KeyError:
        raise ValueError(f"{resource_type.name} is not a concrete resource type") from None


_O = AclOperation
_SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def parse_principal(text: str) -> KafkaPrincipal:
    """SecurityUtils.parseKafkaPrincipal: TYPE:NAME split at the first colon (either part
    may be empty, as in Kafka); ValueError without a colon."""
    principal_type, sep, name = text.partition(":")
    if not sep:
        raise ValueError(
            f"expected a string in format principalType:principalName but got {text}")
    return KafkaPrincipal(principal_type, name)


# ---- patterns, entries, bindings --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource an ACL is on: LITERAL names one (or all, with "*"), PREFIXED every
    resource whose name starts with `name`."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type == ResourceType.ANY:
            raise ValueError("resourceType must not be ANY")
        if self.pattern_type in (PatternType.MATCH, PatternType.ANY):
            raise ValueError(f"patternType must not be {self.pattern_type.name}")

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def __str__(self) -> str:
        """As Kafka's logs name a resource: Topic:LITERAL:orders."""
        return f"{self.resource_type.security_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal "User:alice", or "User:*"), from where (a host address, or "*"),
    may or may not (ALLOW/DENY) do what (an operation, or ALL)."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        if self.operation == AclOperation.ANY:
            raise ValueError("operation must not be ANY")
        if self.permission_type == AclPermissionType.ANY:
            raise ValueError("permissionType must not be ANY")

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(self.principal, self.host, self.operation,
                                        self.permission_type)

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """An ACL: an entry on a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


# ---- filters ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ResourcePatternFilter. `name` None matches any name. The pattern type:
    LITERAL or PREFIXED match patterns of that type and that exact name; ANY matches
    patterns of any type with that exact name; MATCH matches every pattern that would
    apply to a resource named `name` (the name itself, the "*" wildcard, and every
    PREFIXED pattern that is a prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if (self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
                and self.pattern_type != pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH against a pattern of another type
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {pattern.pattern_type.name}")

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        if self.resource_type == ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type == PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's AccessControlEntryFilter: None principal or host match any; ANY operation or
    permission type match any. Exact comparison otherwise: the filter for User:* finds the
    ACLs of User:*, not those of every user."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or self.permission_type == entry.permission_type)

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation == AclOperation.ANY:
            return "Operation is ANY"
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type == AclPermissionType.ANY:
            return "Permission type is ANY"
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = field(default_factory=ResourcePatternFilter)
    entry_filter: AccessControlEntryFilter = field(default_factory=AccessControlEntryFilter)

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry)

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        return (self.pattern_filter.find_indefinite_field()
                or self.entry_filter.find_indefinite_field())


ANY_FILTER = AclBindingFilter()  # AclBindingFilter.ANY: every ACL


# ---- what may be created ------------------------------------------------------------------------


def validate_acl_binding(binding: AclBinding) -> None:
    """Kafka's rules for an ACL a CreateAcls may create (AclApis, AclAuthorizer and
    AclControlManager.validateNewAcl together): raises InvalidRequestError."""
    pattern, entry = binding.pattern, binding.entry
    _check_elements(pattern.resource_type, pattern.pattern_type, entry.operation,
                    entry.permission_type)
    _check_names(pattern.resource_type, pattern.name, entry.principal)


def new_acl_binding(resource_type: int, resource_name: str, pattern_type: int, principal: str,
                    host: str, operation: int, permission_type: int) -> AclBinding:
    """The binding a CreateAcls creation describes (wire codes), once valid; raises
    InvalidRequestError, with Kafka's messages, for one that may not be created."""
    rt, pt = ResourceType.from_code(resource_type), PatternType.from_code(pattern_type)
    op, perm = AclOperation.from_code(operation), AclPermissionType.from_code(permission_type)
    _check_elements(rt, pt, op, perm)
    _check_names(rt, resource_name, principal)
    return AclBinding(ResourcePattern(rt, resource_name, pt),
                      AccessControlEntry(principal, host, op, perm))


def _check_elements(resource_type: ResourceType, pattern_type: PatternType,
                    operation: AclOperation, permission_type: AclPermissionType) -> None:
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {resource_type.name}")
    if not pattern_type.is_specific:
        raise InvalidRequestError(f"Invalid patternType {pattern_type.name}")
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {operation.name}")
    if permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequestError(f"Invalid permissionType {permission_type.name}")


def _check_names(resource_type: ResourceType, name: str, principal: str) -> None:
    if resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidRequestError(
            f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not name:
        raise InvalidRequestError("Invalid empty resource name")
    # The name is a znode's name in Kafka's ZooKeeper store, so both stores refuse it.
    if "/" in name:
        raise InvalidRequestError(
            f"Failed to create ACL: ACL binding contains invalid resource name: {name}")
    try:
        parse_principal(principal)
    except ValueError as e:
        raise InvalidRequestError(f"Failed to create ACL: {e}") from None


def new_acl_binding_filter(resource_type: int, resource_name: str | None, pattern_type: int,
                           principal: str | None, host: str | None, operation: int,
                           permission_type: int) -> AclBindingFilter:
    """The filter a DescribeAcls or DeleteAcls describes (wire codes; a code Kafka does not
    define is UNKNOWN, and a filter with an UNKNOWN element matches nothing)."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(resource_type), resource_name,
                              PatternType.from_code(pattern_type)),
        AccessControlEntryFilter(principal, host, AclOperation.from_code(operation),
                                 AclPermissionType.from_code(permission_type)))


# ---- what stores report -----------------------------------------------------------------------

ResourceAcls = Mapping[ResourcePattern, frozenset[AccessControlEntry]]


@dataclass(frozen=True, slots=True)
class AclChanges:
    """What an AclStore tells its listener: the ACLs each resource in `acls` has now (an
    empty set: none any more). With `full`, `acls` is every ACL there is: a resource not in
    it has none (the first load, and a reload after a lost ZooKeeper session)."""

    acls: ResourceAcls
    full: bool = False


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One DeleteAcls filter's outcome (Kafka's AclDeleteResult): the bindings it deleted,
    each with the error that kept it (None: deleted), or an error for the whole filter."""

    deleted: Sequence[tuple[AclBinding, KafkaError | None]] = ()
    error: KafkaError | None = None
