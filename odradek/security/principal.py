"""KafkaPrincipal: who a connection is, as Kafka's authorizer and ACLs name it."""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal as Kafka writes it: "User:alice" (type, then name)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """"User:alice" -> KafkaPrincipal("User", "alice"); raises ValueError without a
        type (Kafka's SecurityUtils.parseKafkaPrincipal)."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"{text!r} is not a principal: expected TYPE:NAME, e.g. User:alice")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")  # PLAINTEXT, and TLS without a client certificate
