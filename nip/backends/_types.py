"""The one small interface every chat-generation backend implements, and its records."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol, TypedDict, runtime_checkable

FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "function_call"]


class ChatMessage(TypedDict, total=False):
    """One chat message as the OpenAI API takes it: ``role``, ``content`` and maybe ``name``."""

    role: Literal["system", "user", "assistant"]
    content: str
    name: str


@dataclass(frozen=True)
class GenerationRequest:
    """Everything that determines a completion.

    Attributes:
        model: The model (or LoRA adapter) name the backend should use.
        messages: The chat prompt.
        max_tokens: Token limit of each completion.
        temperature / top_p / repetition_penalty: Sampling settings (None: the default).
        n: Number of independent completions (MALT siblings use n > 1).
        seed: Sampling seed; with temperature 0 or a seed, completions are reproducible.
        metadata: Not sent to the model: who asks (``agent``, ``round``...), for dummy
            policies, logs and the prompt inspector.
    """

    model: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    n: int = 1
    seed: int | None = None
    metadata: dict[str, str | int | float | bool | None] = field(default_factory=dict, hash=False)

    def cache_key(self, sample_index: int = 0) -> str:
        """A stable hash of everything that shapes the output, plus the sample index."""
        payload = {
            "model": self.model,
            "messages": [dict(m) for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "repetition_penalty": self.repetition_penalty,
            "seed": self.seed,
            "sample_index": sample_index,
        }
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class Completion:
    """One generated message."""

    text: str | None
    finish_reason: FinishReason | str


@dataclass(frozen=True)
class TokenUsage:
    """Tokens consumed by one call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class GenerationResult:
    """What a backend returns for one request: ``request.n`` completions and accounting."""

    completions: tuple[Completion, ...]
    usage: TokenUsage = TokenUsage()
    latency_s: float = 0.0
    cached: bool = False
    model: str | None = None
    attempts: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class ChatBackend(Protocol):
    """Generates chat completions. Implementations: dummy, openai (any compatible URL), local.

    ``generate`` is a coroutine and must never block the event loop; concurrency limits,
    retries and back-off live inside the backend.
    """

    name: str

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate ``request.n`` completions for ``request.messages``."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads or models."""
        ...
