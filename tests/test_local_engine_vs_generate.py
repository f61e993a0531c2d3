"""The Local engine's transformers path against plain ``model.generate`` on the same batch.

Greedy answers are token for token those of ``model.generate`` on the left-padded batch, and
the attention kernels see what they see under ``model.generate``: the same query and key
shapes, the same dtype, the same kind of mask (no cache attended over a pre-allocated length,
no extra mask that would rule out the fused kernels). On a CUDA device the same is checked in
bfloat16; without one those tests skip.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nip.backends import GenerationRequest

if TYPE_CHECKING:
    from nip.backends.local._engine import Engine

# torch is imported by the tests, not at collection (2-3 s in every pytest-xdist worker).
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")
TOPICS = ["the moon", "bread and butter with jam", "rivers", "chess openings, in detail"]
DEVICES = ["cpu", "cuda"]


def _engine(folder: Path, device: str) -> Engine:
    """The Local engine on ``device``; the test skips where it is a CUDA device and none is."""
    import torch

    from nip.backends.local._engine import Engine

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return Engine(str(folder), device=device)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.doubles.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


def _messages() -> list[tuple[dict, ...]]:
    return [({"role": "user", "content": f"Write about {topic}."},) for topic in TOPICS]


def _plain_generate(engine: Engine, max_new_tokens: int) -> list[str]:
    """Greedy completions of plain ``model.generate`` on the engine's own weights."""
    import torch

    tokenizer = engine.tokenizer
    texts = [
        tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=False)
        for m in _messages()
    ]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    batch = batch.to(engine.device)
    with torch.no_grad():
        output = engine.base.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=engine.pad_id,
            eos_token_id=sorted(engine.eos_ids),
        )
    answers = []
    for row in output[:, batch["input_ids"].shape[1] :].tolist():
        stop = next((i for i, t in enumerate(row) if t in engine.eos_ids), None)
        text = tokenizer.decode(row[:stop], skip_special_tokens=True)
        # Cut at the limit, the engine leaves out a character's partial bytes (as vLLM does).
        answers.append(text if stop is not None else text.rstrip("\ufffd"))
    return answers


def _engine_answers(engine: Engine, folder: Path, max_new_tokens: int) -> list[str]:
    requests = [
        GenerationRequest(str(folder), m, max_tokens=max_new_tokens, temperature=0)
        for m in _messages()
    ]
    report = engine.run(requests, {})
    assert report.generate_calls == 1  # one batch, as plain generate had
    return [r.completions[0].text for r in report.results]


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_answers_are_those_of_plain_generate_on_the_same_batch(tiny_model, device):
    engine = _engine(tiny_model, device)
    assert _engine_answers(engine, tiny_model, 12) == _plain_generate(engine, 12)


@pytest.mark.parametrize("device", DEVICES)
def test_attention_sees_what_it_sees_under_plain_generate(tiny_model, device, monkeypatch):
    """Every call of scaled_dot_product_attention: shapes, dtype, mask kind and causality."""
    import torch.nn.functional as functional

    calls: list[tuple] = []
    original = functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, *args, **kwargs):
        mask = None if attn_mask is None else (attn_mask.dtype, tuple(attn_mask.shape))
        options = sorted((k, v) for k, v in kwargs.items() if k != "scale")
        calls.append((tuple(query.shape), tuple(key.shape), query.dtype, key.dtype, mask, *options))
        return original(query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(functional, "scaled_dot_product_attention", recording)
    engine = _engine(tiny_model, device)
    _engine_answers(engine, tiny_model, 6)
    by_engine, calls[:] = list(calls), []
    _plain_generate(engine, 6)
    assert by_engine and by_engine == calls
