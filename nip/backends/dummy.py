"""The dummy backend (``use_dummy_api=True``): seeded, offline responses of the right shape.

A verifier asks questions (one per channel header) or decides; a prover answers. Each response
is a pure function of the request and the sample index. Who asks is read from
``request.metadata`` (``is_verifier``, ``can_decide``, ``channel_headers``, ``decision_texts``)
or else from the prompt, so it also works behind an HTTP server.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass

from nip.backends._types import Completion, GenerationRequest, GenerationResult, TokenUsage
from nip.protocols import DECISION_SCALES

_WORDS = [
    "loop", "index", "boundary", "input", "output", "list", "string", "value", "case", "empty",
    "sorted", "return", "function", "test", "edge", "negative", "zero", "length", "condition",
    "branch", "variable", "result", "check", "example", "count", "sum", "order", "type",
    "integer", "element", "range", "first", "last",
]  # fmt: skip
_HEADER = re.compile(r"Question for [A-Za-z0-9_]+:")
# Phrases of the built-in prompts that tell the verifier this turn is its last.
_MUST_DECIDE = re.compile(r"must now decide|decide at once|then decide\.", re.IGNORECASE)


@dataclass(frozen=True)
class DummyPolicy:
    """How the dummy agents behave.

    Attributes:
        seed: Mixed into every response.
        decide_probability: Chance that the verifier decides on a turn where it may.
        decide_on_turn: If set, the verifier decides from this turn (1-based) on.
        min_words / max_words: Length of questions and answers.
    """

    seed: int = 0
    decide_probability: float = 0.4
    decide_on_turn: int | None = None
    min_words: int = 6
    max_words: int = 18

    def respond(self, request: GenerationRequest, sample_index: int = 0) -> str:
        """The response to ``request`` (sample ``sample_index`` of ``request.n``)."""
        rng = random.Random(f"{self.seed}:{request.cache_key(sample_index)}")
        meta = request.metadata
        last = request.messages[-1]["content"] if request.messages else ""
        if meta.get("expects") == "yes_no" or last.rstrip().endswith("Answer Yes or No."):
            return rng.choice(("Yes", "No"))
        system = next((m["content"] for m in request.messages if m["role"] == "system"), "")
        is_verifier = meta.get("is_verifier")
        if is_verifier is None:
            is_verifier = "decision:" in system.lower()
        if not is_verifier:
            return "Answer: " + self._sentence(rng) + "."
        turn = 1 + sum(1 for m in request.messages if m["role"] == "assistant")
        can_decide = meta.get("can_decide", True)
        last_turn = meta.get("last_turn")
        if last_turn is None:
            last_turn = any(
                m["role"] == "system" and _MUST_DECIDE.search(m["content"])
                for m in request.messages
            )
        if can_decide and (last_turn or self._decides(rng, turn)):
            texts = meta.get("decision_texts")
            answers = str(texts).split("\n") if texts else _stated_decision_texts(system)
            return "Decision: " + rng.choice(answers)
        headers = meta.get("channel_headers")
        header_list = (
            str(headers).split("\n") if headers else list(dict.fromkeys(_HEADER.findall(system)))
        )
        if not header_list:
            return "Question: " + self._sentence(rng) + "?"
        return "\n".join(f"{h} {self._sentence(rng)}?" for h in header_list)

    def _decides(self, rng: random.Random, turn: int) -> bool:
        if self.decide_on_turn is not None:
            return turn >= self.decide_on_turn
        return rng.random() < self.decide_probability

    def _sentence(self, rng: random.Random) -> str:
        n = rng.randint(self.min_words, self.max_words)
        return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize()


def _stated_decision_texts(system_prompt: str) -> list[str]:
    """The answers of the decision scale the system prompt states (as ``decision_texts``
    orders them); accept/reject when it states none."""
    stated = [s for s in DECISION_SCALES.values() if s.answer_form in system_prompt]
    if not stated:
        return ["accept", "reject"]
    return list(reversed(max(stated, key=lambda s: len(s.answer_form)).texts))


class DummyBackend:
    """A :class:`~nip.backends.ChatBackend` answering with a :class:`DummyPolicy`, after
    ``latency_s`` of ``asyncio.sleep``."""

    name = "dummy"

    def __init__(self, policy: DummyPolicy | None = None, latency_s: float = 0.0):
        self.policy = policy or DummyPolicy()
        self.latency_s = latency_s

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        texts = [self.policy.respond(request, i) for i in range(request.n)]
        prompt_words = sum(len(m.get("content", "").split()) for m in request.messages)
        completion_words = sum(len(t.split()) for t in texts)
        return GenerationResult(
            completions=tuple(Completion(text=t, finish_reason="stop") for t in texts),
            usage=TokenUsage(prompt_tokens=prompt_words, completion_tokens=completion_words),
            latency_s=self.latency_s,
            model=request.model,
        )

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"DummyBackend(policy={self.policy!r}, latency_s={self.latency_s})"
