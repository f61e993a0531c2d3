"""Seeds derived from other seeds, identical in every process (no salted ``hash``)."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 31-bit seed determined by ``parts`` (the original used Python's salted ``hash``)."""
    blob = "\x1f".join(repr(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF
