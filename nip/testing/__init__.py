"""Test helpers that ship with nip: a local OpenAI-compatible server, tiny models, and a
fine-tuning backend whose jobs fail on purpose.

``FaultPlan`` is light; the server (FastAPI) and the tiny model (transformers) load on use.
"""

from nip.testing.faults import FaultKind, FaultPlan
from nip.utils.lazy import lazy_attributes

_LAZY = {
    "create_app": "nip.testing.server",
    "serve": "nip.testing.server",
    "RunningServer": "nip.testing.server",
    "ServerStats": "nip.testing.server",
    "ScriptedFineTuneBackend": "nip.testing.fine_tuning",
    "build_tiny_chat_model": "nip.testing.tiny_model",
    "build_tiny_lora_adapter": "nip.testing.tiny_model",
    "fake_vllm_python": "nip.testing.fake_vllm",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = ["FaultKind", "FaultPlan", *_LAZY]
