"""The model providers: for each, where its chat requests go, which backend serves them and what
it can do. Which class serves a provider is decided here and nowhere else.

=============  ===========================  ===============================  ======  =====  =====
provider       endpoint key                 chat backend                     bills   tunes  LoRA
=============  ===========================  ===============================  ======  =====  =====
OpenAI         ``openai``                   OpenAIBackend, ``$OPENAI_BASE_   yes     yes    no
                                            URL`` or the public API
OpenRouter     ``openrouter``               OpenAIBackend, openrouter.ai     yes     no     no
SelfHosted     ``selfhosted:host:port``     SelfHostedBackend (``nip serve``)  no    yes    yes
Local          ``local:<model>``            LocalBackend (in this process;   no      yes    yes
                                            ``local_engine``: or vLLM)
(dummy)        ``dummy``                    DummyBackend (``use_dummy_api``) no      yes    no
=============  ===========================  ===============================  ======  =====  =====

The capabilities come from :data:`nip.parameters.PROVIDER_CAPABILITIES`, beneath this layer, so
that configuration can validate agents with them; the fine-tuning backend of each provider is
chosen by :data:`nip.jobs.factory.FINE_TUNE_BACKENDS`, above it. Tests tie both to this table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nip.backends._types import ChatBackend
from nip.backends.dummy import DummyBackend
from nip.backends.openai_compatible import (
    OPENAI_BASE_URL,
    OPENROUTER_BASE_URL,
    OpenAIBackend,
    OpenAIBackendConfig,
)
from nip.backends.self_hosted import SelfHostedBackend
from nip.parameters import PROVIDER_CAPABILITIES, ProviderCapabilities, PureTextAgentParameters
from nip.settings import ExperimentSettings

#: The name of the dummy provider (agents with ``use_dummy_api=True``, whatever their
#: ``model_provider``).
DUMMY = "dummy"


@dataclass(frozen=True)
class Provider:
    """One model provider.

    Attributes:
        name: Its ``model_provider`` value (or ``"dummy"``).
        capabilities: What it can do (billing, fine-tuning, LoRA only).
        endpoint_key: The name of the endpoint an agent's requests go to; agents with the
            same key share one backend (see :class:`~nip.backends.pool.BackendPool`).
        http_backend: For providers served over HTTP, ``(params, **config overrides)`` to an
            :class:`~nip.backends.openai_compatible.OpenAIBackend`; None for the others.
        in_process_backend: For the others, ``(params, settings)`` to their backend.
    """

    name: str
    capabilities: ProviderCapabilities
    endpoint_key: Callable[[PureTextAgentParameters], str]
    http_backend: Callable[..., OpenAIBackend] | None = None
    in_process_backend: (
        Callable[[PureTextAgentParameters, ExperimentSettings], ChatBackend] | None
    ) = None

    @property
    def bills_tokens(self) -> bool:
        return self.capabilities.bills_tokens

    @property
    def can_fine_tune(self) -> bool:
        return self.capabilities.can_fine_tune

    @property
    def lora_only(self) -> bool:
        return self.capabilities.lora_only

    def chat_backend(
        self, params: PureTextAgentParameters, settings: ExperimentSettings
    ) -> ChatBackend:
        """A new chat backend for agents with these parameters."""
        if self.http_backend is not None:
            overrides = {}
            if settings.max_concurrency is not None:
                overrides["max_concurrency"] = settings.max_concurrency
            return self.http_backend(params, **overrides)
        assert self.in_process_backend is not None
        return self.in_process_backend(params, settings)


def _openai(params: PureTextAgentParameters, **overrides: Any) -> OpenAIBackend:
    base_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
    settings = {"name": "openai", "base_url": base_url, "api_key_env": "OPENAI_API_KEY"}
    return OpenAIBackend(OpenAIBackendConfig(**{**settings, **overrides}))


def _openrouter(params: PureTextAgentParameters, **overrides: Any) -> OpenAIBackend:
    settings = {
        "name": "openrouter",
        "base_url": OPENROUTER_BASE_URL,
        "api_key_env": "OPENROUTER_API_KEY",
    }
    return OpenAIBackend(OpenAIBackendConfig(**{**settings, **overrides}))


def _local(params: PureTextAgentParameters, settings: ExperimentSettings) -> ChatBackend:
    from nip.backends.local import local_backend  # cheap, but keeps this module's imports small

    return local_backend(params.model_name, engine=settings.local_engine, params=params)


def _dummy(params: PureTextAgentParameters, settings: ExperimentSettings) -> ChatBackend:
    return DummyBackend(latency_s=settings.dummy_latency_s)


#: Every ``ModelProvider``, by name.
PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {
        "OpenAI": Provider(
            "OpenAI", PROVIDER_CAPABILITIES["OpenAI"], lambda p: "openai", http_backend=_openai
        ),
        "OpenRouter": Provider(
            "OpenRouter",
            PROVIDER_CAPABILITIES["OpenRouter"],
            lambda p: "openrouter",
            http_backend=_openrouter,
        ),
        "SelfHosted": Provider(
            "SelfHosted",
            PROVIDER_CAPABILITIES["SelfHosted"],
            lambda p: (
                f"selfhosted:{p.language_model_server_scheme_host}:{p.language_model_server_port}"
            ),
            http_backend=SelfHostedBackend.from_agent_params,
        ),
        "Local": Provider(
            "Local",
            PROVIDER_CAPABILITIES["Local"],
            lambda p: f"local:{p.model_name}",
            in_process_backend=_local,
        ),
    }
)

#: The scripted backend that stands in for any provider when ``use_dummy_api=True``.
DUMMY_PROVIDER = Provider(
    DUMMY,
    ProviderCapabilities(bills_tokens=False, can_fine_tune=True, lora_only=False, where="offline"),
    lambda p: DUMMY,
    in_process_backend=_dummy,
)


def provider_for(params: PureTextAgentParameters) -> Provider:
    """The provider serving an agent: the dummy one when ``use_dummy_api``, else its
    ``model_provider``."""
    return DUMMY_PROVIDER if params.use_dummy_api else PROVIDERS[params.model_provider]
