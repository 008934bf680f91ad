"""Confluent's compatibility levels over any schema type's rules: which earlier versions a
new one is checked against, in which direction, and in what order the messages come.

A type gives two checks of an earlier version (by index): whether the old schema reads what
the new one writes (FORWARD) and whether the new one reads what the old one wrote
(BACKWARD); FULL is both, the FORWARD messages first, as Confluent lists them. The
_TRANSITIVE levels check every earlier version, newest first, and stop at the first that
fails; the others check the latest only.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.registry.state import COMPATIBILITY_LEVELS

Check = Callable[[int], list[str]]  # index of an earlier version -> Confluent's messages


def first_incompatibility(level: str, versions: int, old_reads_new: Check,
                          new_reads_old: Check) -> tuple[int, list[str]] | None:
    """The first earlier version (as its index, of `versions` oldest first) that a new
    schema may not follow under `level`, with the messages saying why; None when it may
    follow them all. ValueError for an unknown level."""
    name = level.upper()
    if name not in COMPATIBILITY_LEVELS:
        raise ValueError(f"Invalid compatibility level: {level!r}")
    if name == "NONE" or not versions:
        return None
    last = versions - 1
    order = range(last, -1, -1) if name.endswith("_TRANSITIVE") else (last,)
    mode = name.removesuffix("_TRANSITIVE")
    for i in order:
        messages = []
        if mode in ("FORWARD", "FULL"):
            messages += old_reads_new(i)
        if mode in ("BACKWARD", "FULL"):
            messages += new_reads_old(i)
        if messages:
            return i, messages
    return None
