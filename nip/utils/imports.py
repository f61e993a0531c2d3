"""Imports of the heavy libraries (torch, transformers, PEFT, TRL) from worker threads, in turn:
two threads importing one package at once can hand one a half-initialised module."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_IMPORTING = threading.RLock()


@contextmanager
def heavy_imports() -> Iterator[None]:
    """Hold the process-wide, re-entrant import turn while importing heavy libraries."""
    with _IMPORTING:
        yield
