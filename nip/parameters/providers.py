"""What configuration must know of each model provider: the provider facts table.

A provider is one entry here (data the configuration validates agents with) and one module of
:mod:`nip.providers` (its behaviour: chat backend, fine-tuning backend, job settings, prices),
registered by one line in :data:`nip.providers.PROVIDERS`. The configuration sits beneath the
behaviour and cannot import it, so the facts it needs live here; ``tests/test_architecture.py``
ties the two tables together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: The settings whose effect depends on the agent's provider, each with what it does. A
#: provider's :attr:`ProviderFacts.settings` says which of them act on its agents; set to a
#: value other than its default on an agent of any other provider, a setting is refused
#: (``PureTextAgentParameters.validate``; ``rl.lr``, run-wide, by ``HyperParameters``).
PROVIDER_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        "language_model_server_scheme_host": "where nip serve is",
        "language_model_server_port": "where nip serve is",
        "quantization": "QLoRA training on nip serve's GPU",
        "num_epochs": "the epochs of each LoRA job",
        "per_device_train_batch_size": "the per-device batch size of LoRA training",
        "use_lora": "LoRA adapters rather than all weights",
        "lora_rank": "the LoRA adapter's rank",
        "lora_alpha": "the LoRA adapter's alpha",
        "lora_alpha_scale": "the LoRA adapter's alpha as a multiple of its rank",
        "lora_dropout": "dropout on the LoRA layers",
        "stack_lora_adapters": "stacking a new LoRA adapter on the previous one",
        "fine_tune_from_scratch": "whether each job starts again from the base model",
        "openai_n_epochs": "the n_epochs OpenAI's fine-tuning API is sent",
        "openai_batch_size": "the batch_size OpenAI's fine-tuning API is sent",
        "openai_learning_rate_multiplier": "the learning-rate multiplier OpenAI is sent",
        "dpo_beta": "DPO's beta",
        "rl.lr": "the learning rate of fine-tuning jobs",
    }
)

_LORA = frozenset({
    "num_epochs", "use_lora", "lora_rank", "lora_alpha", "lora_alpha_scale", "lora_dropout",
    "fine_tune_from_scratch", "dpo_beta", "rl.lr",
})  # fmt: skip
_OPENAI = frozenset({
    "fine_tune_from_scratch", "openai_n_epochs", "openai_batch_size",
    "openai_learning_rate_multiplier", "dpo_beta",
})  # fmt: skip
_TINKER = frozenset({
    "num_epochs", "per_device_train_batch_size", "use_lora", "lora_rank", "fine_tune_from_scratch",
    "dpo_beta", "rl.lr",
})  # fmt: skip
_TRAINED_HERE = _LORA | {"per_device_train_batch_size", "stack_lora_adapters"}


@dataclass(frozen=True)
class ProviderFacts:
    """What configuration knows of a model provider.

    Attributes:
        bills_tokens: Requests are paid per token (the run's cost metric prices them).
        can_fine_tune: Its models can be fine-tuned (else trainable agents are refused).
        lora_only: It trains LoRA adapters only (trainable agents need ``use_lora=True``).
        where: Where it runs, as messages say it (``"on nip serve"``).
        settings: Which of :data:`PROVIDER_SETTINGS` act on its agents.
        why_not: Why the others do not, as a refusal says it.
        keeps_supervisor: Its training lines keep the supervisor messages the prompts had
            (Together's format wants a user turn before each assistant turn).
    """

    bills_tokens: bool
    can_fine_tune: bool
    lora_only: bool
    where: str
    settings: frozenset[str] = frozenset()
    why_not: str = ""
    keeps_supervisor: bool = False

    def __post_init__(self) -> None:
        unknown = self.settings - set(PROVIDER_SETTINGS)
        if unknown:
            raise ValueError(f"not provider-dependent settings: {sorted(unknown)}")

    def applies(self, setting: str) -> bool:
        """Whether ``setting`` (a key of :data:`PROVIDER_SETTINGS`) acts on its agents."""
        return setting not in PROVIDER_SETTINGS or setting in self.settings


#: The facts of each ``model_provider``; its keys are the names a configuration accepts.
PROVIDER_FACTS: Mapping[str, ProviderFacts] = MappingProxyType(
    {
        "OpenAI": ProviderFacts(
            bills_tokens=True,
            can_fine_tune=True,
            lora_only=False,
            where="at OpenAI",
            settings=_OPENAI,
            why_not="OpenAI's fine-tuning API chooses its own training (set openai_n_epochs, "
            "openai_batch_size or openai_learning_rate_multiplier instead) and serves its own "
            "weights",
        ),
        "OpenRouter": ProviderFacts(
            bills_tokens=True,
            can_fine_tune=False,
            lora_only=False,
            where="on OpenRouter",
            why_not="OpenRouter only generates: it has no fine-tuning and no server to point at",
        ),
        "SelfHosted": ProviderFacts(
            bills_tokens=False,
            can_fine_tune=True,
            lora_only=True,
            where="on nip serve",
            settings=_TRAINED_HERE
            | {"language_model_server_scheme_host", "language_model_server_port", "quantization"},
            why_not="nip serve trains LoRA adapters itself and is not OpenAI's API",
        ),
        "Local": ProviderFacts(
            bills_tokens=False,
            can_fine_tune=True,
            lora_only=True,
            where="locally",
            settings=_TRAINED_HERE,
            why_not="the embedded model runs in this process, on the CPU, where bitsandbytes "
            "cannot quantize; nip serve on a GPU (model_provider='SelfHosted') can",
        ),
        "TogetherAI": ProviderFacts(
            bills_tokens=True,
            can_fine_tune=True,
            lora_only=False,
            where="at Together AI",
            settings=_LORA - {"fine_tune_from_scratch"},
            why_not="Together AI's fine-tuning API chooses its batch size ('max', with "
            "sequence packing), trains each adapter from the base model (no stacking; nip "
            "does not yet continue a job from an earlier one's checkpoint) and serves its own "
            "weights",
            keeps_supervisor=True,
        ),
        "Tinker": ProviderFacts(
            bills_tokens=True,
            can_fine_tune=True,
            lora_only=True,
            where="on Tinker",
            settings=_TINKER,
            why_not="Tinker trains one LoRA adapter of lora_rank at a time (its own alpha, no "
            "dropout, no stacking) on its GPUs, from nip's loop",
        ),
    }
)

#: The name of the scripted dummy provider (agents with ``use_dummy_api=True``, whatever their
#: ``model_provider``).
DUMMY = "dummy"

#: The facts of the scripted dummy provider. Which settings apply to a dummy agent is decided
#: by its ``model_provider``, the provider it stands in for.
DUMMY_FACTS = ProviderFacts(
    bills_tokens=False, can_fine_tune=True, lora_only=False, where="offline"
)


def providers_where(setting: str) -> list[str]:
    """The providers on whose agents ``setting`` acts."""
    return [name for name, facts in PROVIDER_FACTS.items() if facts.applies(setting)]
