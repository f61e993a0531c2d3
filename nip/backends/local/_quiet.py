"""Keeping the libraries' own output (progress bars, info logs, deprecation warnings) away
from the user while nip loads, converts or trains a model: a run says what it does itself."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence transformers (and datasets) for the duration, then restore them; the settings are
    process-wide, so this is for loading and training."""
    import transformers

    logging = transformers.utils.logging
    bars, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    datasets = None
    if importlib.util.find_spec("datasets") is not None:
        import datasets
    dataset_bars = datasets.is_progress_bar_enabled() if datasets else False
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    if datasets:
        datasets.disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
        if dataset_bars:
            datasets.enable_progress_bars()
