"""Attributes of a package that import their module on first use, so that importing the package
stays fast (``import nip`` loads no heavy library)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, attributes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level ``__getattr__`` and ``__dir__`` serving ``attributes`` lazily.

    Example: ``__getattr__, __dir__ = lazy_attributes(__name__, {"Session": "nip.session"})``.
    """

    def __getattr__(name: str) -> Any:
        if name in attributes:
            return getattr(importlib.import_module(attributes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(attributes))

    return __getattr__, __dir__
