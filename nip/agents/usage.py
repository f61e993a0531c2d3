"""What a turn's generations cost: every attempt's tokens, rejected ones included (all are
billed); a turn is cached only when every attempt was."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nip.backends import TokenUsage
from nip.rollouts.records import AgentTurn


@dataclass
class AttemptsUsage:
    """The tokens of a turn's attempts so far, and whether every one came from the cache."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    cached_attempts: int = 0

    def add(self, usage: TokenUsage, cached: bool) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.attempts += 1
        self.cached_attempts += int(cached)

    @property
    def cached(self) -> bool:
        return self.attempts > 0 and self.cached_attempts == self.attempts

    def turn_fields(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached": self.cached,
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
