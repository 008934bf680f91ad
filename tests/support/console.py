"""The web console's JSON API (odradek/console/) as the tests call it: plain HTTP on a
broker's HTTP listener (http.listeners), answers decoded."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

TIMEOUT = 30.0
WRITE = {"X-Odradek-Console": "1"}  # the header every console write needs


def call(port: int, path: str, method: str = "GET", body: Any = None,
         headers: dict[str, str] | None = None, raw: bytes | None = None,
         timeout: float = TIMEOUT) -> tuple[int, Any]:
    """(status, the JSON answer, or the text of an answer that is not JSON). `body` is sent
    as JSON, `raw` as it is."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=data, headers={**(headers or {})})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode("utf-8", "replace")


def get(port: int, path: str, timeout: float = TIMEOUT) -> Any:
    """The JSON of a GET that must answer 200."""
    status, body = call(port, path, timeout=timeout)
    assert status == 200, (path, status, body)
    return body


def write(port: int, path: str, body: Any, headers: dict[str, str] | None = None
          ) -> tuple[int, Any]:
    """A console write: POST with the console's header."""
    return call(port, path, "POST", body, {**WRITE, **(headers or {})})


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def decoded(record: dict[str, Any]) -> tuple[Any, ...]:
    """A browser record as (partition, offset, timestamp, key, value, headers) in bytes."""
    return (record["partition"], record["offset"], record["timestamp"], unb64(record["key"]),
            unb64(record["value"]), [(h["key"], unb64(h["value"])) for h in record["headers"]])
