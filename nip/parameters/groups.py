"""Shared model groups in configuration: who shares a model, and do they agree on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nip.errors import SharedModelGroupError

if TYPE_CHECKING:
    from nip.parameters.hyper_parameters import HyperParameters

#: Settings that define a model: members of a group must agree on all of them.
MODEL_DEFINING_FIELDS = (
    "model_provider", "model_name", "use_dummy_api", "language_model_server_scheme_host",
    "language_model_server_port", "vllm_server_port", "fine_tune_from_scratch", "freeze_agent",
    "quantization", "num_epochs", "dpo_beta", "use_lora", "lora_rank", "lora_alpha",
    "lora_alpha_scale", "lora_dropout", "stack_lora_adapters", "per_device_train_batch_size",
    "openai_n_epochs", "openai_batch_size", "openai_learning_rate_multiplier",
    "load_checkpoint_and_parameters", "checkpoint_entity", "checkpoint_project",
    "checkpoint_run_id", "checkpoint_version",
)  # fmt: skip


def group_members(hyper_params: HyperParameters) -> dict[str, list[str]]:
    """Agent names by group name (an agent with no group is a group of its own)."""
    groups: dict[str, list[str]] = {}
    for name in hyper_params.agent_names:
        if name not in hyper_params.agents:  # not filled in yet during construction
            continue
        group = hyper_params.agents[name].shared_model_group or name
        groups.setdefault(group, []).append(name)
    return groups


def check_group_agreement(hyper_params: HyperParameters) -> None:
    """Raise :class:`SharedModelGroupError` if a group's members disagree on the model."""
    for group, names in group_members(hyper_params).items():
        first = hyper_params.agents[names[0]]
        for other_name in names[1:]:
            other = hyper_params.agents[other_name]
            for field_name in MODEL_DEFINING_FIELDS:
                a, b = getattr(first, field_name), getattr(other, field_name)
                if a != b:
                    raise SharedModelGroupError(
                        f"agents {names[0]!r} and {other_name!r} share the model group "
                        f"{group!r} but differ in {field_name} ({a!r} vs {b!r}); "
                        "agents of a group must agree on every setting that defines the model"
                    )


__all__ = ["MODEL_DEFINING_FIELDS", "check_group_agreement", "group_members"]
