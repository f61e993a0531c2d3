"""One shared backend per endpoint (one concurrency limit, one connection pool), chosen by
the provider table (:mod:`nip.providers`)."""

from __future__ import annotations

from nip.backends._types import ChatBackend
from nip.backends.cache import CachedBackend, ResponseCache
from nip.backends.dummy import DummyBackend
from nip.backends.self_hosted import served_params
from nip.parameters import PureTextAgentParameters
from nip.providers import provider_for
from nip.settings import ExperimentSettings


def endpoint_key(params: PureTextAgentParameters) -> str:
    """A name for the endpoint an agent's requests go to."""
    return provider_for(params).endpoint_key(params)


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

    def backend_for(self, params: PureTextAgentParameters) -> ChatBackend:
        """The (shared) backend serving an agent with these parameters."""
        params = served_params(params, self.settings)  # to the server its run owns, if any
        key = endpoint_key(params)
        if key in self._backends:
            return self._backends[key]
        backend = provider_for(params).chat(params, self.settings)
        mode = self.settings.cache
        if mode == "on" or (mode == "auto" and not isinstance(backend, DummyBackend)):
            if self._cache is None:
                from nip.backends.local.model_store import cache_root

                path = self.settings.cache_path or cache_root() / "responses.sqlite"
                self._cache = ResponseCache(path)
            backend = CachedBackend(backend, self._cache, namespace=key)
        self._backends[key] = backend
        return backend

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
