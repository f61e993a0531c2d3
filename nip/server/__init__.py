"""The language-model server (``nip serve``): LoRA fine-tuning jobs and inference with vLLM (or,
on a CPU, transformers) behind one OpenAI-compatible API. Clients need only
:mod:`nip.backends.self_hosted` (re-exported here); the server parts load FastAPI on first use."""

from nip.utils.lazy import lazy_attributes

_LAZY = {
    "ServerConfig": "nip.server.config",
    "InsecureServerError": "nip.server.config",
    "check_exposure": "nip.server.config",
    "API_VERSION": "nip.backends.self_hosted",
    "IncompatibleServerError": "nip.backends.self_hosted",
    "ServerVersionWarning": "nip.backends.self_hosted",
    "InferenceEngine": "nip.server.engine",
    "EngineStatus": "nip.server.engine",
    "EngineError": "nip.server.engine",
    "VllmEngine": "nip.server.vllm_engine",
    "TransformersEngine": "nip.server.engine",
    "create_server_app": "nip.server.app",
    "run_server": "nip.server.app",
    "SelfHostedBackend": "nip.backends.self_hosted",
    "wait_for_server": "nip.backends.self_hosted",
    "ServerHandle": "nip.server.background",
    "ServerStartError": "nip.server.background",
    "serve_in_background": "nip.server.background",
    "serving": "nip.server.run_servers",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = list(_LAZY)
