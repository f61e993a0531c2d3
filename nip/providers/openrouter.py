"""OpenRouter: chat only, through its OpenAI-compatible API (no fine-tuning)."""

from __future__ import annotations

from nip.backends.openai_compatible import OPENROUTER_BASE_URL
from nip.parameters import PROVIDER_FACTS
from nip.providers import openai
from nip.providers._provider import Provider, openai_compatible

PROVIDER = Provider(
    "OpenRouter",
    PROVIDER_FACTS["OpenRouter"],
    endpoint_key=lambda params: "openrouter",
    chat=openai_compatible("openrouter", OPENROUTER_BASE_URL, "OPENROUTER_API_KEY"),
    prices=openai.PRICES,  # OpenAI's models (openai/gpt-4o...) at OpenAI's prices
)
