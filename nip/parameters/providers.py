"""What each model provider can do, as configuration needs to know it to validate an agent.

This is the configuration half of the provider table; the other half, where requests go and
which classes serve them, is :data:`nip.backends.providers.PROVIDERS` (above this layer), and
which fine-tuning backend runs a provider's jobs is :data:`nip.jobs.factory.FINE_TUNE_BACKENDS`.
Tests tie all three to the ``ModelProvider`` literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class ProviderCapabilities:
    """What a model provider can do.

    Attributes:
        bills_tokens: Requests are paid per token (the run's cost metric prices them).
        can_fine_tune: Its models can be fine-tuned (else trainable agents are refused).
        lora_only: It trains LoRA adapters only (trainable agents need ``use_lora=True``).
        where: Where it runs, as messages say it (``"on nip serve"``).
    """

    bills_tokens: bool
    can_fine_tune: bool
    lora_only: bool
    where: str


#: The capabilities of each ``ModelProvider``.
PROVIDER_CAPABILITIES: Mapping[str, ProviderCapabilities] = MappingProxyType(
    {
        "OpenAI": ProviderCapabilities(
            bills_tokens=True, can_fine_tune=True, lora_only=False, where="at OpenAI"
        ),
        "OpenRouter": ProviderCapabilities(
            bills_tokens=True, can_fine_tune=False, lora_only=False, where="on OpenRouter"
        ),
        "SelfHosted": ProviderCapabilities(
            bills_tokens=False, can_fine_tune=True, lora_only=True, where="on nip serve"
        ),
        "Local": ProviderCapabilities(
            bills_tokens=False, can_fine_tune=True, lora_only=True, where="locally"
        ),
    }
)
