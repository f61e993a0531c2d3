"""A persistent response cache in front of any backend, in SQLite (off the event loop).

Keyed by the whole request, the sample index, a namespace naming the backend and, from an
:class:`~nip.backends.AdapterHost`, the fingerprint of the weights behind the model name (local
adapters are called ``verifier-it0`` in every run).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from nip.backends._types import (
    AdapterHost,
    ChatBackend,
    Completion,
    GenerationRequest,
    GenerationResult,
    TokenUsage,
    capability,
)

_SCHEMA = """
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    text TEXT,
    finish_reason TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    model TEXT,
    created REAL NOT NULL
)
"""


class ResponseCache:
    """The SQLite store behind :class:`CachedBackend`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        with self._lock:
            self._connection.executescript(_SCHEMA)

    def get_many(self, keys: list[str]) -> dict[str, tuple]:
        marks = ",".join("?" * len(keys))
        with self._lock:
            rows = self._connection.execute(
                "SELECT key, text, finish_reason, prompt_tokens, completion_tokens, model "
                f"FROM responses WHERE key IN ({marks})",
                keys,
            ).fetchall()
        return {row[0]: row[1:] for row in rows}

    def put_many(self, rows: list[tuple]) -> None:
        now = time.time()
        with self._lock:
            self._connection.executemany(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*row, now) for row in rows],
            )
            self._connection.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._connection.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class CachedBackend:
    """A :class:`ChatBackend` answering from a :class:`ResponseCache` when it can, else
    from ``inner``; ``namespace`` keeps backends sharing a cache apart."""

    def __init__(self, inner: ChatBackend, cache: ResponseCache, namespace: str):
        self.inner = inner
        self.cache = cache
        self.namespace = namespace
        self.name = f"cached-{inner.name}"
        self.hits = 0
        self.misses = 0

    def _keys(self, request: GenerationRequest) -> list[str]:
        namespace = self.namespace
        host = capability(self.inner, AdapterHost)
        weights = host.model_fingerprint(request.model) if host is not None else None
        if weights is not None:  # e.g. a local adapter: the name alone is not its identity
            namespace = f"{namespace}@{weights}"
        return [f"{namespace}:{request.cache_key(i)}" for i in range(request.n)]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        keys = self._keys(request)
        found = await asyncio.to_thread(self.cache.get_many, keys)
        if len(found) == len(keys):
            self.hits += 1
            rows = [found[k] for k in keys]
            return GenerationResult(
                completions=tuple(Completion(text=r[0], finish_reason=r[1]) for r in rows),
                usage=TokenUsage(sum(r[2] for r in rows[:1]), sum(r[3] for r in rows)),
                cached=True,
                model=rows[0][4],
            )
        self.misses += 1
        result = await self.inner.generate(request)
        # Only completions worth replaying are stored; failures are retried next time.
        rows = [
            (
                key,
                c.text,
                c.finish_reason,
                result.usage.prompt_tokens if i == 0 else 0,
                result.usage.completion_tokens // max(len(result.completions), 1),
                result.model,
            )
            for i, (key, c) in enumerate(zip(keys, result.completions, strict=False))
            if c.finish_reason in ("stop", "length") and c.text
        ]
        if rows:
            await asyncio.to_thread(self.cache.put_many, rows)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:
        return (
            f"CachedBackend({self.inner!r}, path={str(self.cache.path)!r}, "
            f"hits={self.hits}, misses={self.misses})"
        )
