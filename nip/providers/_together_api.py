"""Together AI's job statuses, job arguments, fine-tuning limits and data format."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from nip.errors import FineTuneError
from nip.jobs._types import FineTuneSpec, JobStatus

#: The API's root as the SDK takes it (its default; request paths carry ``/v1``).
TOGETHER_BASE_URL = "https://api.together.ai"
API_KEY_ENV = "TOGETHER_API_KEY"
BASE_URL_ENV = "TOGETHER_BASE_URL"

#: Every job status the SDK knows and what nip calls it.
STATUS_MAP: Mapping[str, JobStatus] = MappingProxyType(
    {
        "pending": "pending",
        "queued": "pending",
        "running": "running",
        "compressing": "running",
        "uploading": "running",
        "cancel_requested": "running",
        "cancelled": "cancelled",
        "error": "failed",
        "user_error": "failed",
        "completed": "succeeded",
    }
)
#: Event types that carry a failed job's reason, lower-cased (the SDK spells them both ways).
FAILURE_EVENTS = frozenset({"job_error", "job_user_error"})


def _sdk() -> Any:
    from nip.extras import needs

    with needs("together"):
        import together
    return together


# ------------------------------------------------------------------------- job settings
def job_request(spec: FineTuneSpec) -> dict[str, Any]:
    """The SDK's ``fine_tuning.create`` arguments for ``spec`` but ``training_file``."""
    request: dict[str, Any] = {
        "model": spec.base_model,
        "n_epochs": spec.num_epochs,
        "learning_rate": spec.learning_rate,
        "batch_size": "max",  # Together chooses, with sequence packing
        "random_seed": spec.seed,
        "training_method": "dpo" if spec.method == "dpo" else "sft",
        "lora": spec.use_lora,
    }
    if spec.method == "dpo":
        if spec.dpo_beta is not None:  # else Together's default (0.1)
            request["dpo_beta"] = spec.dpo_beta
    else:
        request["train_on_inputs"] = "auto"
    if spec.use_lora:
        request.update(
            lora_r=spec.lora_rank,
            lora_alpha=round(spec.lora_alpha),
            lora_dropout=spec.lora_dropout,
            lora_trainable_modules="all-linear",
        )
    if spec.job_name:
        request["suffix"] = spec.job_name[:40]  # the SDK's limit
    return request


def limit_problems(spec: FineTuneSpec, limits: Any) -> list[str]:
    """What of ``spec`` its model's ``FinetuneModelLimits`` refuse; empty when nothing."""
    model, problems = spec.base_model, []
    if spec.use_lora and spec.lora_rank > limits.lora_training.max_rank:
        problems.append(
            f"lora_rank={spec.lora_rank} is above {model}'s limit of "
            f"{limits.lora_training.max_rank}"
        )
    if not spec.use_lora and not getattr(limits, "full_training", None):
        problems.append(f"{model} takes LoRA fine-tuning only (use_lora=True)")
    if spec.num_epochs > limits.max_num_epochs:
        problems.append(f"num_epochs={spec.num_epochs} is above {limits.max_num_epochs}")
    if not limits.min_learning_rate <= spec.learning_rate <= limits.max_learning_rate:
        problems.append(
            f"learning rate {spec.learning_rate:g} is outside {limits.min_learning_rate:g}"
            f"-{limits.max_learning_rate:g}"
        )
    return problems


def together_lines(spec: FineTuneSpec) -> tuple[dict[str, Any], ...]:
    """The training lines in Together's format (system or user first, then alternating turns):
    a later system message becomes a user turn, and user messages in a row are joined."""

    def shaped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index, message in enumerate(messages):
            role = "user" if message["role"] == "system" and index else message["role"]
            if out and index and role == "user" and out[-1]["role"] == "user":
                out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{message['content']}"}
            else:
                out.append({**message, "role": role})
        return out

    if spec.method == "dpo":
        return tuple(
            {**line, "input": {**line["input"], "messages": shaped(line["input"]["messages"])}}
            for line in spec.examples
        )
    return tuple({**line, "messages": shaped(line["messages"])} for line in spec.examples)


def check_lines(spec: FineTuneSpec) -> None:
    """Refuse, before upload, a line Together's format does not take (alternating turns ending
    with the assistant's; a preference output is one assistant message).

    Raises:
        FineTuneError: Naming the line and what is wrong with it.
    """
    for number, line in enumerate(spec.examples, 1):
        if spec.method == "dpo":
            problem = _conversation_problem(line.get("input", {}).get("messages"), final=False)
            for side in ("preferred_output", "non_preferred_output"):
                out = line.get(side)
                if not (
                    isinstance(out, list) and len(out) == 1 and out[0].get("role") == "assistant"
                ):
                    problem = problem or f"{side} is not one assistant message"
        else:
            problem = _conversation_problem(line.get("messages"), final=True)
        if problem:
            raise FineTuneError(
                f"line {number} of the {spec.job_name or 'training'} file is not in Together "
                f"AI's format ({problem}); nothing was uploaded"
            )


def _conversation_problem(messages: Any, *, final: bool) -> str:
    if not isinstance(messages, list) or not messages:
        return "no messages"
    roles = [m.get("role") for m in messages]
    if unknown := set(roles) - {"system", "user", "assistant"}:
        return f"unknown roles {sorted(map(str, unknown))}"
    if "system" in roles[1:]:
        return "a system message after the first"
    turns = roles[1:] if roles[0] == "system" else roles
    if not turns or turns[0] != "user":
        return "no user turn before the first assistant turn"
    for before, after in itertools.pairwise(turns):
        if before == after:
            return f"two {before} messages in a row"
    if final and roles[-1] != "assistant":
        return "it does not end with the assistant's message"
    if not final and roles[-1] == "assistant":
        return "its input ends with the assistant's message"
    return ""
