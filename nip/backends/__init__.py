"""Chat-generation backends behind one small interface (:class:`ChatBackend`)."""

from nip.backends._types import (
    AdapterHost,
    ChatBackend,
    ChatMessage,
    Completion,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ReportsReadiness,
    SharesBaseWeights,
    TokenUsage,
    WrapsBackend,
    capability,
)
from nip.backends.dummy import DummyBackend, DummyPolicy
from nip.utils.lazy import lazy_attributes

_LAZY = {
    "OpenAIBackend": "nip.backends.openai_compatible",
    "OpenAIBackendConfig": "nip.backends.openai_compatible",
    "BackendStats": "nip.backends.openai_compatible",
    "MissingAPIKeyError": "nip.backends.openai_compatible",
    "SelfHostedBackend": "nip.backends.self_hosted",
    "LocalBackend": "nip.backends.local",
    "CachedBackend": "nip.backends.cache",
    "ResponseCache": "nip.backends.cache",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    *_LAZY,
    "AdapterHost",
    "ChatBackend",
    "ChatMessage",
    "Completion",
    "DummyBackend",
    "DummyPolicy",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "ReportsReadiness",
    "SharesBaseWeights",
    "TokenUsage",
    "WrapsBackend",
    "capability",
]
