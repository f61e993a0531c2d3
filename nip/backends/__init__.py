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
    TokenUsage,
    WrapsBackend,
    capability,
)
from nip.backends.dummy import DummyBackend, DummyPolicy

_LAZY = {
    "OpenAIBackend": "nip.backends.openai_compatible",
    "OpenAIBackendConfig": "nip.backends.openai_compatible",
    "BackendStats": "nip.backends.openai_compatible",
    "MissingAPIKeyError": "nip.backends.openai_compatible",
    "SelfHostedBackend": "nip.backends.self_hosted",
    "LocalBackend": "nip.backends.local",
    "CachedBackend": "nip.backends.cache",
    "ResponseCache": "nip.backends.cache",
    "BackendPool": "nip.backends.pool",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nip.backends' has no attribute {name!r}")


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
    "TokenUsage",
    "WrapsBackend",
    "capability",
]
