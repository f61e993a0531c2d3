"""The local backend's prefix cache: later rounds of a dialogue reuse the keys and values of
earlier ones, and greedy outputs are the same token for token as without the cache."""

from __future__ import annotations

import asyncio
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend
from tests.doubles.tiny_model import build_tiny_chat_model

if TYPE_CHECKING:
    import torch

# torch is imported by the tests, not at collection (2-3 s in every pytest-xdist worker).
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")

TINY = "tiny-chat"
SYSTEM = "You are the verifier. The problem: add two numbers. The solution: return a + b. " * 3


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / TINY, seed=0)


async def play_dialogues(model_dir: Path, prefix_cache_mb: float, dialogues: int = 4):
    """Three rounds of ``dialogues`` concurrent conversations, each round re-sending the
    whole history; returns every completion's text and the backend's statistics."""
    backend = LocalBackend(
        str(model_dir), device="cpu", max_wait_ms=20, prefix_cache_mb=prefix_cache_mb
    )
    histories = [
        [
            {"role": "system", "content": f"{SYSTEM} Item {i}."},
            {"role": "user", "content": f"Is item {i} correct?"},
        ]
        for i in range(dialogues)
    ]
    texts = []
    try:
        for round_ in range(3):
            requests = [
                GenerationRequest(TINY, tuple(h), max_tokens=8 + 3 * i, temperature=0)
                for i, h in enumerate(histories)
            ]
            results = await asyncio.gather(*(backend.generate(r) for r in requests))
            for history, result in zip(histories, results, strict=True):
                text = result.completions[0].text or ""
                texts.append(text)
                history += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": f"Round {round_}: say more."},
                ]
        return texts, backend.stats()
    finally:
        await backend.aclose()


@pytest.mark.timeout(120)
async def test_greedy_outputs_with_the_prefix_cache_equal_outputs_without_it(tiny_model_dir):
    cached, cached_stats = await play_dialogues(tiny_model_dir, prefix_cache_mb=64)
    plain, plain_stats = await play_dialogues(tiny_model_dir, prefix_cache_mb=0)

    assert cached == plain
    assert cached_stats.reused_prompt_tokens > 0 and plain_stats.reused_prompt_tokens == 0


@pytest.mark.timeout(120)
async def test_later_rounds_compute_only_their_new_tokens(tiny_model_dir):
    _, stats = await play_dialogues(tiny_model_dir, prefix_cache_mb=64)

    # Rounds 2 and 3 reuse every earlier token: well over a third of all prompt tokens.
    assert stats.reused_prompt_tokens > stats.prompt_tokens / 3


def kv(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of made-up keys and values for ``tokens`` tokens (4 bytes each value)."""
    import torch

    return [(torch.ones(1, 1, tokens, 4), torch.ones(1, 1, tokens, 4)) for _ in range(2)]


def test_the_longest_common_prefix_is_reused_but_never_the_last_prompt_token():
    from nip.backends.local._prefix_cache import PrefixCache

    cache = PrefixCache(max_bytes=1 << 20, min_tokens=2)
    cache.store("base", [1, 2, 3, 4, 5], kv(5))

    assert cache.lookup("base", [1, 2, 3, 9, 9]).tokens == 3
    assert cache.lookup("base", [1, 2, 3, 4, 5]).tokens == 4  # the last token is computed
    assert cache.lookup("base", [1, 2, 3]).layers[0][0].shape[2] == 2
    assert cache.lookup("base", [7, 7, 7]) is None


def test_another_model_or_adapter_never_reuses_the_entries():
    from nip.backends.local._prefix_cache import PrefixCache

    cache = PrefixCache(max_bytes=1 << 20, min_tokens=2)
    cache.store("base", [1, 2, 3, 4], kv(4))

    assert cache.lookup("adapter-fingerprint", [1, 2, 3, 4, 5]) is None


def test_memory_stays_bounded_and_the_least_recently_used_entry_goes_first():
    from nip.backends.local._prefix_cache import PrefixCache

    one_entry = sum(k.nbytes + v.nbytes for k, v in kv(10))
    cache = PrefixCache(max_bytes=2 * one_entry, min_tokens=2)
    cache.store("base", list(range(10)), kv(10))
    cache.store("base", list(range(100, 110)), kv(10))
    cache.lookup("base", [*range(10), 0])  # the first entry is used again
    cache.store("base", list(range(200, 210)), kv(10))

    assert cache.nbytes <= 2 * one_entry and len(cache) == 2
    assert cache.lookup("base", [*range(100, 110), 0]) is None  # evicted
    assert cache.lookup("base", [*range(10), 0]) is not None


def test_a_longer_entry_replaces_the_entries_it_extends():
    from nip.backends.local._prefix_cache import PrefixCache

    cache = PrefixCache(max_bytes=1 << 20, min_tokens=2)
    cache.store("base", [1, 2, 3], kv(3))
    cache.store("base", [1, 2, 3, 4, 5], kv(5))

    assert len(cache) == 1
