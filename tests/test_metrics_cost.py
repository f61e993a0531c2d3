"""The ``cost_usd`` metric: token usage priced per model, None when a model has no price."""

from __future__ import annotations

import pytest

from nip.analysis.metrics import cost_usd
from nip.parameters import PureTextAgentParameters
from nip.providers import inference_price
from nip.providers.openai import OPENAI_PRICES_USD_PER_1M, price_key
from nip.rollouts.records import AgentTurn


def turn(agent: str, model: str | None, prompt: int, completion: int, **extra) -> AgentTurn:
    return AgentTurn(
        round=0,
        agent=agent,
        raw_text="...",
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        **extra,
    )


def test_cost_is_input_and_output_tokens_at_the_models_price_per_million():
    turns = [turn("prover", "gpt-4o-mini", 1_000_000, 0), turn("verifier", "gpt-4.1", 0, 500_000)]
    assert cost_usd(turns) == pytest.approx(0.15 + 8.00 / 2)


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai/gpt-4.1-nano", "gpt-4.1-nano"),
        ("ft:gpt-4o-mini-2024-07-18:my-org::abc123", "ft:gpt-4o-mini"),
    ],
)
def test_snapshot_openrouter_and_fine_tuned_names_find_their_price(reported, key):
    assert price_key(reported) == key and key in OPENAI_PRICES_USD_PER_1M


def test_one_unpriced_model_makes_the_cost_unknown():
    turns = [turn("prover", "gpt-4o", 10, 10), turn("verifier", "meta-llama/Llama-3-8B", 10, 10)]
    assert cost_usd(turns) is None


def test_a_price_function_prices_each_turn_by_its_agent_and_model():
    turns = [turn("prover", "my-model", 2_000_000, 1_000_000), turn("verifier", "gpt-4o", 0, 0)]
    table = {("prover", "my-model"): (1.0, 3.0), ("verifier", "gpt-4o"): (0.0, 0.0)}
    assert cost_usd(turns, lambda agent, model: table.get((agent, model))) == pytest.approx(5.0)


def test_a_free_agent_cached_and_overridden_turns_cost_nothing():
    turns = [
        turn("prover", "Qwen/Qwen2.5-0.5B", 1000, 1000),  # a Local model: free
        turn("verifier", "gpt-4o", 1000, 1000, cached=True),
        turn("verifier", None, 0, 0, overridden=True),
    ]
    local = PureTextAgentParameters.local_default(model_name="Qwen/Qwen2.5-0.5B")
    assert cost_usd(turns, lambda agent, model: inference_price(local, model, {})) == 0.0


def test_corrections_by_price_key_go_over_the_providers_prices():
    openai = PureTextAgentParameters(model_name="gpt-4o-2024-08-06")
    assert inference_price(openai, "gpt-4o-2024-08-06", {"gpt-4o": (1.0, 2.0)}) == (1.0, 2.0)
    assert inference_price(openai, "my-model", {}) is None
