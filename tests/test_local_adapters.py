"""Local LoRA adapters: what a model name stands for, in the cache and at generation.

Adapter names (``verifier-it0``) recur in every run, so the cache must key on the weights;
a stacked adapter was trained on top of its predecessors, so it must be served with them.
"""

from __future__ import annotations

import asyncio
import shutil
from importlib.util import find_spec
from pathlib import Path

import pytest

from nip.backends import GenerationRequest
from nip.backends.cache import CachedBackend, ResponseCache
from nip.backends.local import LocalBackend
from nip.backends.local.adapters import predecessors, read_adapter_stack, write_predecessors
from tests.doubles.tiny_model import build_tiny_chat_model, build_tiny_lora_adapter

# Not importorskip: importing peft at collection costs every pytest worker seconds.
pytestmark = pytest.mark.skipif(
    find_spec("torch") is None or find_spec("peft") is None, reason="torch or peft is missing"
)

TINY = "tiny-chat"
PROMPTS = ("Who are you?", "Decide: accept or reject?", "What does f(3) return?")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / TINY, seed=0)


def ask(model: str, text: str) -> GenerationRequest:
    return GenerationRequest(
        model=model, messages=({"role": "user", "content": text},), max_tokens=12, seed=3
    )


async def answers(model_dir: Path, adapters: dict[str, Path], model: str) -> list[str | None]:
    """Greedy answers to :data:`PROMPTS` from ``model`` on a fresh backend, asked together."""
    backend = LocalBackend(str(model_dir), device="cpu", max_wait_ms=20)
    try:
        for name, path in adapters.items():
            backend.register_adapter(name, path)
        results = await asyncio.gather(*(backend.generate(ask(model, p)) for p in PROMPTS))
    finally:
        await backend.aclose()
    return [r.completions[0].text for r in results]


# --------------------------------------------------------------------------- cache
@pytest.mark.timeout(120)
async def test_the_same_adapter_name_with_other_weights_misses_the_shared_cache(
    tiny_model_dir, tmp_path
):
    first = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "run1" / "adapter", seed=1)
    second = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "run2" / "adapter", seed=2)
    cache_file = tmp_path / "responses.sqlite"

    async def run(adapter: Path):
        """One session: a fresh cached local backend serving ``adapter`` as verifier-it0."""
        store = ResponseCache(cache_file)
        local = LocalBackend(str(tiny_model_dir), device="cpu")
        backend = CachedBackend(local, store, f"local:{TINY}")
        try:
            local.register_adapter("verifier-it0", adapter)
            return await backend.generate(ask("verifier-it0", PROMPTS[0]))
        finally:
            await backend.aclose()
            store.close()

    run1 = await run(first)
    run2 = await run(second)
    rerun1 = await run(first)

    assert not run1.cached and not run2.cached
    assert run2.completions != run1.completions
    assert rerun1.cached and rerun1.completions == run1.completions


def test_the_fingerprint_follows_the_files_not_the_folder(tiny_model_dir, tmp_path):
    adapter = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "a", seed=1)
    copy = shutil.copytree(adapter, tmp_path / "copy")
    other = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "b", seed=2)

    assert read_adapter_stack(copy).fingerprint == read_adapter_stack(adapter).fingerprint
    assert read_adapter_stack(other).fingerprint != read_adapter_stack(adapter).fingerprint
    backend = LocalBackend(str(tiny_model_dir), device="cpu")
    backend.register_adapter("verifier-it0", adapter)
    assert backend.model_fingerprint(TINY) is None
    assert backend.model_fingerprint("verifier-it0") == read_adapter_stack(adapter).fingerprint


# --------------------------------------------------------------------------- stacking
@pytest.mark.timeout(180)
async def test_a_stacked_adapter_is_served_on_top_of_its_predecessor(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    a = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "jobs" / "it0" / "adapter", seed=1)
    b_alone = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "b-alone", seed=2)
    b_stacked = shutil.copytree(b_alone, tmp_path / "jobs" / "it1" / "adapter")
    write_predecessors(b_stacked, [a])
    # What stacking means: A merged into the base weights, then B applied on top.
    merged_dir = tmp_path / "merged" / TINY
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    PeftModel.from_pretrained(base, str(a)).merge_and_unload().save_pretrained(merged_dir)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(merged_dir)

    stacked = await answers(tiny_model_dir, {"it0": a, "it1": b_stacked}, "it1")
    direct = await answers(merged_dir, {"it1": b_alone}, "it1")
    on_base_only = await answers(tiny_model_dir, {"it1": b_alone}, "it1")

    assert predecessors(b_stacked) == [a.resolve()]
    assert stacked == direct
    assert stacked != on_base_only


@pytest.mark.timeout(60)
async def test_the_base_model_and_the_predecessor_alone_are_unchanged_by_a_stack(
    tiny_model_dir, tmp_path
):
    a = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "a", seed=1)
    b = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "b", seed=2)
    write_predecessors(b, [a])

    together = LocalBackend(str(tiny_model_dir), device="cpu", max_wait_ms=20)
    try:
        together.register_adapter("it0", a)
        together.register_adapter("it1", b)
        results = await asyncio.gather(
            *(together.generate(ask(m, PROMPTS[0])) for m in (TINY, "it0", "it1"))
        )
    finally:
        await together.aclose()

    texts = [r.completions[0].text for r in results]
    assert texts[0] == (await answers(tiny_model_dir, {}, TINY))[0]
    assert texts[1] == (await answers(tiny_model_dir, {"it0": a}, "it0"))[0]
    assert len(set(texts)) == 3


def test_the_fingerprint_ignores_the_order_peft_lists_target_modules_in(tiny_model_dir, tmp_path):
    import json

    adapter = build_tiny_lora_adapter(tiny_model_dir, tmp_path / "a", seed=0)
    reordered = Path(shutil.copytree(adapter, tmp_path / "b"))
    config = json.loads((reordered / "adapter_config.json").read_text())
    config["target_modules"] = list(reversed(sorted(config["target_modules"])))
    (reordered / "adapter_config.json").write_text(json.dumps(config, indent=5))

    assert read_adapter_stack(reordered).fingerprint == read_adapter_stack(adapter).fingerprint
