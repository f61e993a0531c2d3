"""nip's warnings: one plain line each, naming the run (a sweep's cell) they come from.

:func:`warn` issues a :class:`NipWarning` (so warning filters treat it as any other), shown
as one line, without a file path, where the run's lines go (:func:`run_stream`)::

    nip_seed0: warning: group 'prover': too few examples (2 < 8) for the supervised job

The cell's name comes from :func:`labelled`, which a sweep wraps each cell's task in.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

__all__ = ["NipWarning", "in_notebook", "labelled", "run_stream", "warn"]

_LABEL: ContextVar[str | None] = ContextVar("nip_run_label", default=None)


class NipWarning(UserWarning):
    """Something a run's user should know (``text``), from the run ``label`` if known."""

    def __init__(self, text: str, label: str | None = None):
        self.text, self.label = text, label
        # The label is part of the text that warning filters and "once per text" see, so two
        # cells saying the same thing are both shown.
        super().__init__(f"{label}: {text}" if label else text)


def in_notebook() -> bool:
    """Whether this is a Jupyter kernel."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def run_stream() -> TextIO:
    """Where a run's lines go: standard output in a notebook (standard error shows as a red
    block there), standard error elsewhere."""
    return sys.stdout if in_notebook() else sys.stderr


@contextmanager
def labelled(label: str) -> Iterator[None]:
    """Name this task's run (inherited by the tasks and threads it starts) in its warnings."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


def warn(text: str) -> None:
    """Warn the run's user of ``text`` (see the module docstring)."""
    _show_plainly()
    warnings.warn(NipWarning(text, _LABEL.get()), stacklevel=2)


def _show_plainly() -> None:
    """Format :class:`NipWarning` s as one plain line from now on (others keep theirs)."""
    previous = warnings.formatwarning
    if getattr(previous, "nip_plain", False):
        return

    def format_plainly(message, category, filename, lineno, line=None) -> str:
        if not (isinstance(category, type) and issubclass(category, NipWarning)):
            return previous(message, category, filename, lineno, line)
        label = getattr(message, "label", None)
        text = f"{label or 'nip'}: warning: {getattr(message, 'text', message)}\n"
        if in_notebook():  # Python writes warnings to standard error: a red block there
            print(text, end="", file=sys.stdout, flush=True)
            return ""
        return text

    format_plainly.nip_plain = True  # type: ignore[attr-defined]
    warnings.formatwarning = format_plainly
