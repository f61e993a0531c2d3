"""Test helpers that ship with nip: a local OpenAI-compatible server, tiny models, and a
fine-tuning backend whose jobs fail on purpose.

``FaultPlan`` is light; the server (FastAPI) and the tiny model (transformers) load on use.
"""

from nip.testing.faults import FaultKind, FaultPlan

_LAZY = {
    "create_app": "nip.testing.server",
    "serve": "nip.testing.server",
    "RunningServer": "nip.testing.server",
    "ServerStats": "nip.testing.server",
    "ScriptedFineTuneBackend": "nip.testing.fine_tuning",
    "build_tiny_chat_model": "nip.testing.tiny_model",
    "build_tiny_lora_adapter": "nip.testing.tiny_model",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nip.testing' has no attribute {name!r}")


__all__ = ["FaultKind", "FaultPlan", *_LAZY]
