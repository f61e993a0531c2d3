"""Giving freed memory back to the operating system after a model load or a training job.

glibc keeps memory a thread has freed in that thread's arena; the next peak of another
thread (training after generation, generation after a conversion) then comes on top of it
instead of reusing it. ``malloc_trim`` returns the free pages of every arena.
"""

from __future__ import annotations

import ctypes
import gc


def release_free_memory(*, generation: int | None = 2) -> None:
    """Return free heap memory to the OS (glibc only; else a no-op), after collecting the
    garbage generations up to ``generation`` (2: a full collection; None: no collection).

    A full collection walks every object of the process (0.2-0.4 s in a test worker or a busy
    kernel); it pays where objects in reference cycles hold large buffers (a finished training
    job's trainer), not after a model load, which frees its temporaries by reference counting
    (loading SmolLM2-135M: 458 MB resident either way). The young generations (1) hold what
    was made since the last collections: a training step's cycles, in milliseconds.
    """
    if generation is not None:
        gc.collect(generation)
    try:
        # The symbols already loaded into this process (no library search, no subprocess).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
