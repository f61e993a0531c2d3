"""What a model provider is: its facts, and the behaviour each of its modules declares."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nip.backends._types import ChatBackend
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import FineTuneError
from nip.jobs._types import FineTuneBackend, FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.parameters import ProviderFacts, PureTextAgentParameters
from nip.settings import ExperimentSettings

#: ``(params, settings)`` to the chat backend serving agents with these parameters.
ChatFactory = Callable[[PureTextAgentParameters, ExperimentSettings], ChatBackend]
#: ``(params, settings, chat backend or None)`` to the fine-tuning backend of their group.
FineTuneFactory = Callable[
    [PureTextAgentParameters, ExperimentSettings, ChatBackend | None], FineTuneBackend
]


@dataclass(frozen=True)
class Prices:
    """A provider's published prices, as nip read them, for the dry run.

    Attributes:
        source: Where they were read (a page's address).
        read_on: When (an ISO date).
        inference: USD per 1M ``(input, output)`` tokens of a model (an ``ft:`` prefix marks
            a fine-tuned model), or None when unknown.
        training: USD per 1M training tokens of a job on a base model, by ``(model,
            method, use_lora)``, or None when unknown.
        notes: What pricing a model assumes, for the dry run's list of assumptions.
        priced_as: The model a fine-tuned model's tokens are priced as, where the provider
            bills them at another model's price (Together: a LoRA adapter served serverless
            at its base model's), or None: at its own.
        adapter_prefix: How the provider's fine-tuned adapters are named (Tinker:
            ``tinker://``); such a model is priced as its agent's base model.
    """

    source: str
    read_on: str
    inference: Callable[[str], tuple[float, float] | None]
    training: Callable[[str, str, bool], float | None] = lambda model, method, lora: None
    notes: Callable[[str], list[str]] = field(default=lambda model: [])
    priced_as: Callable[[str], str | None] = lambda model: None
    adapter_prefix: str | None = None


@dataclass(frozen=True)
class Provider:
    """One model provider: a module of :mod:`nip.providers` declares it.

    Attributes:
        name: Its ``model_provider`` value (or ``"dummy"``).
        facts: What configuration knows of it (:data:`nip.parameters.PROVIDER_FACTS`).
        endpoint_key: The name of the endpoint an agent's requests go to; agents with the
            same key share one backend (:class:`~nip.providers.pool.BackendPool`).
        chat: Builds the chat backend.
        fine_tune: Builds the fine-tuning backend (None: it cannot fine-tune).
        job_settings: What a job is sent, all but its training data (the backend sends
            exactly this; the run plan shows it). None: it cannot fine-tune.
        prices: Its published prices (None: its tokens cost nothing).
    """

    name: str
    facts: ProviderFacts
    endpoint_key: Callable[[PureTextAgentParameters], str]
    chat: ChatFactory
    fine_tune: FineTuneFactory | None = None
    job_settings: Callable[[FineTuneSpec], dict[str, Any]] | None = None
    prices: Prices | None = None

    @property
    def bills_tokens(self) -> bool:
        return self.facts.bills_tokens

    def fine_tune_backend(
        self,
        params: PureTextAgentParameters,
        settings: ExperimentSettings,
        chat_backend: ChatBackend | None = None,
    ) -> FineTuneBackend:
        """The fine-tuning backend of a group of these agents (every job refused where the
        provider cannot fine-tune)."""
        if self.fine_tune is None:
            return NotFineTunableBackend(self.name)
        return self.fine_tune(params, settings, chat_backend)


def openai_compatible(
    name: str, base_url: str, api_key_env: str, *, base_url_env: str | None = None
) -> ChatFactory:
    """The chat factory of a provider behind an OpenAI-compatible endpoint.

    Args:
        name: The backend's name (its endpoint key).
        base_url: The API root.
        api_key_env: The variable holding the key.
        base_url_env: A variable that, when set, replaces ``base_url`` (a proxy, a local
            fake of the API).
    """

    def build(params: PureTextAgentParameters, settings: ExperimentSettings) -> OpenAIBackend:
        url = (os.environ.get(base_url_env) if base_url_env else None) or base_url
        config: dict[str, Any] = {"name": name, "base_url": url, "api_key_env": api_key_env}
        if settings.max_concurrency is not None:
            config["max_concurrency"] = settings.max_concurrency
        return OpenAIBackend(OpenAIBackendConfig(**config))

    return build


class NotFineTunableBackend:
    """For providers that offer no fine-tuning (OpenRouter): every job is refused."""

    name = "not-fine-tunable"

    def __init__(self, provider: str):
        self.provider = provider

    async def create_job(self, spec: FineTuneSpec) -> str:
        raise FineTuneError(
            f"{self.provider} offers no fine-tuning; freeze these agents (freeze_agent=True) "
            "or use another provider"
        )

    async def get_job(self, job_id: str) -> FineTuneJob:
        return FineTuneJob(id=job_id, status="not_found")

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        return []
