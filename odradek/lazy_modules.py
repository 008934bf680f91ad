"""Modules loaded on first use: a broker without TLS never pays for loading the crypto
library (about 0.07 s), and a test's embedded broker starts that much sooner."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for module `name` and imports it when one of its attributes is first read.
    (importlib's LazyLoader is not used: packages that import each other while loading,
    as cryptography's do, break it.)"""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    return LazyModule(name)
