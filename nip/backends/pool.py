"""Choosing and sharing backends: configuration in, one backend per endpoint out.

Agents that use the same endpoint share one backend, and so one concurrency limit and one
connection pool. Which class serves a provider is decided here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

from nip.backends._types import ChatBackend
from nip.backends.cache import CachedBackend, ResponseCache
from nip.backends.dummy import DummyBackend
from nip.parameters import PureTextAgentParameters
from nip.settings import ExperimentSettings


def _default_cache_path() -> Path:
    import os

    import platformdirs

    root = os.environ.get("NIP_CACHE_DIR") or platformdirs.user_cache_dir("nip")
    return Path(root) / "responses.sqlite"


def endpoint_key(params: PureTextAgentParameters) -> str:
    """A name for the endpoint an agent's requests go to."""
    if params.use_dummy_api:
        return "dummy"
    provider = params.model_provider
    if provider == "Local":
        return f"local:{params.model_name}"
    if provider == "SelfHosted":  # chat goes through the language-model server
        host = params.language_model_server_scheme_host
        return f"selfhosted:{host}:{params.language_model_server_port}"
    return provider.lower()


class BackendPool:
    """Creates backends on demand and shares them between agents.

    Args:
        settings: Cache and concurrency settings.
        overrides: Backends to use for given endpoint keys (see :func:`endpoint_key`), e.g.
            ``{"openai": OpenAIBackend(...)}`` or a test server's backend.
    """

    def __init__(
        self,
        settings: ExperimentSettings | None = None,
        overrides: dict[str, ChatBackend] | None = None,
    ):
        self.settings = settings or ExperimentSettings()
        self._backends: dict[str, ChatBackend] = dict(overrides or {})
        self._cache: ResponseCache | None = None

    def _make(self, params: PureTextAgentParameters) -> ChatBackend:
        settings = self.settings
        if params.use_dummy_api:
            return DummyBackend(latency_s=settings.dummy_latency_s)
        if params.model_provider == "Local":
            from nip.backends.local import LocalBackend

            return LocalBackend(params.model_name)
        from nip.backends.openai_compatible import OpenAIBackend

        overrides = {}
        if settings.max_concurrency is not None:
            overrides["max_concurrency"] = settings.max_concurrency
        # SelfHosted agents get a SelfHostedBackend (through nip serve) from the same call.
        return OpenAIBackend.from_agent_params(params, **overrides)

    def _cached(self, backend: ChatBackend, key: str) -> ChatBackend:
        mode = self.settings.cache
        if mode == "off" or (mode == "auto" and isinstance(backend, DummyBackend)):
            return backend
        if self._cache is None:
            self._cache = ResponseCache(self.settings.cache_path or _default_cache_path())
        return CachedBackend(backend, self._cache, namespace=key)

    def backend_for(self, params: PureTextAgentParameters) -> ChatBackend:
        """The (shared) backend serving an agent with these parameters."""
        key = endpoint_key(params)
        if key not in self._backends:
            self._backends[key] = self._cached(self._make(params), key)
        return self._backends[key]

    @property
    def backends(self) -> dict[str, ChatBackend]:
        return dict(self._backends)

    async def aclose(self) -> None:
        """Close every backend and the cache."""
        for backend in self._backends.values():
            await backend.aclose()
        self._backends.clear()
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def __repr__(self) -> str:
        return f"BackendPool({list(self._backends)})"
