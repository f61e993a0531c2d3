"""Reading a GGUF file once while transformers converts it, instead of three times.

transformers builds a new ``gguf.GGUFReader`` for the config, the tokenizer and the weights, and
a ``TensorNameMap`` per module; inside :func:`gguf_read_once` one of each serves every step.
The converted folder is the same; where either library lacks these names, nothing is changed.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator

_patching = threading.Lock()


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """While inside, ``gguf.GGUFReader`` of a path and ``gguf.get_tensor_name_map`` of an
    architecture are built once and shared."""
    import gguf

    if not all(hasattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")):
        yield
        return
    with _patching:
        real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def shared_reader(path, mode: str = "r"):
            key = (str(path), mode)
            if key not in readers:
                readers[key] = real_reader(path, mode)
            return readers[key]

        gguf.GGUFReader = shared_reader
        gguf.get_tensor_name_map = functools.cache(real_name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_name_map
            readers.clear()
