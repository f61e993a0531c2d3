"""Imports of the heavy libraries (torch, transformers, PEFT, TRL) from several threads, in turn.

nip imports these lazily in worker threads: the embedded model's thread imports transformers
when it first generates, while the LoRA worker thread imports PEFT and TRL to be ready for the
first job. Two threads importing one package's modules at once can hand one of them a module
that is still initialising (seen once in tutorial 04: ``cannot import name
'AutoModelForCausalLM' from 'transformers'`` in the model's thread while the LoRA worker was
importing TRL). Code that imports them from a worker thread does so inside
:func:`heavy_imports`, so those imports take turns. The lock is process-wide because the
import system it guards is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_IMPORTING = threading.RLock()


@contextmanager
def heavy_imports() -> Iterator[None]:
    """Hold the process-wide import turn (re-entrant) while importing heavy libraries.

    Example::

        with heavy_imports():
            from transformers import AutoModelForCausalLM
    """
    with _IMPORTING:
        yield
