"""What a turn's generations cost: every attempt's tokens, rejected ones included (all are
billed); a turn is cached only when every attempt was."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from nip.backends import GenerationResult, TokenUsage
from nip.rollouts.records import AgentTurn


def attempts_usage(results: Sequence[GenerationResult]) -> dict[str, Any]:
    """The :class:`AgentTurn` fields of a turn's attempts: all their tokens, and ``cached``
    when every one came from the cache."""
    return {
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results),
        "completion_tokens": sum(r.usage.completion_tokens for r in results),
        "cached": bool(results) and all(r.cached for r in results),
    }


def split_usage(usage: TokenUsage, n: int) -> list[TokenUsage]:
    """One request's usage over its ``n`` samples: the prompt to the first (it was sent once),
    the completion tokens evenly, the remainder to the first ones; the shares add up to it."""
    per_sample, remainder = divmod(usage.completion_tokens, max(n, 1))
    return [
        TokenUsage(
            prompt_tokens=usage.prompt_tokens if i == 0 else 0,
            completion_tokens=per_sample + (1 if i < remainder else 0),
        )
        for i in range(n)
    ]


def with_usage_added(turn: AgentTurn, usage: TokenUsage, cached: bool) -> AgentTurn:
    """``turn`` also carrying ``usage`` (a sample generated again); cached only if both were."""
    return dataclasses.replace(
        turn,
        prompt_tokens=turn.prompt_tokens + usage.prompt_tokens,
        completion_tokens=turn.completion_tokens + usage.completion_tokens,
        cached=turn.cached and cached,
    )
