"""OpenAI: chat and fine-tuning through OpenAI's API, and its published prices."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from nip.backends.openai_compatible import OPENAI_BASE_URL
from nip.jobs.openai_api import OpenAIFineTuneBackend, job_request
from nip.parameters import PROVIDER_FACTS
from nip.providers._provider import Prices, Provider, openai_compatible

#: OpenAI list prices in USD per 1M ``(input, output)`` tokens (``ft:``: fine-tuned models;
#: ``ft:gpt-4o`` and ``ft:gpt-4.1-nano`` are 2025 figures). Correct them with
#: ``ExperimentSettings(prices_usd_per_1m=...)``.
OPENAI_PRICES_USD_PER_1M: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-4o": (2.50, 10.00),
        "gpt-4.1": (2.00, 8.00),
        "gpt-4.1-mini": (0.40, 1.60),
        "gpt-4.1-nano": (0.10, 0.40),
        "ft:gpt-4o-mini": (0.30, 1.20),
        "ft:gpt-4o": (3.75, 15.00),
        "ft:gpt-4.1": (3.00, 12.00),
        "ft:gpt-4.1-mini": (0.80, 3.20),
        "ft:gpt-4.1-nano": (0.20, 0.80),
    }
)

#: OpenAI fine-tuning prices in USD per 1M training tokens (file tokens x epochs; supervised
#: and DPO alike), by :func:`price_key`; ``estimate_cost(fine_tuning_prices=...)`` corrects them.
OPENAI_FINE_TUNING_PRICES_USD_PER_1M: Mapping[str, float] = MappingProxyType(
    {
        "gpt-4o-mini": 3.00,
        "gpt-4o": 25.00,
        "gpt-4.1-mini": 5.00,
        "gpt-4.1": 25.00,
    }
)

_SNAPSHOT_DATE = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_key(model: str) -> str:
    """The price-table key of a model name (``openai/gpt-4o-2024-08-06`` -> ``gpt-4o``,
    ``ft:gpt-4o-mini-2024-07-18:org::abc`` -> ``ft:gpt-4o-mini``)."""
    model = model.removeprefix("openai/")
    if model.startswith("ft:"):
        return "ft:" + _SNAPSHOT_DATE.sub("", model.split(":")[1])
    return _SNAPSHOT_DATE.sub("", model)


#: OpenAI's prices; OpenRouter passes OpenAI's models through at them.
PRICES = Prices(
    source="OpenAI's published prices (public listings)",
    read_on="2026-11-23",
    inference=lambda model: OPENAI_PRICES_USD_PER_1M.get(price_key(model)),
    training=lambda model, method, lora: OPENAI_FINE_TUNING_PRICES_USD_PER_1M.get(
        price_key(model).removeprefix("ft:")
    ),
)


PROVIDER = Provider(
    "OpenAI",
    PROVIDER_FACTS["OpenAI"],
    endpoint_key=lambda params: "openai",
    # $OPENAI_BASE_URL (a proxy, an Azure-style gateway, a local server) replaces the API.
    chat=openai_compatible(
        "openai", OPENAI_BASE_URL, "OPENAI_API_KEY", base_url_env="OPENAI_BASE_URL"
    ),
    fine_tune=lambda params, settings, chat: OpenAIFineTuneBackend.from_agent_params(params),
    job_settings=job_request,
    prices=PRICES,
)
