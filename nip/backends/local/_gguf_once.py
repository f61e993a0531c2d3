"""Reading a GGUF file once while transformers converts it, instead of three times.

transformers loads a GGUF's config, tokenizer and weights in three steps, and each builds a new
``gguf.GGUFReader`` of the file (parsing its metadata, the 49,152-token vocabulary field by
field, every time); its tensor-name mapping also builds gguf-py's ``TensorNameMap`` once per
module of the model (397 times for SmolLM2). Inside :func:`gguf_read_once` both are built once:
the same reader (read-only after it is built) and the same map serve every step. The converted
folder is the same; only the time changes (measured in bench/README.md). Where either library
no longer has these names, nothing is changed and the conversion takes its usual time.
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
