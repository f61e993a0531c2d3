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

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


def python_path_without_slow_imports(folder: Path) -> str:
    """A ``PYTHONPATH`` that keeps ``rfc3987_syntax`` out of the processes started with it:
    this one's, behind a module of that name in ``folder/hidden`` that refuses to load.

    jsonschema (imported by Ray, nbformat, Jupyter's servers) builds that package's grammar at
    its own import when it is installed (Jupyter installs it): 2.5-3.5 s of CPU per process,
    for formats ("iri") that neither Ray's nor the notebook format's schemas use; jsonschema
    leaves them unchecked without it."""
    hidden = folder / "hidden"
    hidden.mkdir(parents=True, exist_ok=True)
    (hidden / "rfc3987_syntax.py").write_text(
        "raise ImportError('kept out of this process (nip.utils.imports)')\n"
    )
    return os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))
