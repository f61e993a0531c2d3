"""What Tinker trains on: chat messages as tokens with loss weights (the model's own chat
template), the SDK's ``Datum`` of them, and the DPO loss nip sends through
``forward_backward_custom`` (see :mod:`nip.jobs.tinker`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any


def chat_tokens(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], prompt: bool = False
) -> list[int]:
    """The token ids of ``messages`` in the model's chat template (``prompt``: followed by
    the assistant's opening, ready to generate)."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def render_supervised(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]]
) -> tuple[list[int], list[float]]:
    """A conversation's tokens and loss weights: 1 on each ``assistant`` turn (its content
    and end of turn, from where its opening ends to where the conversation up to it ends),
    0 elsewhere. Where a template renders a prefix differently from the whole (tokens
    merging across a boundary), a turn starts where the two first differ, as TRL does."""
    tokens = chat_tokens(tokenizer, messages)
    weights = [0.0] * len(tokens)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = _common_prefix(chat_tokens(tokenizer, messages[:i], prompt=True), tokens)
        end = _common_prefix(chat_tokens(tokenizer, messages[: i + 1]), tokens)
        weights[start:end] = [1.0] * (end - start)
    return tokens, weights


def render_preference(
    tokenizer: Any, example: Mapping[str, Any]
) -> list[tuple[list[int], list[float]]]:
    """A DPO line's two sequences, chosen then rejected, as tokens and weights: 1 on the
    answer, from where prompt and prompt + answer first differ (TRL's rule)."""
    prompt = list(example["input"]["messages"])
    prompt_ids = chat_tokens(tokenizer, prompt, prompt=True)
    sequences = []
    for side in ("preferred_output", "non_preferred_output"):
        tokens = chat_tokens(tokenizer, [*prompt, *example[side]])
        start = _common_prefix(prompt_ids, tokens)
        sequences.append((tokens, [0.0] * start + [1.0] * (len(tokens) - start)))
    return sequences


def datum(tokens: Sequence[int], weights: Sequence[float]) -> Any:
    """A next-token :class:`tinker.types.Datum`: the model reads ``tokens[:-1]``, predicts
    ``tokens[1:]``, each target weighted as its token is."""
    from tinker import types

    n = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=list(tokens[1:]), dtype="int64", shape=[n]),
            "weights": types.TensorData(data=list(weights[1:]), dtype="float32", shape=[n]),
        },
    )


def dpo_loss(beta: float, reference: Sequence[float]):
    """The sigmoid DPO loss for ``forward_backward_custom`` on data ordered chosen,
    rejected, chosen, rejected...; ``reference[i]``: the reference model's log-probability
    of datum i's weighted tokens."""
    import torch
    import torch.nn.functional as F

    def loss(data: Sequence[Any], logprobs: Sequence[Any]) -> tuple[Any, dict[str, float]]:
        sums = torch.stack(
            [
                (lp * d.loss_fn_inputs["weights"].to_torch().to(lp.dtype)).sum()
                for d, lp in zip(data, logprobs, strict=True)
            ]
        )
        ratios = sums - torch.tensor(list(reference), dtype=sums.dtype)
        margin = ratios[0::2] - ratios[1::2]
        losses = -F.logsigmoid(beta * margin)
        value = losses.mean()
        accuracy = float((margin > 0).float().mean())
        return value, {"dpo_loss": float(value.detach()), "dpo_accuracy": accuracy}

    return loss


async def reference_logprobs(sampler: Any, data: Sequence[Any]) -> list[float]:
    """Each datum's weighted log-probability under ``sampler`` (the model that sampled the
    pairs): ``compute_logprobs`` of the whole sequence, summed where the weights are 1."""
    from tinker import types

    async def one(d: Any) -> float:
        tokens = [*d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].data[-1]]
        logprobs = await sampler.compute_logprobs(types.ModelInput.from_ints(tokens))
        weights = d.loss_fn_inputs["weights"].data
        return float(sum(lp * w for lp, w in zip(logprobs[1:], weights, strict=True) if w))

    return list(await asyncio.gather(*(one(d) for d in data)))
