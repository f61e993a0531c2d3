"""Which fine-tuning backend serves an agent: decided here, from its provider."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nip.backends import ChatBackend, SharesBaseWeights, capability
from nip.backends.providers import DUMMY, provider_for
from nip.backends.self_hosted import served_params
from nip.errors import FineTuneError
from nip.jobs._types import FineTuneBackend, FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.jobs.dummy import DummyFineTuneBackend
from nip.jobs.openai_api import OpenAIFineTuneBackend, job_request
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import PureTextAgentParameters
from nip.settings import ExperimentSettings


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


def _local_lora(
    params: PureTextAgentParameters, settings: ExperimentSettings, chat: ChatBackend | None
) -> FineTuneBackend:
    # Jobs train in a worker thread of the run, on the chat backend's weights where it has
    # loaded them; no ML library loads until one is used.
    from nip.jobs.local_lora import InProcessLoraFineTuneBackend

    root = Path(settings.run_dir) if settings.run_dir else Path.cwd() / "runs" / "adhoc"
    host = capability(chat, SharesBaseWeights) if chat is not None else None
    return InProcessLoraFineTuneBackend(
        root / "jobs", base_weights=host.loaded_base_weights if host is not None else None
    )


#: The fine-tuning backend of each provider that can fine-tune (see
#: :data:`nip.backends.providers.PROVIDERS`), built from an agent's parameters, the settings
#: and the chat backend that serves the agents (None where there is none yet).
FINE_TUNE_BACKENDS: Mapping[
    str,
    Callable[[PureTextAgentParameters, ExperimentSettings, ChatBackend | None], FineTuneBackend],
] = MappingProxyType(
    {
        DUMMY: lambda params, settings, chat: DummyFineTuneBackend(),
        "OpenAI": lambda params, settings, chat: OpenAIFineTuneBackend.from_agent_params(params),
        "SelfHosted": lambda params, settings, chat: SelfHostedFineTuneBackend.from_agent_params(
            served_params(params, settings)  # the server its run owns, if any
        ),
        "Local": _local_lora,
    }
)


def fine_tune_backend_for(
    params: PureTextAgentParameters,
    settings: ExperimentSettings,
    chat_backend: ChatBackend | None = None,
) -> FineTuneBackend:
    """The fine-tuning backend for agents with these parameters: the provider's (a
    :class:`NotFineTunableBackend` for a provider that cannot fine-tune). ``chat_backend`` is
    the backend the agents generate with (the embedded model lends its loaded weights)."""
    provider = provider_for(params)
    if not provider.can_fine_tune:
        return NotFineTunableBackend(provider.name)
    return FINE_TUNE_BACKENDS[provider.name](params, settings, chat_backend)


def _spec_settings(spec: FineTuneSpec) -> dict[str, Any]:
    """A job trained here (local LoRA, the dummy): the spec itself, less its examples."""
    settings = spec.to_dict()
    settings.pop("examples")
    return settings


#: What each provider's backend sends for a job (all but its training data): the OpenAI API
#: its ``fine_tuning.jobs.create`` settings, ``nip serve`` the same with the LoRA settings,
#: local training the spec. The backends send exactly this; the run plan shows it.
JOB_SETTINGS: Mapping[str, Callable[[FineTuneSpec], dict[str, Any]]] = MappingProxyType(
    {
        DUMMY: _spec_settings,
        "OpenAI": job_request,
        "SelfHosted": lambda spec: job_request(spec, lora_settings=True),
        "Local": _spec_settings,
    }
)


def job_settings(params: PureTextAgentParameters, spec: FineTuneSpec) -> dict[str, Any] | None:
    """The settings a job of agents with ``params`` is sent with (None: the provider cannot
    fine-tune)."""
    provider = provider_for(params)
    if not provider.can_fine_tune:
        return None
    return JOB_SETTINGS[provider.name](spec)
