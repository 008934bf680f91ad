"""Emits the API-key registry (api_keys.py) and the error-code table (errors.py)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from odradek.protocol.codegen.emit_message import HEADER, module_name
from odradek.protocol.codegen.spec import MessageSpec


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def emit_api_keys(specs: list[MessageSpec]) -> str:
    requests = {s.api_key: s for s in specs if s.type == "request" and s.api_key is not None}
    responses = {s.api_key: s for s in specs if s.type == "response" and s.api_key is not None}
    lines = [
        HEADER.format(source="message/*Request.json and *Response.json"),
        '"""Every Kafka API: its key, valid, deprecated and flexible versions."""',
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "",
        "from odradek.protocol.api import ApiSpec",
        "",
        "",
        "class ApiKey(IntEnum):",
    ]
    for key in sorted(requests):
        lines.append(f"    {_upper_snake(requests[key].name.removesuffix('Request'))} = {key}")
    lines += ["", "", "API_SPECS: dict[int, ApiSpec] = {"]
    for key in sorted(requests):
        req, resp = requests[key], responses[key]
        v = req.valid_versions
        dep = req.deprecated_versions & v
        deprecated = "None" if dep.empty else f"({dep.low}, {dep.high})"
        flex = req.flexible_versions & v
        first_flexible = "None" if flex.empty else str(flex.low)
        listeners = "".join(f'"{x}", ' for x in req.listeners).rstrip(" ")
        lines += [
            f"    ApiKey.{_upper_snake(req.name.removesuffix('Request'))}: ApiSpec(",
            f"        api_key={key},",
            f'        name="{req.name.removesuffix("Request")}",',
            f"        min_version={v.low},",
            f"        max_version={v.high},",
            f"        deprecated_versions={deprecated},",
            f"        first_flexible_version={first_flexible},",
            f"        latest_version_unstable={req.latest_version_unstable},",
            f"        listeners=({listeners}),",
            f'        request_module="{module_name(req)}",',
            f'        response_module="{module_name(resp)}",',
            "    ),",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def emit_errors(errors_tsv: Path) -> str:
    with errors_tsv.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    lines = [
        HEADER.format(source="errors.tsv"),
        '"""Kafka\'s error codes: one table for the wire, the logs and the command line."""',
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "",
        "",
        "class ErrorCode(IntEnum):",
        '    """A Kafka error code; `.retriable` and `.message` as Kafka defines them."""',
        "",
    ]
    lines += [f"    {row['name']} = {int(row['code'])}" for row in rows]
    lines += [
        "",
        "    @property",
        "    def retriable(self) -> bool:",
        "        return self in _RETRIABLE",
        "",
        "    @property",
        "    def message(self) -> str:",
        "        return _MESSAGES[self]",
        "",
        "",
        "_RETRIABLE = frozenset({",
    ]
    lines += [f"    ErrorCode.{row['name']}," for row in rows if row["retriable"] == "yes"]
    lines += ["})", "", "_MESSAGES: dict[ErrorCode, str] = {"]
    lines += [f"    ErrorCode.{row['name']}: {row['description']!r}," for row in rows]
    lines += ["}"]
    return "\n".join(lines) + "\n"
