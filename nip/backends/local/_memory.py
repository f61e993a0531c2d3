"""Giving freed memory back to the OS after a model load or a training job (glibc keeps a thread's
freed memory in its arena, where another thread's next peak does not reuse it)."""

from __future__ import annotations

import ctypes
import gc


def release_free_memory(*, generation: int | None = 2) -> None:
    """Return free heap memory to the OS (glibc only; else a no-op), after collecting the garbage
    generations up to ``generation`` (2: full, for cycles holding large buffers such as a finished
    trainer; 1: a training step's cycles, in milliseconds; None: no collection)."""
    if generation is not None:
        gc.collect(generation)
    try:
        # The symbols already loaded into this process (no library search, no subprocess).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
