"""Output of the client commands: aligned tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart, headers in upper case; no trailing blanks."""
    cells = [[h.upper() for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                file: TextIO | None = None) -> None:
    print(table(headers, rows), file=file or sys.stdout)


def print_json(value: Any, file: TextIO | None = None) -> None:
    """One JSON document, indented: the whole answer of a topics command."""
    print(json.dumps(value, indent=2, ensure_ascii=False), file=file or sys.stdout)


def json_line(value: Any) -> str:
    """One compact JSON document on one line: a record of `consume --json`."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)
