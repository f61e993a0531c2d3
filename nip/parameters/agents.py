"""Per-agent parameters of text agents (seed: ``PureTextAgentParameters``).

Every field of the original that applies to text agents keeps its name, default and meaning.
The original's tensor-agent fields (``agent_lr_factor``, ``body_lr_factor``,
``use_manual_architecture``, ``normalize_message_history``, ``use_orthogonal_initialisation``,
``orthogonal_initialisation_gain``) are left out: they configure neural-network bodies that
text agents do not have.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from nip.errors import InvalidParameterError
from nip.parameters._base import BaseParameters
from nip.parameters.providers import DUMMY, PROVIDER_FACTS, PROVIDER_SETTINGS, providers_where
from nip.parameters.update_schedule import AgentUpdateSchedule, ConstantUpdateSchedule

#: The names a configuration accepts: the keys of the provider facts table.
ModelProvider = Literal[tuple(PROVIDER_FACTS)]  # type: ignore[valid-type]
UseSupervisorType = Literal["none", "all", "first", "all_but_first"]
VllmQuantization = Literal["bitsandbytes", "none"]

#: The only ``vllm_server_port`` accepted (see the field's documentation).
DEFAULT_VLLM_SERVER_PORT = 8000

#: The embedded model the ``Local`` provider runs by default.
DEFAULT_LOCAL_MODEL = "SmolLM2-135M-Instruct"


class PureTextAgentParameters(BaseParameters):
    """Parameters of one text agent: its model, sampling, fine-tuning and prompting."""

    update_schedule: AgentUpdateSchedule = Field(
        default_factory=ConstantUpdateSchedule,
        description="In which iterations the agent is trained.",
    )
    load_checkpoint_and_parameters: bool = Field(
        False,
        description="Start the agent from the fine-tuned model of an earlier run "
        "(checkpoint_run_id).",
    )
    checkpoint_entity: str = Field(
        default_factory=lambda: os.environ.get("WANDB_ENTITY", ""),
        description="W&B entity of the checkpoint run (defaults to $WANDB_ENTITY).",
    )
    checkpoint_project: str = Field(
        default_factory=lambda: os.environ.get("WANDB_PROJECT", ""),
        description="W&B project of the checkpoint run (defaults to $WANDB_PROJECT).",
    )
    checkpoint_run_id: str | None = Field(
        None, description="The earlier run: its nip run directory, or its W&B run id (W&B online)."
    )
    checkpoint_version: str = Field(
        "latest", description="Which version of the W&B run artifact to load (W&B runs only)."
    )
    model_provider: ModelProvider = Field(
        "OpenAI",
        description="Who serves the model: OpenAI, SelfHosted (nip serve), OpenRouter, Local "
        "(embedded), TogetherAI or Tinker.",
    )
    model_name: str = Field("gpt-4o-mini-2024-07-18", description="The model to use.")
    language_model_server_scheme_host: str = Field(
        "http://localhost", description="Scheme and host of the self-hosted language-model server."
    )
    language_model_server_port: int = Field(
        5000,
        description="Port of the self-hosted language-model server (nip serve); SelfHosted chat "
        "and fine-tuning requests go there.",
        ge=1,
        le=65535,
    )
    vllm_server_port: int = Field(
        DEFAULT_VLLM_SERVER_PORT,
        description="Kept for the original's configs; only 8000 is accepted. The vLLM port is set "
        "where the server starts (nip serve --vllm-port, ServerConfig.vllm_port).",
        ge=1,
        le=65535,
    )
    use_dummy_api: bool = Field(
        False, description="Answer with deterministic dummy responses instead of calling a model."
    )
    shared_model_group: str | None = Field(
        None, description="Agents with the same group share one model (None: a group of its own)."
    )
    temperature: float | None = Field(
        None, description="Sampling temperature (None: the model's default).", ge=0.0, le=2.0
    )
    top_p: float | None = Field(
        None, description="Nucleus-sampling probability mass (None: the default).", gt=0.0, le=1.0
    )
    repetition_penalty: float | None = Field(
        None, description="Penalty on repeated tokens; >1 discourages repetition.", gt=0.0
    )
    fine_tune_from_scratch: bool = Field(
        True, description="Fine-tune the base model each iteration rather than the latest one."
    )
    freeze_agent: bool = Field(False, description="Never fine-tune this agent.")
    quantization: VllmQuantization = Field(
        "none",
        description="SelfHosted only: bitsandbytes trains the agent's jobs as QLoRA (4-bit base "
        "weights) on nip serve's GPU; the served weights follow nip serve --quantization.",
    )
    num_epochs: int | None = Field(
        None, description="Fine-tuning epochs (None: use rl.num_epochs).", ge=1
    )
    dpo_beta: float | None = Field(
        None, description="DPO beta, 0 < beta <= 2 (None: the provider's default).", gt=0.0, le=2.0
    )
    use_lora: bool = Field(True, description="Train a LoRA adapter rather than all weights.")
    lora_rank: int = Field(64, description="Rank of the LoRA adapter.", ge=1)
    lora_alpha: int | None = Field(
        None, description="LoRA alpha; exactly one of lora_alpha and lora_alpha_scale is set.", ge=1
    )
    lora_alpha_scale: float | None = Field(
        1.0,
        description="LoRA alpha as a multiple of lora_rank (used when lora_alpha is None).",
        gt=0.0,
    )
    lora_dropout: float = Field(0.05, description="Dropout on the LoRA layers.", ge=0.0, lt=1.0)
    stack_lora_adapters: bool = Field(
        False, description="Stack a new adapter on the previous one rather than reuse it."
    )
    per_device_train_batch_size: int = Field(
        2, description="Training batch size per device (LoRA training: local, nip serve).", ge=1
    )
    openai_n_epochs: int | None = Field(
        None,
        description="OpenAI fine-tuning only: n_epochs sent to the API (None: 'auto', OpenAI "
        "chooses, as the original did). num_epochs and rl.num_epochs apply to LoRA training.",
        ge=1,
    )
    openai_batch_size: int | None = Field(
        None,
        description="OpenAI fine-tuning only: batch_size sent to the API (None: 'auto').",
        ge=1,
    )
    openai_learning_rate_multiplier: float | None = Field(
        None,
        description="OpenAI fine-tuning only: learning_rate_multiplier sent to the API (None: "
        "'auto').",
        gt=0.0,
    )
    system_prompt_template_path: str | None = Field(
        None, description="Path of a custom system prompt template (None: the built-in one)."
    )
    use_supervisor_message: UseSupervisorType = Field(
        "none", description="When to append a supervisor message with instructions."
    )
    supervisor_name: str = Field(
        "Supervisor", description="Name of the supervisor message's sender."
    )
    max_response_words: int = Field(
        150, description="The prompt asks for responses of at most this many words.", ge=1
    )
    max_tokens_per_message: int | None = Field(
        None, description="Token limit per generation (None: 1.5 x max_response_words).", ge=1
    )
    num_invalid_generation_retries: int = Field(
        20, description="Retries when a response cannot be parsed.", ge=0
    )

    def validate(self) -> None:
        self._check_provider_settings()
        self._check_checkpoint()
        if self.vllm_server_port != DEFAULT_VLLM_SERVER_PORT:
            raise InvalidParameterError(
                "vllm_server_port",
                self.vllm_server_port,
                f"{DEFAULT_VLLM_SERVER_PORT} (the original's default, kept for its configs)",
                reason=(
                    "agents never talk to vLLM directly: SelfHosted agents talk to nip serve at "
                    "language_model_server_scheme_host:language_model_server_port, and the "
                    "server picks vLLM's port; set it there with nip serve --vllm-port (or "
                    "vllm_port in the server's config file)"
                ),
            )
        if self.temperature is not None and self.top_p is not None:
            raise InvalidParameterError(
                "temperature",
                self.temperature,
                "temperature or top_p, not both",
                reason=f"top_p={self.top_p} is also set; set only one of them",
            )
        if (self.lora_alpha is None) == (self.lora_alpha_scale is None):
            raise InvalidParameterError(
                "lora_alpha",
                self.lora_alpha,
                "exactly one of lora_alpha and lora_alpha_scale set",
                reason=f"lora_alpha_scale={self.lora_alpha_scale}",
            )
        provider = PROVIDER_FACTS[self.model_provider]
        if provider.lora_only and not self.use_lora and not self.freeze_agent:
            where = provider.where
            raise InvalidParameterError(
                "use_lora",
                False,
                f"True for a trainable {self.model_provider} agent",
                reason=(
                    f"full fine-tuning is not supported {where} (nip.jobs.lora_train trains "
                    "LoRA adapters only); set use_lora=True, or freeze_agent=True"
                ),
            )

    def _check_provider_settings(self) -> None:
        """Refuse a provider-dependent setting changed on an agent whose provider ignores it
        (the table: :data:`~nip.parameters.providers.PROVIDER_SETTINGS`)."""
        facts = PROVIDER_FACTS[self.model_provider]
        for name in type(self).model_fields:
            if name not in PROVIDER_SETTINGS or facts.applies(name):
                continue
            value = getattr(self, name)
            if value == _DEFAULTS[name]:
                continue
            raise InvalidParameterError(
                name,
                value,
                f"{_DEFAULTS[name]!r} here: it sets {PROVIDER_SETTINGS[name]} for agents on "
                f"{', '.join(providers_where(name))}",
                reason=f"model_provider={self.model_provider!r} ignores it: {facts.why_not}",
            )

    def _check_checkpoint(self) -> None:
        if self.load_checkpoint_and_parameters and not self.checkpoint_run_id:
            raise InvalidParameterError(
                "checkpoint_run_id",
                self.checkpoint_run_id,
                "an earlier run's directory or W&B run id",
                reason="load_checkpoint_and_parameters=True needs the run to start from",
            )
        if not self.load_checkpoint_and_parameters:
            for name, default in (("checkpoint_run_id", None), ("checkpoint_version", "latest")):
                if getattr(self, name) != default:
                    raise InvalidParameterError(
                        name,
                        getattr(self, name),
                        f"{default!r} unless load_checkpoint_and_parameters=True",
                        reason=(
                            "it would be ignored: set load_checkpoint_and_parameters=True to "
                            "start the agent from that run"
                        ),
                    )

    @property
    def served_by(self) -> str:
        """Who answers the agent's requests: its ``model_provider``, or the scripted dummy
        (:data:`~nip.parameters.providers.DUMMY`) with ``use_dummy_api``."""
        return DUMMY if self.use_dummy_api else self.model_provider

    @property
    def computed_lora_alpha(self) -> float:
        """The LoRA alpha to train with: ``lora_alpha`` or ``lora_rank * lora_alpha_scale``."""
        if self.lora_alpha is not None:
            return float(self.lora_alpha)
        assert self.lora_alpha_scale is not None
        return self.lora_rank * self.lora_alpha_scale

    @property
    def effective_max_tokens_per_message(self) -> int:
        """``max_tokens_per_message``, or 1.5 tokens per allowed word when it is None."""
        if self.max_tokens_per_message is not None:
            return self.max_tokens_per_message
        return int(1.5 * self.max_response_words)

    @property
    def is_random(self) -> bool:
        """Text agents are never random agents (kept for the original's logs)."""
        return False

    @classmethod
    def construct_test_params(cls) -> PureTextAgentParameters:
        """Offline parameters: the dummy API, so tests make no requests."""
        return cls(use_dummy_api=True)

    @classmethod
    def local_default(cls, **overrides) -> PureTextAgentParameters:
        """The embedded SmolLM2 model on this machine, with small LoRA settings for CPU."""
        values = dict(model_provider="Local", model_name=DEFAULT_LOCAL_MODEL, lora_rank=8)
        return cls(**values | {"max_response_words": 60, "temperature": 0.7} | overrides)


#: Each field's default, to tell a changed provider-dependent setting from an untouched one.
_DEFAULTS = {
    name: field.get_default(call_default_factory=True)
    for name, field in PureTextAgentParameters.model_fields.items()
}
