"""Giving freed memory back to the operating system after a model load or a training job.

glibc keeps memory a thread has freed in that thread's arena; the next peak of another
thread (training after generation, generation after a conversion) then comes on top of it
instead of reusing it. ``malloc_trim`` returns the free pages of every arena.
"""

from __future__ import annotations

import ctypes
import gc


def release_free_memory() -> None:
    """Collect garbage and return free heap memory to the OS (glibc only; else a no-op)."""
    gc.collect()
    try:
        # The symbols already loaded into this process (no library search, no subprocess).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
