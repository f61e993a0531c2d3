"""Reusing the keys and values of prompts already seen: a bounded, least-recently-used cache.

A dialogue's every round resends its history, and a token's keys and values depend only on the
tokens before it, so an earlier sequence's cache serves any later prompt starting with the same
tokens. Entries are keyed by model (base or adapter stack) and found by the longest common
prefix; memory is bounded in bytes, least recently used first out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

LayerKV = tuple[torch.Tensor, torch.Tensor]
"""One layer's keys and values for one sequence: ``[1, kv_heads, tokens, head_dim]`` each."""


@dataclass(frozen=True)
class PrefixHit:
    """How many leading tokens of a prompt are cached, and their keys and values."""

    tokens: int
    layers: tuple[LayerKV, ...]


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    layers: tuple[LayerKV, ...]
    nbytes: int


class PrefixCache:
    """Keys and values of earlier sequences, by model, for reuse as prompt prefixes, in at most
    ``max_bytes`` (0: none); common prefixes under ``min_tokens`` are not worth a copy."""

    def __init__(self, max_bytes: int, min_tokens: int = 16):
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], _Entry] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, model: str, prompt: Sequence[int]) -> PrefixHit | None:
        """The longest cached prefix of ``prompt`` (leaving its last token to be computed)."""
        best, best_key, best_length = None, None, 0
        limit = len(prompt) - 1  # the last token's logits are needed: it is always computed
        for key, entry in self._entries.items():
            if key[0] != model:
                continue
            length = _common_prefix(entry.tokens, prompt, limit)
            if length > best_length:
                best, best_key, best_length = entry, key, length
        if best is None or best_length < self.min_tokens:
            return None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best_length
        layers = tuple((k[:, :, :best_length], v[:, :, :best_length]) for k, v in best.layers)
        return PrefixHit(best_length, layers)

    def store(self, model: str, tokens: Sequence[int], layers: Sequence[LayerKV]) -> None:
        """Keep ``layers`` (the keys and values of ``tokens``, copied) for later prompts."""
        tokens = tuple(tokens)
        if self.max_bytes <= 0 or len(tokens) < self.min_tokens:
            return
        owned = tuple((k.contiguous().clone(), v.contiguous().clone()) for k, v in layers)
        nbytes = sum(k.nbytes + v.nbytes for k, v in owned)
        if nbytes > self.max_bytes:
            return
        # An entry that is a prefix of the new one adds nothing: drop it.
        for key in [k for k, e in self._entries.items() if k[0] == model and _is_prefix(e, tokens)]:
            self.nbytes -= self._entries.pop(key).nbytes
        old = self._entries.pop((model, tokens), None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._entries[(model, tokens)] = _Entry(tokens, owned, nbytes)
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes

    def clear(self) -> None:
        """Forget every entry (e.g. when an adapter name gets new weights)."""
        self._entries.clear()
        self.nbytes = 0


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _is_prefix(entry: _Entry, tokens: tuple[int, ...]) -> bool:
    return len(entry.tokens) <= len(tokens) and tokens[: len(entry.tokens)] == entry.tokens
