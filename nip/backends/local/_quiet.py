"""Loading a model without the libraries' own progress bars and notices.

transformers draws a "Loading weights" bar (a widget in a notebook) and logs notices while it
loads or converts a model; in a tutorial or a run's output they are noise next to nip's own
reports. Within :func:`quiet_loading` its bars and its logging below errors are off, and so
are Python warnings; each is restored on exit.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Load or convert a model quietly (see the module docstring)."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
