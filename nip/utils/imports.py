"""Imports of the heavy libraries (torch, transformers, PEFT, TRL) from worker threads, in turn:
two threads importing one package at once can hand one a half-initialised module."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

_IMPORTING = threading.RLock()


def heavy_imports() -> AbstractContextManager[bool]:
    """The process-wide, re-entrant import turn to hold (``with``) while importing them."""
    return _IMPORTING
