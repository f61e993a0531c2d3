"""The one small interface every chat-generation backend implements, and its records."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeVar, runtime_checkable

FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "function_call"]


class ChatMessage(TypedDict, total=False):
    """One chat message as the OpenAI API takes it: ``role``, ``content`` and maybe ``name``."""

    role: Literal["system", "user", "assistant"]
    content: str
    name: str


@dataclass(frozen=True)
class GenerationRequest:
    """Everything that determines a completion; ``n`` independent completions (MALT siblings),
    sampling settings None for the default, and ``metadata`` (who asks: ``agent``,
    ``round``...) never sent to the model."""

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
        payload = {**asdict(self), "sample_index": sample_index}
        del payload["n"], payload["metadata"]  # n is the sample count; metadata is never sent
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
    """Generates chat completions, never blocking the event loop (limits and retries live
    inside the backend)."""

    name: str

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate ``request.n`` completions for ``request.messages``."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads or models."""
        ...


# ------------------------------------------------------------------------ capabilities
# What some backends can do beyond generating. A caller asks with ``capability(backend, X)``,
# which also looks through wrappers such as the response cache.
_T = TypeVar("_T")


@runtime_checkable
class AdapterHost(Protocol):
    """A backend that serves fine-tuned LoRA adapters it is given (the embedded model)."""

    def register_adapter(self, name: str, path: str | os.PathLike[str]) -> None:
        """Serve the adapter saved at ``path`` under the model name ``name``."""
        ...

    def model_fingerprint(self, model: str) -> str | None:
        """What identifies the weights behind ``model`` (an adapter's file), if anything."""
        ...


@runtime_checkable
class SharesBaseWeights(Protocol):
    """A backend holding a model's weights in this process that others may share, read-only
    (the embedded model's, shared with LoRA jobs trained in the same process)."""

    def loaded_base_weights(self, model: str) -> Mapping[str, Any] | None:
        """The weights (tensors by parameter name) of base model ``model`` if it is loaded
        here; None if it is not (nothing is loaded by asking)."""
        ...


@runtime_checkable
class ReportsReadiness(Protocol):
    """A backend that may need time before it can generate (a server that is starting)."""

    async def wait_for_ready(self, timeout_s: float | None = None) -> None:
        """Return once the backend can generate."""
        ...


@runtime_checkable
class WrapsBackend(Protocol):
    """A backend in front of another one (the response cache)."""

    inner: ChatBackend


def capability(backend: object, kind: type[_T]) -> _T | None:
    """``backend`` (or the backend it wraps) if it implements the Protocol ``kind``, else None
    (``capability(agent.backend, AdapterHost)``)."""
    while not isinstance(backend, kind):
        if not isinstance(backend, WrapsBackend):
            return None
        backend = backend.inner
    return backend
