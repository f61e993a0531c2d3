"""Chat-generation backends behind one small interface (:class:`ChatBackend`)."""

from nip.backends._types import (
    ChatBackend,
    ChatMessage,
    Completion,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    TokenUsage,
)
from nip.backends.dummy import DummyBackend, DummyPolicy

__all__ = [
    "ChatBackend",
    "ChatMessage",
    "Completion",
    "DummyBackend",
    "DummyPolicy",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "TokenUsage",
]
