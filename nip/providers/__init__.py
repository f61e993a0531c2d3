"""Model providers: each is one module here, registered by one line in :data:`PROVIDERS`.

A provider module declares a :class:`Provider`: its facts (the entry of
:data:`nip.parameters.PROVIDER_FACTS` that configuration validates agents with: what it can
do, which settings act on its agents), its endpoint and chat backend, its fine-tuning backend
and the settings a job is sent, and its published prices. Everything that depends on the
provider reads it from here: the backend pool, shared model groups, the run plan, the cost
metric and the dry run, the CLI's choices. See docs/design.md, "Adding a model provider".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from nip.backends._types import ChatBackend
from nip.jobs._types import FineTuneBackend, FineTuneSpec
from nip.parameters import PureTextAgentParameters
from nip.providers import dummy, local, openai, openrouter, self_hosted, tinker, together
from nip.providers._provider import NotFineTunableBackend, Prices, Provider, openai_compatible
from nip.providers.dummy import DUMMY
from nip.providers.openai import price_key
from nip.settings import ExperimentSettings

#: Every ``model_provider``, by name: one line each.
PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {
        "OpenAI": openai.PROVIDER,
        "OpenRouter": openrouter.PROVIDER,
        "SelfHosted": self_hosted.PROVIDER,
        "Local": local.PROVIDER,
        "TogetherAI": together.PROVIDER,
        "Tinker": tinker.PROVIDER,
    }
)

#: The scripted backend that stands in for any provider when ``use_dummy_api=True``.
DUMMY_PROVIDER = dummy.PROVIDER


def provider_for(params: PureTextAgentParameters) -> Provider:
    """The provider serving an agent: the dummy one when ``use_dummy_api``, else its
    ``model_provider``."""
    return DUMMY_PROVIDER if params.use_dummy_api else PROVIDERS[params.model_provider]


def fine_tune_backend_for(
    params: PureTextAgentParameters,
    settings: ExperimentSettings,
    chat_backend: ChatBackend | None = None,
) -> FineTuneBackend:
    """The fine-tuning backend for agents with these parameters (a
    :class:`NotFineTunableBackend` for a provider that cannot fine-tune). ``chat_backend`` is
    the backend the agents generate with (the embedded model lends its loaded weights)."""
    return provider_for(params).fine_tune_backend(params, settings, chat_backend)


def job_settings(params: PureTextAgentParameters, spec: FineTuneSpec) -> dict[str, Any] | None:
    """The settings a job of agents with ``params`` is sent with (None: the provider cannot
    fine-tune)."""
    provider = provider_for(params)
    return None if provider.job_settings is None else provider.job_settings(spec)


def prices_for(params: PureTextAgentParameters) -> Prices | None:
    """The published prices of an agent's provider (None: its tokens cost nothing)."""
    provider = provider_for(params)
    return provider.prices if provider.bills_tokens else None


def inference_price(
    params: PureTextAgentParameters, model: str, corrections: Mapping[str, tuple[float, float]]
) -> tuple[float, float] | None:
    """USD per 1M ``(input, output)`` tokens of ``model`` generating for an agent with
    ``params``: 0 where its provider bills no tokens, else ``corrections``
    (``ExperimentSettings.prices_usd_per_1m``, by :func:`~nip.providers.openai.price_key`)
    over its provider's published prices; None when neither knows the model. A fine-tuned
    model its provider bills at another model's price (:attr:`Prices.priced_as`) is priced as
    that model, unless ``corrections`` name it. The dry run and the ``cost_usd`` metric both
    price with it."""
    prices = prices_for(params)
    if prices is None:
        return (0.0, 0.0)
    key = price_key(model)
    if key in corrections:
        return corrections[key]
    if prices.adapter_prefix and key.startswith(prices.adapter_prefix):
        key = price_key(params.model_name)
    key = prices.priced_as(key) or key
    return corrections.get(key) or prices.inference(key)


__all__ = [
    "DUMMY",
    "DUMMY_PROVIDER",
    "PROVIDERS",
    "NotFineTunableBackend",
    "Prices",
    "Provider",
    "fine_tune_backend_for",
    "inference_price",
    "job_settings",
    "openai_compatible",
    "prices_for",
    "provider_for",
]
